"""Trigger patterns: our translation of ECMAScript against std::regex itself, through llama.cpp's own
``llama_grammar_trigger_pattern::find`` (``oracle/lazy.py``).

Every pattern we accept finds the same replay start as llama.cpp on every text; every pattern std::regex refuses we
refuse too (we also refuse a few constructs whose libstdc++ behaviour we do not reproduce, listed in
``constrained/grammar/lazy_regex.py``).
"""

from __future__ import annotations

import random

import pytest

from constrained.errors import ConstrainedError, TriggerPatternError
from constrained.grammar.lazy_regex import TriggerPattern, regex_escape
from oracle.cases.lazy import random_pattern, random_text
from oracle.lazy import RegexError, regex_find

# the patterns llama-server builds at this commit (common/parsers/*.cpp, chat-auto-parser-generator.cpp) and the
# dialect's corners
FIXED = [
    regex_escape("<tool_call>\n"), regex_escape("[TOOL_CALLS]"), regex_escape('{"type": "function",'),
    regex_escape("<|tool_call>"), regex_escape("<｜tool▁calls▁begin｜>"), ">>>(?!all)", r"^\s+to$",
    r"^<\|channel\|>(?:commentary|analysis)\s+to=functions$", r"<\|start\|>assistant(\s+to)",
    r"<\|start\|>assistant(<\|channel\|>(?:commentary|analysis)\s+to)", r"[\s\S]*?(<tool_call>)[\s\S]*",
    r"^[\s\S]*?(<tool_call>)[\s\S]*$", r"x(?:(a)|b)+", r"^x(a)?|x(b)$", r"(a|ab)(c|bcd)(d*)", r"x(a|ab)*?(b)",
    r".", r"$", r"a$", r"\B", r"\b", r"[]a]", r"[^]", r"\u0141", r"\u00e9", r"[\x80-\x7f]", r"[a-b-c]", r"a**",
    r"a{1}{2}", r"a+*", r"[[:ALPHA:]]", r"[[:w:]]", r"[[:graph:]]", r"\e", r"\Z", r"a}", r"]", r"(?!a)", r"(?!)",
    r"(?=)", r"é+", r"[é]", r"\0", r"[\b]", r"\d-z", "\n", r"(a+)+$", r"(a|aa)+$", r"x(a|b?c)*?(d)", r"(?:a*)*b",
    r"^(a+)+$", r">>>(?!all)\s?", r"(?=a)b*", r"x(?:)*", r"(\s*)x",
]
REFUSED = [r"a{,3}", r'{"a', r"(?<=a)b", r"[a-\xc3]", r"[\x00-\xff]", r"[\d-z]", r"\x4", r"\8", r"[\B]",
           r"(?i)a", r"[z-a]", r"\c", r"a{2,1}", r"(?=a)*", r"^*", r"\b*", r"[[:foo:]]", r"a{1,2", "\\", r"(?"]
TEXTS = [b"", b"a", b"ab", b"xab", b"xb", b"abcd", b"xabab", b"\n", b"a\n", b"\r", b"\xc3\xa9\xc3\xa9", b"\xe9",
         b"\x00", b"\x08", b"A", b"e", b"Z", b"}", b"]", b" to", b"hi <tool_call> x", b"<|channel|>analysis to=functions",
         b"x <|start|>assistant to", b">>>all", b">>>get", b"[TOOL_CALLS][{", b"1-z", b"xay", b"xy", b"_a"]


def _same(pattern: str, texts: list[bytes]) -> None:
    try:
        ours: TriggerPattern | None = TriggerPattern.compile(pattern)
    except TriggerPatternError:
        ours = None
    for t in texts:
        try:
            want = regex_find(pattern, t)
        except RegexError:
            assert ours is None, f"std::regex refuses {pattern!r}, we accept it"
            return
        if ours is None:
            return   # a construct we refuse on purpose (checked by test_refusals)
        assert ours.find(t) == want, (pattern, t, ours.regex.pattern)


@pytest.mark.parametrize("pattern", FIXED)
def test_fixed_patterns_find_what_llama_finds(pattern: str) -> None:
    TriggerPattern.compile(pattern)           # all of these are supported
    _same(pattern, TEXTS)


@pytest.mark.parametrize("pattern", REFUSED)
def test_refusals(pattern: str) -> None:
    with pytest.raises(TriggerPatternError) as e:
        TriggerPattern.compile(pattern)
    assert isinstance(e.value, ConstrainedError)


def test_unreproduced_constructs_are_refused_not_guessed() -> None:
    # libstdc++ compiles these, with behaviour we do not reproduce: refused with a clear message
    for p in [r"(a)\1", r"\cA", r"\01", r"[[=a=]]", r"[[.a.]]", r"(?=\b)", r"(?!^a)", r"a{1001}"]:
        regex_find(p, b"a")                 # std::regex takes it
        with pytest.raises(TriggerPatternError):
            TriggerPattern.compile(p)


def test_random_patterns_agree_with_std_regex() -> None:
    rng = random.Random(20261201)
    agreed = refused_both = 0
    for _ in range(1500):
        p = random_pattern(rng)
        texts = [random_text(rng) for _ in range(6)]
        _same(p, texts)
        try:
            TriggerPattern.compile(p)
            agreed += 1
        except TriggerPatternError:
            refused_both += 1
    assert agreed > 800


def test_window_search_equals_full_search() -> None:
    """find(text, pos) with the start bound the lazy matcher uses is the whole-text search."""
    rng = random.Random(7)
    for _ in range(300):
        p = random_pattern(rng)
        try:
            tp = TriggerPattern.compile(p)
        except TriggerPatternError:
            continue
        if tp.reach is None:
            continue
        old = random_text(rng, 30)
        if tp.find(old) >= 0:
            continue
        new = old + random_text(rng, 4)
        lo = len(old) - tp.reach
        want = tp.find(new)
        got = tp.find(new) if lo <= 0 else (lambda s: s if s < 0 else s + lo - 1)(tp.find(new[lo - 1:], 1))
        assert got == want, (p, old, new)


def test_regex_escape_is_common_regex_escape() -> None:
    assert regex_escape("a.b^c$d|e(f)g*h+i?j[k]l{m}n\\o") == r"a\.b\^c\$d\|e\(f\)g\*h\+i\?j\[k\]l\{m\}n\\o"
    for w in ["<tool_call>\n", "[TOOL_CALLS]", '{"type": "function",', "a.b"]:
        assert TriggerPattern.compile(regex_escape(w)).literal == w.encode()
        assert regex_find(regex_escape(w), b"xx" + w.encode()) == 2


def test_word_shaped_patterns_are_literal_searches() -> None:
    """``[\\s\\S]*?(W)[\\s\\S]*`` matches iff W occurs; the replay starts at its first (lazy) or last (greedy)
    occurrence: the lazy matcher searches such patterns as words, and agrees with std::regex."""
    rng = random.Random(3)
    for p, last in [(r"[\s\S]*?(<call>)[\s\S]*", False), (r"^[\s\S]*?(<call>)[\s\S]*$", False),
                    (r"[\s\S]*(<call>)[\s\S]*", True), (r"[\s\S]*?(a)[\s\S]*$", False)]:
        tp = TriggerPattern.compile(p)
        lit = tp.literal
        assert lit is not None and tp.last == last
        for _ in range(60):
            t = random_text(rng, 6) + rng.choice([b"", lit, lit + b"x" + lit]) + random_text(rng, 4)
            want = regex_find(p, t)
            assert tp.find(t) == want
            assert (t.rfind(lit) if last else t.find(lit)) == want
