"""GBNF parse time: ``Grammar.from_gbnf`` (lark + layout + checks) against llama.cpp's ``llama_sampler_init_grammar``
(its parser plus the initial stacks), on llama.cpp's grammars/, our bundled grammars and the 78 grammars of
llama.cpp's JSON-schema test cases (test-json-schema-to-grammar.cpp).

Usage: GGML_NO_BACKTRACE=1 .venv/bin/python benchmarks/bench_gbnf_parse.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from constrained.grammars import load, names  # noqa: E402

from constrained.grammar import Grammar  # noqa: E402


def _best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def main() -> None:
    from oracle.cases.json_schema import upstream_cases
    from oracle.llama import L, vocab_model
    from oracle.sdist import llama_cpp_source, vocab_gguf

    vm = vocab_model(vocab_gguf("llama-spm"))
    sets = {
        "llama.cpp grammars/": [p.read_text() for p in sorted((llama_cpp_source() / "grammars").glob("*.gbnf"))],
        "bundled grammars": [load(n) for n in names()],
        "JSON-schema test grammars": [c.expected for c in upstream_cases() if c.success],
    }

    def llama(text: bytes) -> None:
        smpl = L.llama_sampler_init_grammar(vm.vocab, text, b"root")
        L.llama_sampler_free(smpl)

    print(f"{'set':28} {'n':>3} {'bytes':>7} {'ours ms (median/max)':>22} {'llama.cpp ms':>14} {'ratio':>6}")
    for name, texts in sets.items():
        ours = [_best_of(lambda t=t: Grammar.from_gbnf(t)) for t in texts]
        theirs = [_best_of(lambda b=b: llama(b)) for b in (t.encode() for t in texts)]
        ratio = statistics.median(o / max(c, 1e-6) for o, c in zip(ours, theirs, strict=True))
        print(f"{name:28} {len(texts):>3} {max(len(t) for t in texts):>7} "
              f"{statistics.median(ours):>10.2f} / {max(ours):>8.2f} "
              f"{statistics.median(theirs):>14.3f} {ratio:>6.1f}")


if __name__ == "__main__":
    main()
