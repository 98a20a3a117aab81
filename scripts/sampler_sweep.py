#!/usr/bin/env python
"""A bigger sweep of our sampler chain against llama.cpp's C chain than the test suite runs.

Random parameter mixes (every sampler, edges, custom orders with repeats, logit biases, mirostat, adaptive-p) on
random logits (plain, heavy ties, -inf, flat), stage by stage: after every sampler the candidate ids, order, logit
and p bits, sorted flag and selection must equal llama.cpp's. ``--dry`` adds DRY on the gpt-2 and llama-spm vocabularies;
``--big`` adds vocabulary sizes up to 262,144.

    GGML_NO_BACKTRACE=1 .venv/bin/python scripts/sampler_sweep.py --sequences 2000 --steps 32 --seed 1 [--big] [--dry] [--seconds 600]
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

from oracle.cases.sampler import random_params  # noqa: E402
from oracle.cases.sampler_chain import ACTIVE, COUNTS, run_sequence  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--big", action="store_true")
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (and print the counts)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    sizes = [2, 3, 5, 17, 64, 128, 129, 200, 700, 1024, 1025, 1500, 5000, 32000]
    if a.big:
        sizes += [151936, 262144]
    vocabs = []
    if a.dry:
        from constrained.vocab import Vocabulary
        from oracle.llama import vocab_model
        from oracle.sdist import vocab_gguf
        for name in ("gpt-2", "llama-spm"):
            vm = vocab_model(vocab_gguf(name))
            vocabs.append((vm, Vocabulary.from_llama(vm.vocab)))
    t0 = time.time()
    failures = 0
    for i in range(a.sequences):
        if a.seconds and time.time() - t0 > a.seconds:
            break
        if vocabs and i % 4 == 0:
            vm, v = vocabs[(i // 4) % len(vocabs)]
            p = random_params(rng, vm.n_vocab, dry=True)
            args = dict(vocab=v, vm=vm, prompt_len=100)
            n = vm.n_vocab
        else:
            n = int(rng.choice(sizes))
            p = random_params(rng, n)
            args = {}
        steps = a.steps if n <= 32000 else max(2, a.steps // 8)
        try:
            run_sequence(p, n, rng, steps, **args)
        except AssertionError as e:
            failures += 1
            print(f"FAIL sequence {i}: {str(e)[:3000]}")
        if (i + 1) % 100 == 0:
            print(f"{i + 1} sequences, {COUNTS['steps']} steps, {COUNTS['stages']} stages, {failures} failures, "
                  f"{time.time() - t0:.0f} s", flush=True)
    print(f"done: {COUNTS['sequences']} sequences passed, {failures} failed; {COUNTS['steps']} tokens, "
          f"{COUNTS['stages']} stage states compared; samplers that changed the array: {dict(sorted(ACTIVE.items()))}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
