"""``Grammar.from_regex``, ``from_choice`` and ``from_structural_tag``: the regex grammar against Python's ``re``
(``fullmatch``, on patterns where ECMA-262 and Python agree) on random texts; structural tags' lazy form against the
same tags written as one plain grammar, mask for mask, byte by byte; the differential tests against xgrammar run in
the scale venv (tests/scale/test_kinds_xgrammar.py)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from constrained import Grammar
from constrained.errors import GrammarSyntaxError
from constrained.grammar.kinds import parse_structural_tag, structural_tag_gbnf
from constrained.vocab import Vocabulary
from tests.scale import run_in_scale_venv

BYTES = Vocabulary([bytes([i]) for i in range(256)] + [b"</s>"], eog_ids=[256])
EOS = 256


def accepts(g: Grammar, text: str) -> bool:
    m = g.matcher(BYTES)
    for b in text.encode():
        if not m.accept_token(b):
            return False
    return m.allows(EOS)


PATTERNS = [r"[a-c]+x?", r"(ab|ba)*c{1,3}", r"a?b?c?", r"[^ab]{2}|a+", r"(a|b)*abb", r"x(y(z|w)?)+", r"[0-9]{2,4}",
            r"(?:a{2}|b{3})+", r"a*(b|c)a*", r"^ab$|ba", r"[a-c]{0,2}c", r"\d+\.\d*"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_matches_what_python_fullmatch_matches(pattern: str) -> None:
    rng = random.Random(pattern)
    g = Grammar.from_regex(pattern)
    rx = re.compile(pattern)
    alphabet = sorted({c for c in pattern if c.isalnum() or c in ". "} - set("d")) + ["q", "5"]
    texts = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(600)}
    texts |= {m.group(0) for t in list(texts) for m in rx.finditer(t)}     # and pieces the pattern matches
    hits = 0
    for text in sorted(texts):
        want = rx.fullmatch(text) is not None
        hits += want
        assert accepts(g, text) == want, (pattern, text)
    assert hits >= 2


def test_regex_large_repetition_falls_back_to_the_syntax_tree() -> None:
    g = Grammar.from_regex(r"[a-z]{1,5000}")
    assert accepts(g, "abc") and accepts(g, "z" * 5000) and not accepts(g, "z" * 5001) and not accepts(g, "")
    assert "rep0-o4999" in g.source


@pytest.mark.parametrize("pattern", [r"(?=a)a", r"(a)\1", r"\bx", "a(", r"[b-a]", "a**"])
def test_regex_errors(pattern: str) -> None:
    with pytest.raises(GrammarSyntaxError):
        Grammar.from_regex(pattern)


def test_regex_that_matches_nothing_is_an_error() -> None:
    with pytest.raises(GrammarSyntaxError, match="matches no text"):
        Grammar.from_regex("a^b")


def test_choice() -> None:
    g = Grammar.from_choice(["yes", "no", 'q"uote\\', "tab\t", "", "日本"])
    for text in ["yes", "no", 'q"uote\\', "tab\t", "", "日本"]:
        assert accepts(g, text)
    for text in ["ye", "yess", "n", "tab", "日"]:
        assert not accepts(g, text)
    for bad in ([], "yes", [1], None):
        with pytest.raises(GrammarSyntaxError):
            Grammar.from_choice(bad)  # type: ignore[arg-type]


OBJ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
SPEC = {"structures": [{"begin": "<f=x>", "schema": OBJ, "end": "</f>"},
                       {"begin": "<f=y>", "schema": {"type": "boolean"}, "end": "</f>"},
                       {"begin": "aab", "schema": {"type": "null"}, "end": ""}],
        "triggers": ["<f=", "aa"]}


def test_structural_tag_semantics() -> None:
    g = Grammar.from_structural_tag(SPEC)
    yes = ["", "free text", '<f=x>{"a": 1}</f>', 'x <f=y>true</f> y <f=x>{"a":2}</f>', "aabnull", "a",
           '<f=y>false</f>aabnull tail <f', "<<f=y>true</f>"]
    no = ['<f=x>{"a": 1}', "<f=z>", '<f=x>{"a": 1}</f >'[:-2] + "x", "aaab", "aa", '<f=y>true</f>aac']
    for t in yes:
        assert accepts(g, t), t
    for t in no:
        assert not accepts(g, t), t


@pytest.mark.parametrize("seed", range(6))
def test_lazy_structural_tag_equals_the_plain_grammar_mask_for_mask(seed: int) -> None:
    """The lazy form (waiting phase = llama.cpp's lazy grammar) against the whole output as one grammar (the
    free text before the first trigger written as rules too): the same masks at every byte of random texts."""
    st = parse_structural_tag(SPEC)
    lazy = Grammar.from_structural_tag(SPEC)
    lazy_source = lazy.source.splitlines()
    plain_text = structural_tag_gbnf(st, lazy=False, json_rules=lambda schema, prefix: ("", []))
    # the same tag rules as the lazy grammar's (its lines after the root), with the plain root and free text
    plain = Grammar.from_gbnf("\n".join([plain_text.splitlines()[0], *lazy_source[1:],
                                          *[ln for ln in plain_text.splitlines() if ln.startswith("pre-")]]) + "\n")
    rng = random.Random(seed)
    words = ['<f=x>{"a": 1}</f>', "<f=y>true</f>", "aabnull", "<f", "aa", "a", "x", " ", "<", "f=", "{", "}"]
    # while waiting, a lazy grammar masks nothing (llama.cpp's), where the plain grammar also refuses NUL and bytes
    # that cannot start UTF-8: compared over ASCII text (and EOS)
    clean = np.zeros(len(BYTES), dtype=bool)
    clean[1:128] = True
    clean[EOS] = True
    checked = 0
    for _ in range(20):
        a, b = lazy.matcher(BYTES), plain.matcher(BYTES)
        text = "".join(rng.choice(words) for _ in range(rng.randint(1, 6))).encode()
        for byte in text:
            ma, mb = np.asarray(a.mask()), np.asarray(b.mask())
            assert (ma == mb)[clean].all(), (text, np.flatnonzero((ma != mb) & clean)[:10])
            checked += 1
            ok = a.accept_token(byte)
            assert ok == b.accept_token(byte), text
            if not ok:
                break
    assert checked > 100


def test_structural_tag_errors() -> None:
    with pytest.raises(GrammarSyntaxError, match="exactly one trigger"):
        Grammar.from_structural_tag({"structures": [{"begin": "<g>", "schema": OBJ, "end": "</g>"}], "triggers": ["<f"]})
    with pytest.raises(GrammarSyntaxError, match="trigger"):
        Grammar.from_structural_tag({"structures": [{"begin": "<g>", "schema": OBJ, "end": "</g>"}], "triggers": []})
    with pytest.raises(GrammarSyntaxError):
        Grammar.from_structural_tag("not json")
    with pytest.raises(GrammarSyntaxError, match="triggered_tags"):
        Grammar.from_structural_tag({"type": "structural_tag", "format": {"type": "const_string", "value": "x"}})


def test_against_xgrammar_in_the_scale_venv() -> None:
    run_in_scale_venv("tests/scale/test_kinds_xgrammar.py", timeout=900)
