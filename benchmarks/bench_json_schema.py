"""Conversion time: constrained.json_schema vs llama.cpp's json_schema_to_grammar (through the C++ shim of the
oracle tests), in the same run, on the same schemas.

    .venv/bin/python benchmarks/bench_json_schema.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from constrained.json_schema import convert_json_schema  # noqa: E402
from tests.json_schema_table import TABLE  # noqa: E402
from tests.oracle.schema import oracle_convert  # noqa: E402


def _big_schema(n: int) -> dict:
    item = {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}, "when": {"type": "string", "format": "date-time"},
        "n": {"type": "integer", "minimum": 0, "maximum": 1000}, "tags": {"type": "array", "items": {"type": "string"},
                                                                          "maxItems": 5},
        "kind": {"enum": ["a", "b", "c"]}, "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
        "required": ["id", "n"]}
    return {"type": "object", "properties": {f"field_{i}": {"$ref": "#/$defs/item"} for i in range(n)},
            "$defs": {"item": item}}


def bench(name: str, texts: list[str], repeat: int) -> None:
    def ours() -> None:
        for t in texts:
            try:
                convert_json_schema(t)
            except ValueError:
                pass

    def theirs() -> None:
        for t in texts:
            oracle_convert(t)

    results = {}
    for label, fn in (("ours", ours), ("llama.cpp", theirs)):
        fn()
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        results[label] = best
    print(f"{name:<32} ours {results['ours'] * 1e3:9.2f} ms   llama.cpp {results['llama.cpp'] * 1e3:9.2f} ms   "
          f"ratio {results['ours'] / results['llama.cpp']:6.1f}x")


def main() -> None:
    table = [t if isinstance(t, str) else json.dumps(t, ensure_ascii=False) for t in TABLE]
    bench(f"table ({len(table)} schemas)", table, 5)
    for n in (10, 200):
        bench(f"object with {n} $ref properties", [json.dumps(_big_schema(n))], 5)
    bench("2000 optional properties", [json.dumps({"type": "object", "properties": {
        f"p{i}": {"type": "integer"} for i in range(2000)}})], 3)


if __name__ == "__main__":
    main()
