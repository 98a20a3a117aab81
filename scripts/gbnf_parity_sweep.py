"""Large sweep of our GBNF parser against llama.cpp's (outside CI).

For N generated valid-ish grammars, N invalid-ish ones and N random byte strings: the parser's result against
``llama_grammar_parser::parse`` (success, symbol table, rule vectors; C++ shim), ``Grammar.from_gbnf`` against
``llama_sampler_init_grammar`` (NULL or not, and llama.cpp's error message as the prefix of ours), and
``str(grammar)`` of every accepted grammar accepted by llama.cpp too.

Usage: GGML_NO_BACKTRACE=1 .venv/bin/python scripts/gbnf_parity_sweep.py [N]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from constrained.grammar import Grammar  # noqa: E402
from oracle.cases.gbnf import gbnf_grammars, valid_gbnf_grammars  # noqa: E402
from oracle.cases.gbnf_parity import check_ir_parity, check_parity, llama_verdict  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    from llama_cpp import Llama

    from constrained.vocab import Vocabulary
    from oracle.llama import vocab_model
    from oracle.sdist import vocab_gguf

    path = vocab_gguf("llama-spm")
    oracle = (vocab_model(path), Vocabulary.from_llama(Llama(str(path), vocab_only=True, verbose=False)))
    counts = {"compared": 0, "accepted": 0, "printed": 0, "ir": 0}

    def one(text: str | bytes) -> None:
        counts["ir"] += check_ir_parity(text, oracle)
        if check_parity(oracle, text):
            counts["compared"] += 1
            try:
                g = Grammar.from_gbnf(text, vocab=oracle[1])
            except ValueError:
                return
            counts["accepted"] += 1
            ok, message = llama_verdict(oracle[0], str(g).encode("utf-8", "surrogateescape"))
            assert ok, (text, str(g), message)
            counts["printed"] += 1

    t = time.time()
    settings_ = settings(max_examples=n, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))
    marks = []
    for strategy in (valid_gbnf_grammars(), gbnf_grammars(), st.binary(max_size=120).map(lambda b: b"root ::= " + b)):
        given(strategy)(settings_(lambda text: one(text)))()
        marks.append(dict(counts))
    for name, before, after in zip(("valid-ish grammars", "invalid-ish grammars", "random bytes"),
                                   [{"compared": 0, "accepted": 0}] + marks[:-1], marks, strict=True):
        print(f"{name}: {after['compared'] - before['compared']} compared, "
              f"{after['accepted'] - before['accepted']} accepted")
    print(f"{counts['compared']} grammars compared with llama.cpp (verdict + error message), "
          f"{counts['accepted']} accepted, {counts['printed']} printed back and accepted by llama.cpp "
          f"in {time.time() - t:.0f} s; {counts['ir']} compared with llama_grammar_parser's own symbol table and "
          "rule vectors")


if __name__ == "__main__":
    main()
