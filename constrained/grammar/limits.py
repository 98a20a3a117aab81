"""The matcher's work bounds: :class:`MatcherLimits` (set on a compiled grammar) and :class:`WorkBudget`, the
counter of row steps a mask walk spends against them (llama.cpp's own unit of work in
``llama_grammar_reject_candidates``).

Example:
    >>> w = WorkBudget(5_000)
    >>> w.spend(1_200); w.spent
    1200
    >>> w.spend(10_000)
    Traceback (most recent call last):
    ...
    constrained.errors.GrammarLimitError: computing the token mask needs more than MatcherLimits.max_mask_work = 5,000 row steps (many live parse stacks or an ambiguous grammar); raise it with `matcher.compiled.limits = MatcherLimits(max_mask_work=...)`
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GrammarLimitError


@dataclass(frozen=True)
class MatcherLimits:
    """Work bounds of the matcher: past them a :class:`~constrained.errors.GrammarLimitError` says which bound and
    how to raise it, instead of minutes of work.

    Work is counted in *row steps*: one candidate token looked at by one stack at one code point, plus a constant
    per (stack, depth) visit: the unit of ``llama_grammar_reject_candidates``, so a bound here is a bound on what
    llama.cpp's own walk would do. Set it on a compiled grammar with ``matcher.compiled.limits = MatcherLimits(...)``.

    >>> MatcherLimits().max_mask_work >= 100_000_000
    True
    """

    max_mask_work: int = 500_000_000     # row steps per mask (llama.cpp does ~10 ns of work per row step)
    max_stacks: int = 65_536             # stacks alive in one state (llama.cpp: 246 s to accept into 196,608)
    max_accept_work: int = 20_000_000    # stack steps to accept one token (about 2 s; see stacks.MAX_ACCEPT_WORK)


DEFAULT_MATCHER_LIMITS = MatcherLimits()

VISIT_COST = 1000
"""Row steps charged per (stack, depth) visit on top of its rows: the fixed cost of a few numpy calls."""


class WorkBudget:
    """A counter of row steps that raises :class:`GrammarLimitError` when ``limit`` is spent."""

    __slots__ = ("left", "limit", "looped", "rows", "spent_total", "visits")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit
        self.spent_total = 0
        self.rows = 0        # candidates looked at, summed over (stack, depth) visits (llama.cpp's unit)
        self.visits = 0      # (stack, depth) visits
        self.looped = 0      # rows decided at once by the loop shortcut (see GrammarRules.loop_exits)

    def spend(self, k: int) -> None:
        self.left -= k
        if self.left < 0:
            self.spent_total = self.limit - self.left
            raise GrammarLimitError(
                f"computing the token mask needs more than MatcherLimits.max_mask_work = {self.limit:,} row steps "
                "(many live parse stacks or an ambiguous grammar); raise it with "
                "`matcher.compiled.limits = MatcherLimits(max_mask_work=...)`")

    @property
    def spent(self) -> int:
        return self.limit - self.left
