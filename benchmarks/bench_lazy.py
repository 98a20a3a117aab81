#!/usr/bin/env python
"""Lazy grammar cost per token while waiting for the trigger: our LazyMatcher vs llama.cpp's lazy grammar sampler.

Both are fed the same untriggered text (a token that never completes the trigger), and the time of one
``accept`` + one single-token check (what llama-server does per generated token: ``allows`` is free in llama.cpp while
waiting, ``accept`` rescans the whole buffer with every pattern) is measured once the buffer holds 100, 1,000 and
10,000 tokens. Patterns: llama-server's WORD trigger for Qwen / Hermes (``<tool_call>\\n``, escaped) and an
unbounded capture-group pattern (``[\\s\\S]*?(<tool_call>)[\\s\\S]*``, which we search over the whole buffer too).

    GGML_NO_BACKTRACE=1 .venv/bin/python benchmarks/bench_lazy.py --vocab qwen2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GBNF = 'root ::= "<tool_call>\\n{" [a-z]* "}"'


def main() -> None:
    from constrained.grammar import Grammar
    from constrained.grammar.lazy_regex import regex_escape
    from constrained.vocab import Vocabulary
    from oracle.lazy import CLazyGrammar
    from oracle.llama import vocab_model
    from oracle.sdist import vocab_gguf

    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default="qwen2")
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--probe", type=int, default=20, help="tokens timed at each size")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds llama.cpp may take to fill the buffer to the next size (else it is skipped)")
    a = ap.parse_args()
    path = vocab_gguf(a.vocab)
    vocab, vm = Vocabulary.from_gguf(path), vocab_model(path)
    tok = vocab.tokenize(b" hello")[0]
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"vocabulary {a.vocab} ({len(vocab)} tokens); filler token {tok} {vocab.pieces[tok]!r}; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'pattern':<30} {'buffered':>9} {'ours us/tok':>12} {'llama.cpp us/tok':>17} {'ratio':>8}")
    for label, pats in (("WORD <tool_call>\\n", [regex_escape("<tool_call>\n")]),
                        ("[\\s\\S]*?(<tool_call>)[\\s\\S]*", [r"[\s\S]*?(<tool_call>)[\s\S]*"]),
                        ("<tool_call>\\s*\\{ (unbounded)", [r"<tool_call>\s*\{"])):
        ours = Grammar.from_gbnf(GBNF).matcher(vocab, trigger_patterns=pats)
        ref = CLazyGrammar(vm, GBNF, pats)
        done = 0
        ref_ok = True
        t_ref = 0.0
        for n in sizes:
            if ref_ok and t_ref * (n - done) > a.budget:
                ref_ok = False       # llama.cpp would need more than the budget just to fill the buffer
            while done < n:
                ours.accept_token(tok)
                if ref_ok:
                    ref.accept(tok)
                done += 1
            t0 = time.perf_counter()
            for _ in range(10 * a.probe):       # ours is fast: more tokens, less scheduler noise
                ours.allows(tok)
                ours.accept_token(tok)
            t_ours = (time.perf_counter() - t0) / (10 * a.probe)
            if not ref_ok:
                done += 10 * a.probe
                print(f"{label:<30} {n:>9} {t_ours * 1e6:>12.1f} {'> budget':>17} {'':>8}", flush=True)
                continue
            t0 = time.perf_counter()
            for _ in range(a.probe):
                ref.allows(tok)
                ref.accept(tok)
            t_ref = (time.perf_counter() - t0) / a.probe
            for _ in range(9 * a.probe):        # keep both buffers the same length
                ref.accept(tok)
            done += 10 * a.probe
            assert not ours.triggered and ref.awaiting
            print(f"{label:<30} {n:>9} {t_ours * 1e6:>12.1f} {t_ref * 1e6:>17.1f} {t_ref / t_ours:>7.1f}x",
                  flush=True)
        ref.free()


if __name__ == "__main__":
    main()
