"""A large sweep of the JSON schema converter against llama.cpp (outside CI): hypothesis-generated schemas compared
with llama.cpp's json_schema_to_grammar through the C++ shim (same text or same error), and documents drawn from each
grammar checked with llama.cpp's grammar sampler and, when nothing is reported unenforced, with jsonschema.

    .venv/bin/python scripts/json_schema_sweep.py 3000 [/tmp/last-schema.json]
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from hypothesis import HealthCheck, given, settings  # noqa: E402

from oracle.cases.json_schema import COUNTS, check_documents, compare_with_oracle  # noqa: E402
from oracle.cases.json_schema_strategies import schemas  # noqa: E402
from oracle.llama import L, vocab_model  # noqa: E402
from oracle.sdist import vocab_gguf  # noqa: E402


def main(n: int, last: str | None = None) -> None:
    vm = vocab_model(vocab_gguf("gpt-2"))
    eos = L.llama_vocab_eos(vm.vocab)
    rng = random.Random(0)
    failures: list[str] = []

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(schemas())
    def run(schema: dict) -> None:
        if last:
            Path(last).write_text(json.dumps(schema, ensure_ascii=False))  # to find a crash of the C++ side
        try:
            COUNTS["oracle:" + compare_with_oracle(schema)] = COUNTS.get("oracle:" + compare_with_oracle(schema), 0) + 1
            a, v = check_documents(vm, eos, schema, rng, n=3)
            COUNTS["documents accepted"] = COUNTS.get("documents accepted", 0) + a
            COUNTS["documents validated"] = COUNTS.get("documents validated", 0) + v
        except AssertionError as e:
            failures.append(str(e))

    t = time.time()
    run()
    print(f"{n} schemas in {time.time() - t:.0f}s:", dict(sorted(COUNTS.items())))
    print(len(failures), "failures")
    for f in failures[:20]:
        print("----\n" + f[:1500])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000, sys.argv[2] if len(sys.argv) > 2 else None)
