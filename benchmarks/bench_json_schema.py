"""Conversion time per schema: constrained.json_schema vs llama.cpp's json_schema_to_grammar (through the C++ shim of
the oracle tests), in the same run, on the same schemas, interleaved ours / theirs, in thread CPU time.

Schemas: our oracle table (``oracle/cases/json_schema_table.py``), llama.cpp's own converter cases, every schema of the
JSON-Schema-Test-Suite (drafts 2020-12 and 7) and three large ones. Each schema is converted ``--repeat`` times by
both sides (the fastest kept); before each of our conversions the converter's caches of earlier results
(``read_body``, ``body_facts``, ``compile_pattern``) are cleared, so a figure never comes from a cache of an earlier
schema; the tables of fixed parts (the fixed rules' facts, the format automata) are built once per process, as
llama.cpp's fixed rules are compiled in. The "all" mode
line times ``convert_json_schema(schema, enforce="all")`` on the same schemas (no C++ counterpart).

    .venv/bin/python benchmarks/bench_json_schema.py [--repeat 3] [--no-all]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from constrained.errors import ConstrainedError  # noqa: E402
from constrained.json_schema import _gbnf, convert_json_schema, regex  # noqa: E402
from oracle.cases.json_schema import upstream_cases  # noqa: E402
from oracle.cases.json_schema_suite import all_schemas  # noqa: E402
from oracle.cases.json_schema_table import TABLE  # noqa: E402
from oracle.schema import oracle_convert  # noqa: E402


def _big_schema(n: int) -> dict:
    item = {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}, "when": {"type": "string", "format": "date-time"},
        "n": {"type": "integer", "minimum": 0, "maximum": 1000}, "tags": {"type": "array", "items": {"type": "string"},
                                                                          "maxItems": 5},
        "kind": {"enum": ["a", "b", "c"]}, "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
        "required": ["id", "n"]}
    return {"type": "object", "properties": {f"field_{i}": {"$ref": "#/$defs/item"} for i in range(n)},
            "$defs": {"item": item}}


def corpus() -> list[str]:
    texts = [t if isinstance(t, str) else json.dumps(t, ensure_ascii=False) for t in TABLE]
    texts += [c.schema for c in upstream_cases()]
    texts += [json.dumps(s) for s in all_schemas()]
    texts += [json.dumps(_big_schema(10)), json.dumps(_big_schema(200)),
              json.dumps({"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(300)}})]
    return texts


def clear_caches() -> None:
    _gbnf.read_body.cache_clear()
    _gbnf.body_facts.cache_clear()
    regex.compile_pattern.cache_clear()


def ours(text: str, enforce: str = "llama.cpp") -> float:
    clear_caches()
    t = time.thread_time()
    try:
        convert_json_schema(text, enforce=enforce)
    except (ConstrainedError, ValueError, RecursionError):
        pass
    return time.thread_time() - t


def theirs(text: str) -> float:
    t = time.thread_time()
    oracle_convert(text)
    return time.thread_time() - t


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def line(label: str, xs: list[float]) -> str:
    return (f"{label:<22} median {statistics.median(xs) * 1e3:7.3f} ms  p90 {pct(xs, 0.9) * 1e3:7.3f} ms  "
            f"p99 {pct(xs, 0.99) * 1e3:8.3f} ms  max {max(xs) * 1e3:9.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-all", action="store_true", help="skip the enforce='all' timing")
    args = ap.parse_args()
    texts = corpus()
    mine, cpp, every = [], [], []
    for text in texts:
        ours(text), theirs(text)  # warm-up: imports, the shim, code paths
        a = b = float("inf")
        for _ in range(args.repeat):
            a = min(a, ours(text))
            b = min(b, theirs(text))
        mine.append(a)
        cpp.append(b)
        if not args.no_all:
            every.append(min(ours(text, "all") for _ in range(args.repeat)))
    ratios = [x / y for x, y in zip(mine, cpp, strict=True) if y > 0]
    print(f"{len(texts)} schemas, thread CPU time, best of {args.repeat}, caches cleared "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(line("ours (llama.cpp mode)", mine))
    print(line("llama.cpp (C++ shim)", cpp))
    print(f"ratio of medians {statistics.median(mine) / statistics.median(cpp):.2f}x   median of per-schema ratios "
          f"{statistics.median(ratios):.2f}x   total ours {sum(mine) * 1e3:.0f} ms / llama.cpp {sum(cpp) * 1e3:.0f} ms")
    if every:
        print(line('ours enforce="all"', every))
    worst = sorted(range(len(texts)), key=lambda i: -mine[i])[:5]
    for i in worst:
        print(f"  slowest: ours {mine[i] * 1e3:7.2f} ms  llama.cpp {cpp[i] * 1e3:7.2f} ms  {texts[i][:80]!r}")


if __name__ == "__main__":
    main()
