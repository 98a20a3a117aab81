"""Trigger searches in linear time (issue 28, finding 7 fully bounded).

A trigger pattern is searched by RE2 (``TriggerPattern.engine == "linear"``: leftmost-first, capture groups as
libstdc++'s backtracking sets them) unless it needs a backtracking engine to be exact: a lookahead (``"backtrack"``:
Python's ``re``), or a capture group and a repetition of something that can match empty, whose last empty iteration
RE2 does not report (``"checked"``: RE2 finds the leftmost start, ``re`` reads the groups of that one match). Those
two are held to a budget (``BACKTRACK_CHOICES``: no quantifier or ``|`` inside a repetition, one repetition at
most); beyond it the pattern is refused, where std::regex takes it and may backtrack for minutes.

Proven here: catastrophic shapes take RE2 and find what std::regex finds (``oracle/lazy.py``, on texts short enough
for std::regex to finish); a hostile pattern over a 4 KB waiting buffer costs exactly the bytes searched (a step
count, no clock) and no backtracking search; the budget's refusals are patterns std::regex takes (the deviation).
``test_lazy_regex.py``'s 1,500 random patterns check the RE2 path against std::regex too.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from constrained.errors import TriggerPatternError
from constrained.grammar import Grammar
from constrained.grammar.lazy_regex import TriggerPattern
from constrained.vocab import Vocabulary
from oracle.cases.lazy import random_pattern, random_text
from oracle.lazy import regex_find

CATASTROPHIC = [r"(a+)+$", r"(a|aa)+$", r"(a|a)*b", r"(?:a*)*b", r"(a+)+b|c", r"^(a+)+$", r"(\w+\s?)+$",
                r"((ab|a)*)c", r"(.*a){5}x", r"x(a|ab)*?(b)"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_shapes_are_linear_and_exact(pattern: str) -> None:
    tp = TriggerPattern.compile(pattern)
    assert tp.engine == "linear" and tp.linear is not None
    rng = random.Random(len(pattern))
    texts = [b"a" * n + tail for n in range(0, 13, 3) for tail in (b"", b"b", b"c", b"x", b" ", b"ab")]
    texts += [random_text(rng, 10) for _ in range(20)]
    for t in texts:
        assert tp.find(t) == regex_find(pattern, t), (pattern, t)


def test_hostile_pattern_over_a_long_buffer_is_linear_work() -> None:
    """``(a+)+$`` while 100 tokens of 40 ``a`` and a ``b`` wait (4,100 bytes: 2^40 paths per start for a
    backtracking search): every search costs the bytes it reads, none backtracks."""
    assert TriggerPattern.compile(r"(a+)+$").engine == "linear"
    run = b"a" * 40 + b"b"
    v = Vocabulary([b"a", b"aa", b"b", run, b"x", b"</s>"], eog_ids=[5])
    m = Grammar.from_gbnf('root ::= "a"+').matcher(v, trigger_patterns=[r"(a+)+$"])
    want = 0
    for i in range(100):
        assert m.accept_token(3) and not m.triggered
        want += len(run) * (i + 1)                 # the whole buffer (unbounded reach) with the new piece
    assert (m.scanned, m.backtracked) == (want, 0)
    before = m.scanned
    mask = m.mask()                                # the refusal probe: one search per class group
    assert mask.tolist() == [True] * 6             # "a", "aa" trigger at the last run's end; "a"+ takes them
    groups = len(m._facts.class_groups(m._class_table())[0])
    assert m.scanned - before <= groups * (len(m.buffer) + len(run)) and m.backtracked == 0
    assert m.accept_token(1) and m.triggered


def test_random_patterns_mostly_take_the_linear_engine() -> None:
    """``test_lazy_regex.py``'s random patterns (checked there against std::regex) mostly run on RE2. (No second
    fuzz with longer texts here: on nested shapes std::regex itself backtracks for tens of seconds, e.g. 41 s for
    a 14-byte text, where RE2 takes microseconds.)"""
    rng = random.Random(20261201)
    engines: dict[str, int] = {}
    for _ in range(1500):
        try:
            e = TriggerPattern.compile(random_pattern(rng)).engine
        except TriggerPatternError:
            e = "refused"
        engines[e] = engines.get(e, 0) + 1
    assert engines.get("linear", 0) > 800, engines


BUDGET_REFUSED = [r"(a*)*$", r"x(a?)*", r"(.*)*x", r"x(a|)+y", r"(?=a)(a+)+$", r"(?=.*x).*y", r"(?!b)(a|aa)+"]


@pytest.mark.parametrize("pattern", BUDGET_REFUSED)
def test_backtracking_only_patterns_beyond_the_budget_are_refused(pattern: str) -> None:
    regex_find(pattern, b"ab")                     # std::regex takes it: a documented deviation
    with pytest.raises(TriggerPatternError, match="backtracking search"):
        TriggerPattern.compile(pattern)


@pytest.mark.parametrize("pattern", [r">>>(?!all)", r"(?=<)<c", r"x(a*)", r"(?!a)", r"(?=ab)a\s*", r"(b)(?:)*"])
def test_backtracking_patterns_within_the_budget_stay_exact(pattern: str) -> None:
    tp = TriggerPattern.compile(pattern)
    assert tp.engine in ("backtrack", "checked", "linear")
    for t in [b"", b">>>all", b">>>get", b"<c", b"xaa", b"ab  ", b"b", b"ba"]:
        assert tp.find(t) == regex_find(pattern, t), (pattern, t)


def test_checked_engine_reads_backtracking_groups() -> None:
    """A capture group and an empty-matching repetition: RE2 alone would start the replay inside the group
    (``x(a?)*`` on ``xa``: its group is ``a``), libstdc++ and Python at the match (the last iteration is empty)."""
    tp = TriggerPattern.compile(r"x()*(a)")
    assert tp.engine == "checked"
    for t in [b"xa", b"yxa", b"xxa", b"x"]:
        assert tp.find(t) == regex_find(r"x()*(a)", t)
    arr = np.array([tp.find(b"q" * k + b"xa") for k in range(3)])
    assert arr.tolist() == [1, 2, 3]
