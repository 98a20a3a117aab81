"""The constraint kinds vLLM takes beside GBNF and JSON (``regex``, ``choice``, ``structural_tag``) against xgrammar
0.2.8, the engine vLLM uses by default, on the same inputs: the same texts accepted and rejected, and, teacher-forced
through SmolLM2's vocabulary, the same next-token masks at every step (over the ordinary tokens: xgrammar never
allows special tokens, and end of generation follows each engine's own stop set).

Where the semantics differ on purpose the cases stay out: ``.`` (ECMA-262's, without line terminators, here;
any character in xgrammar), JSON whitespace (llama-server's converter allows at most one space or two newlines and 20
indents between tokens; xgrammar any), and JSON inside tags uses the same schema in both."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xgrammar as xgr
from transformers import AutoTokenizer
from xgrammar.testing import _is_grammar_accept_string as xgr_accepts

from constrained import Grammar
from constrained.errors import GrammarSyntaxError
from constrained.vocab import Vocabulary

BYTES = Vocabulary([bytes([i]) for i in range(256)] + [b"</s>"], eog_ids=[256])


def ours(g: Grammar, text: str) -> bool:
    """Whether our grammar takes ``text`` whole (byte by byte) and may end after it."""
    m = g.matcher(BYTES)
    for b in text.encode():
        if not m.accept_token(b):
            return False
    return m.allows(256)


REGEXES = {
    r"[a-z]+@[a-z]+\.(com|org)": ["ab@cd.com", "a@b.org", "@b.com", "ab@cd.net", "ab@cd.comx", "x ab@cd.com"],
    r"\d{3}-\d{4}": ["555-1234", "55-1234", "5555-1234", "555-12345", "555_1234", "٥٥٥-1234"],
    r"^(yes|no|maybe)$": ["yes", "no", "maybe", "yesno", "", "Yes"],
    r"(ab)*c?": ["", "ab", "abab", "c", "ababc", "aba", "cc"],
    r"[^a-c]{2,3}": ["de", "xyz", "ab", "d", "wxyz", "éü", "日本"],
    r"\w+\s\w+": ["hello world", "a\tb", "hello  world", "a b c", "x_1 y_2"],
    r"(?:0|[1-9][0-9]*)(\.[0-9]+)?": ["0", "10", "01", "3.14", "3.", ".5", "100.001"],
    r"[\u00e0-\u00ff]+|[A-Z]{2}": ["àé", "AB", "A", "ABC", "àA", "ÿ"],
    r"a{0}b|c{2,}": ["b", "ab", "cc", "ccccc", "c"],
    r"\x41\u0042[\t\n ]": ["AB\t", "AB\n", "AB ", "AB", "AB\r"],
    r"colou?r|gr[ae]y": ["color", "colour", "gray", "grey", "graey", "colouur"],
}


@pytest.mark.parametrize("pattern", sorted(REGEXES))
def test_regex_accepts_what_xgrammar_accepts(pattern: str) -> None:
    g = Grammar.from_regex(pattern)
    xg = xgr.Grammar.from_regex(pattern)
    for text in REGEXES[pattern]:
        assert ours(g, text) == xgr_accepts(xg, text), (pattern, text)


@pytest.mark.parametrize("pattern", [r"(?=a)a", r"(a)\1", r"\bfoo", r"a(?!b)", r"\p{L}"])
def test_regex_refused_where_xgrammar_refuses(pattern: str) -> None:
    with pytest.raises(GrammarSyntaxError):
        Grammar.from_regex(pattern)
    with pytest.raises(RuntimeError):
        xgr.Grammar.from_regex(pattern)


CHOICES = [["yes", "no"], ["Paris", "London", "Rome", "Par"], ['say "hi"', "back\\slash", "tab\there", "日本語", ""]]


@pytest.mark.parametrize("choices", CHOICES, ids=range(len(CHOICES)))
def test_choice_accepts_what_xgrammar_accepts(choices: list[str]) -> None:
    from vllm.v1.structured_output.utils import choice_as_grammar

    g = Grammar.from_choice(choices)
    xg = xgr.Grammar.from_ebnf(choice_as_grammar(choices))    # what vLLM's xgrammar backend compiles
    probes = choices + [c + "x" for c in choices] + [c[:-1] for c in choices if c] + ["", "yesno", "Pari"]
    for text in probes:
        assert ours(g, text) == xgr_accepts(xg, text), (choices, text)


OBJ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
NAMED = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "boolean"}},
         "required": ["city", "n"], "additionalProperties": False}
STRUCTURES = [("<f=x>", OBJ, "</f>"), ("<f=y>", NAMED, "</f>"), ("[[z]]", OBJ, "]]")]
TRIGGERS = ["<f=", "[["]
TAG_TEXTS = [
    "", "hello", "plain text with < and [ and f=",
    'hi <f=x>{"a": 1}</f> bye', '<f=x>{"a":1}</f>', '<f=y>{"city": "Rome", "n": true}</f>',
    '<f=z>{"a": 1}</f>', "<f", "<f=", '<f=x>{"a": 1}', '<<f=x>{"a": 1}</f>', '[<f=x>{"a": 2}</f>',
    '<f=x>{"a": 1}</f><f=y>{"city":"x","n":false}</f>[[z]]{"a": 3}]] tail',
    '<f=x>{ "a" : 1 }</f>', '<f=x>{"a": 1, "b": 2}</f>', '[[z]]{"a": 1}]]]', "[[", "[x[", '[[[z]]{"a": 1}]]',
    '<f=x>{"a": 01}</f>', '<f=x>{"a": -7}</f> and <f=', '<f=x>{"a": 1}</f',
]


def _xgr_tag():
    tags = [xgr.StructuralTagItem(begin=b, schema=json.dumps(s), end=e) for b, s, e in STRUCTURES]
    return xgr.Grammar.from_structural_tag(tags, TRIGGERS)


def _lazy_accepts(g: Grammar, text: str) -> bool:
    return ours(g, text)


def test_structural_tag_accepts_what_xgrammar_accepts() -> None:
    spec = {"structures": [{"begin": b, "schema": s, "end": e} for b, s, e in STRUCTURES], "triggers": TRIGGERS}
    g = Grammar.from_structural_tag(spec)
    xg = _xgr_tag()
    same = [(t, _lazy_accepts(g, t), xgr_accepts(xg, t)) for t in TAG_TEXTS]
    assert all(a == b for _, a, b in same), [x for x in same if x[1] != x[2]]
    assert sum(b for _, _, b in same) >= 8 and sum(not b for _, _, b in same) >= 6
    # the same through every accepted shape
    g2 = Grammar.from_structural_tag(json.dumps(spec))
    g3 = Grammar.from_structural_tag(spec["structures"], TRIGGERS)
    assert g2.source == g.source == g3.source


@pytest.mark.parametrize("flags", [(True, False), (False, True), (True, True)])
def test_triggered_tags_format_with_flags_matches_xgrammar(flags: tuple[bool, bool]) -> None:
    at_least_one, stop_after_first = flags
    fmt = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": TRIGGERS, "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
        "tags": [{"type": "tag", "begin": b, "content": {"type": "json_schema", "json_schema": s}, "end": e}
                 for b, s, e in STRUCTURES]}}
    g = Grammar.from_structural_tag(fmt)
    xg = xgr.Grammar.from_structural_tag(json.dumps(fmt))
    same = [(t, ours(g, t), xgr_accepts(xg, t)) for t in TAG_TEXTS]
    assert all(a == b for _, a, b in same), [x for x in same if x[1] != x[2]]


def test_structural_tag_errors() -> None:
    with pytest.raises(GrammarSyntaxError, match="exactly one trigger"):
        Grammar.from_structural_tag({"structures": [{"begin": "<g>", "schema": OBJ, "end": "</g>"}],
                                     "triggers": ["<f="]})
    with pytest.raises(Exception):   # noqa: B017 - xgrammar refuses it too
        xgr.Grammar.from_structural_tag([xgr.StructuralTagItem(begin="<g>", schema=json.dumps(OBJ), end="</g>")],
                                        ["<f="])
    with pytest.raises(GrammarSyntaxError):
        Grammar.from_structural_tag({"structures": [], "triggers": []})


# ------------------------------------------------------------------------------------ masks on a real vocabulary

@pytest.fixture(scope="module")
def hf(smollm2_hf: Path):  # noqa: ANN201
    tok = AutoTokenizer.from_pretrained(str(smollm2_hf))
    vocab = Vocabulary.from_hf(tok)
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(vocab))
    ordinary = np.ones(len(vocab), dtype=bool)
    ordinary[list(set(info.special_token_ids) | set(vocab.eog_ids) | set(info.stop_token_ids))] = False
    return tok, vocab, info, ordinary


def _masks_agree(hf, ours_grammar: Grammar, xgr_compiled, text: str) -> int:  # noqa: ANN001
    tok, vocab, info, ordinary = hf
    ids = tok.encode(text, add_special_tokens=False)
    m = ours_grammar.matcher(vocab)
    xm = xgr.GrammarMatcher(xgr_compiled)
    bm = xgr.allocate_token_bitmask(1, info.vocab_size)
    steps = 0
    for k in range(len(ids) + 1):
        xm.fill_next_token_bitmask(bm)
        theirs = np.unpackbits(bm[0].numpy().view(np.uint8), bitorder="little")[:len(vocab)].astype(bool)
        mine = np.asarray(m.mask())
        diff = np.flatnonzero((mine != theirs) & ordinary)
        assert not len(diff), (text, k, [(int(i), vocab.pieces[i], bool(mine[i])) for i in diff[:8]])
        # end of generation where the grammar can end, in both
        assert m.can_end() == bool(theirs[info.stop_token_ids].any()), (text, k)
        steps += 1
        if k == len(ids):
            break
        assert m.accept_token(ids[k]) and xm.accept_token(ids[k]), (text, k)
    return steps


def test_masks_agree_with_xgrammar_teacher_forced(hf) -> None:  # noqa: ANN001
    tok, vocab, info, _ = hf
    compiler = xgr.GrammarCompiler(info)
    steps = 0
    for pattern, text in [(r"[a-z]+@[a-z]+\.(com|org)", "jane@mail.org"), (r"\d{3}-\d{4}", "555-1234"),
                          (r"(?:0|[1-9][0-9]*)(\.[0-9]+)?", "1024.5")]:
        steps += _masks_agree(hf, Grammar.from_regex(pattern), compiler.compile_regex(pattern), text)
    from vllm.v1.structured_output.utils import choice_as_grammar

    ch = ["Paris", "London", "Rome"]
    steps += _masks_agree(hf, Grammar.from_choice(ch), compiler.compile_grammar(choice_as_grammar(ch)), "London")
    assert steps >= 20
