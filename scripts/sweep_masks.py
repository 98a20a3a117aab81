#!/usr/bin/env python
"""Large mask-parity sweep of the grammar matcher against llama.cpp's grammar sampler (outside CI).

Random walks (as ``tests/grammar/test_matcher_parity.py``) over llama.cpp's ``grammars/*.gbnf``, two JSON-schema grammars,
a token-reference grammar and the 12 JSON schemas of ``benchmarks/bench_grammar.py``, round-robin over
vocabularies, until ``--masks`` full-vocabulary step-masks have been compared. Every step also checks ``allows`` on probe tokens and that a rejected token is refused.

    GGML_NO_BACKTRACE=1 .venv/bin/python scripts/sweep_masks.py --masks 100000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from constrained.json_schema import json_schema_to_gbnf  # noqa: E402
from oracle.cases.matcher import oracle_vocab, parity_grammars, parity_walk, parse_gbnf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_grammar import SCHEMAS  # noqa: E402

DEFAULT_VOCABS = ("llama-spm", "phi-3", "gpt-2", "qwen2", "gemma-4", "llama-bpe", "deepseek-coder", "falcon",
                  "starcoder", "refact", "mpt", "baichuan", "command-r", "deepseek-llm", "qwen35", "gpt-neox",
                  "aquila", "bert-bge", "nomic-bert-moe")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--masks", type=int, default=100_000, help="stop after this many compared step-masks")
    ap.add_argument("--steps", type=int, default=40, help="steps per walk")
    ap.add_argument("--big-steps", type=int, default=12, help="steps per walk for vocabularies over 120k tokens")
    ap.add_argument("--big-rounds", type=int, default=1,
                    help="rounds that include the vocabularies over 120k tokens (llama.cpp is slow on them)")
    ap.add_argument("--vocabs", default=",".join(DEFAULT_VOCABS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-schemas", dest="schemas", action="store_false",
                    help="leave out the 12 JSON schemas of benchmarks/bench_grammar.py")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    loaded = {}
    for name in args.vocabs.split(","):
        try:
            vm, vocab = oracle_vocab(name)
        except Exception as e:  # noqa: BLE001 - a vocabulary llama.cpp cannot load is reported and skipped
            print(f"skip {name}: {e}", flush=True)
            continue
        grammars = {}
        texts = dict(parity_grammars(vocab))
        if args.schemas:       # benchmarks/bench_grammar.py's 12 schemas: bounded strings, patterns, formats, enums
            for sname, schema in SCHEMAS.items():
                texts[f"bench-{sname}"] = json_schema_to_gbnf(schema)
        for gname, text in texts.items():
            try:
                grammars[gname] = (text, parse_gbnf(text, vocab=vocab))
            except Exception as e:  # noqa: BLE001
                print(f"skip {name}/{gname}: {e}", flush=True)
        loaded[name] = (vm, vocab, grammars)
        print(f"loaded {name}: {vm.n_vocab} tokens, {len(grammars)} grammars", flush=True)
    total, walks, per_vocab = 0, 0, dict.fromkeys(loaded, 0)
    t0 = time.time()
    rounds = 0
    while total < args.masks:
        rounds += 1
        if rounds > args.big_rounds and all(len(v[1]) > 120_000 for v in loaded.values()):
            break                # only vocabularies over 120k tokens, and their rounds are done
        for name, (vm, vocab, grammars) in loaded.items():
            if len(vocab) > 120_000 and rounds > args.big_rounds:
                continue
            for gname, (text, parsed) in grammars.items():
                try:
                    n = parity_walk(vm, vocab, text, parsed, rng, args.big_steps if len(vocab) > 120_000 else args.steps)
                except AssertionError as e:
                    print(f"MISMATCH {name}/{gname}: {e}", flush=True)
                    return 1
                total += n
                walks += 1
                per_vocab[name] += n
            print(f"{total} step-masks compared in {walks} walks, {time.time() - t0:.0f} s; per vocabulary "
                  f"{per_vocab}", flush=True)
            if total >= args.masks:
                break
    print(f"DONE: {total} step-masks compared, all equal ({walks} walks, {sum(v > 0 for v in per_vocab.values())} of "
          f"{len(loaded)} vocabularies)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
