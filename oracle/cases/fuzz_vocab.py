"""A small hostile vocabulary for fuzzing the matcher, and the mask llama.cpp's own algorithm gives on it.

``VOCAB`` has ``N`` pieces: single bytes, multi-byte pieces, split UTF-8 sequences, an empty piece, ``</s>`` as
end of generation. ``reference_mask(matcher)`` is ``llama_grammar_apply_impl`` by the port: every candidate through
``GrammarRules.reject_candidates`` in llama.cpp's order (checked against llama.cpp in the grammar oracle tests).
Used by ``tests/grammar/test_fuzz_grammar.py``, ``tests/grammar/test_hardening.py`` and ``scripts/fuzz_grammar.py``.

Example:
    >>> from constrained import Grammar
    >>> m = Grammar.from_gbnf('root ::= "ab"').matcher(VOCAB)
    >>> bool(reference_mask(m)[PIECES.index(b"ab")]), bool(reference_mask(m)[PIECES.index(b"b")])
    (True, False)
"""

from __future__ import annotations

import numpy as np

from constrained.grammar.tokenindex import apply_view, decode_utf8
from constrained.vocab import Vocabulary

PIECES = [b"a", b"b", b"ab", b"ba", b"aaa", b" ", b"  ", b"\n", b"0", b"12", b"\"", b"{", b"}", b"[", b"]", b",",
          b"(", b")", b"x", b"z", "é".encode(), "é".encode()[:1], "é".encode()[1:], "ß".encode() + b"a",
          "\u3042".encode()[:2], "\u3042".encode()[2:], b"\xf0\x9f", b"\x98\x80", b"\\", b"-", b"", b"\x00a", b"</s>",
          b"<s>", b"a b", b"\t"]
VOCAB = Vocabulary(PIECES, eog_ids=[PIECES.index(b"</s>")],
                   tokenizer=lambda b, ps: [PIECES.index(b)] if b in PIECES else [0, 0])
N = len(PIECES)


def reference_mask(m) -> np.ndarray:  # noqa: ANN001
    """llama_grammar_apply_impl by the port: every candidate through ``reject_candidates`` in llama.cpp's order."""
    cg = m.compiled
    g, idx = cg.rules, cg.index
    stacks, partial = m.stacks, m.partial_utf8
    out = np.zeros(N, dtype=bool)
    cands = []
    for tok in range(N):
        if idx.eog[tok]:
            out[tok] = any(not s for s in stacks)
        elif not idx.dead[tok]:
            cps, val, rem = decode_utf8(PIECES[tok], *partial)
            cands.append((tok, apply_view(cps), 0, (val if rem > 0 else 0, rem), tok))
    rejected = {c[0] for c in g.reject_candidates(stacks, cands)} if stacks else {c[0] for c in cands}
    for c in cands:
        out[c[0]] = c[0] not in rejected
    return out
