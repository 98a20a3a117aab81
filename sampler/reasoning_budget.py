"""llama.cpp's reasoning-budget sampler (``common/reasoning-budget.cpp``), the stage ``common_sampler`` puts before
its grammar and chain when the chat template has thinking tags.

It watches the sampled tokens for the thinking start sequence (token ids, matched by an Aho-Corasick automaton
over token ids as ``token_matcher`` does), then counts the reasoning tokens; when the budget is spent (and the
last token's piece ends on a complete UTF-8 character) it forces the forced sequence (the budget message's tokens
then the first end tag's) one token per step by setting every other logit to -inf; a natural end sequence ends it
early. A new start sequence after the end re-arms it with a fresh budget. ``force()`` is the manual end of
``/v1/chat/completions/control`` (``reasoning_end``): only while counting.

States (``common_reasoning_budget_state``): IDLE 0, COUNTING 1, FORCING 2, WAITING_UTF8 3, DONE 4.

Example:
    >>> import numpy as np
    >>> from sampler.candidates import Candidates
    >>> rb = ReasoningBudget([[7]], [[8]], [9, 8], budget=2)
    >>> for t in (7, 1, 2):
    ...     rb.accept(t)
    >>> rb.state, rb.forced_token()
    (2, 9)
    >>> c = Candidates.from_logits(np.zeros(10, np.float32)); rb.apply(c)
    >>> int(np.isfinite(c.logits).sum())
    1
    >>> rb.accept(9); rb.accept(8); rb.state, rb.end_match
    (4, [8])
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["COUNTING", "DONE", "FORCING", "IDLE", "WAITING_UTF8", "ReasoningBudget", "TokenMatcher",
           "utf8_is_complete"]

IDLE, COUNTING, FORCING, WAITING_UTF8, DONE = 0, 1, 2, 3, 4
INT_MAX = 2**31 - 1


def utf8_is_complete(s: bytes) -> bool:
    """``common_utf8_is_complete``: whether ``s`` does not end inside a UTF-8 character (an empty string is
    complete; a lead byte not followed by all its continuation bytes, or only continuation bytes, is not)."""
    if not s:
        return True
    for i in range(1, min(4, len(s)) + 1):
        c = s[-i]
        if c & 0xC0 != 0x80:
            expected = 4 if c >= 0xF0 else 3 if c >= 0xE0 else 2 if c >= 0xC0 else 1
            return i >= expected
    return False


class TokenMatcher:
    """``token_matcher``: the sequences (empty ones and duplicates dropped, first kept), an Aho-Corasick automaton
    over token ids (``common_aho_corasick``: children in id order, failure links, the longest pattern ending at
    each state), and the current state; ``advance`` returns the index of the longest sequence ending at this
    token, or -1, and goes back to the root on a match."""

    def __init__(self, seqs: Sequence[Sequence[int]]) -> None:
        self.seqs: list[list[int]] = []
        for s in seqs:
            s = [int(t) for t in s]
            if s and s not in self.seqs:
                self.seqs.append(s)
        children: list[dict[int, int]] = [{}]
        pattern: list[int] = [-1]
        for k, s in enumerate(self.seqs):
            cur = 0
            for t in s:
                t &= 0xFFFFFFFF                   # the trie's uint32_t symbols
                nxt = children[cur].get(t)
                if nxt is None:
                    nxt = len(children)
                    children.append({})
                    pattern.append(-1)
                    children[cur][t] = nxt
                cur = nxt
            if pattern[cur] < 0:
                pattern[cur] = k
        n = len(children)
        fail = [0] * n
        order: list[int] = []
        queue = deque([0])
        while queue:
            u = queue.popleft()
            order.append(u)
            for ch in sorted(children[u]):
                v = children[u][ch]
                if u != 0:
                    f = fail[u]
                    while f and ch not in children[f]:
                        f = fail[f]
                    w = children[f].get(ch)
                    fail[v] = w if w is not None and w != v else 0
                queue.append(v)
        match = [-1] * n
        for u in order:
            match[u] = pattern[u] if pattern[u] >= 0 else (match[fail[u]] if u != 0 else -1)
        self._children, self._fail, self._match = children, fail, match
        self.state = 0

    def advance(self, token: int) -> int:
        ch = int(token) & 0xFFFFFFFF
        s = self.state
        while s and ch not in self._children[s]:
            s = self._fail[s]
        s = self._children[s].get(ch, 0)
        p = self._match[s]
        self.state = 0 if p >= 0 else s
        return p

    def reset(self) -> None:
        self.state = 0


class ReasoningBudget:
    """``common_reasoning_budget_init(vocab, start_seqs, end_seqs, forced_tokens, budget, initial_state)``.

    Args:
        start_seqs / end_seqs: token sequences of the thinking start and end tags (llama-server: one start, the
            template's end tags).
        forced: the tokens forced when the budget runs out (the budget message's, then the first end tag's).
        budget: reasoning tokens allowed (llama-server passes INT_MAX for "unlimited", -1).
        initial_state: a state to start in (COUNTING with a budget <= 0 starts FORCING).
        piece: ``token -> bytes``, for the UTF-8 check at the end of the budget (None: every piece complete, as a
            null vocabulary in llama.cpp). llama.cpp renders it with ``special=false``; a control token's text is
            ASCII either way, so a ``special=True`` rendering gives the same answer.
    """

    def __init__(self, start_seqs: Sequence[Sequence[int]], end_seqs: Sequence[Sequence[int]],
                 forced: Sequence[int], budget: int, initial_state: int = IDLE,
                 piece: Callable[[int], bytes] | None = None) -> None:
        if initial_state == COUNTING and budget <= 0:
            initial_state = FORCING
        self.start = TokenMatcher(start_seqs)
        self.end = TokenMatcher(end_seqs)
        self.forced = [int(t) for t in forced]
        self.budget = int(budget)
        self.remaining = int(budget)
        self.state = initial_state
        self.force_pos = 0
        self._end_match = -1
        self.piece = piece

    name = "reasoning-budget"

    @property
    def end_match(self) -> list[int] | None:
        """``common_reasoning_budget_get_end_match``: the end sequence that moved it to DONE, or None."""
        return self.end.seqs[self._end_match] if self._end_match >= 0 else None

    def forced_token(self) -> int | None:
        """The token ``apply`` leaves (FORCING with tokens left), else None (passthrough)."""
        if self.state != FORCING or self.force_pos >= len(self.forced):
            return None
        return self.forced[self.force_pos]

    def apply(self, c: Any) -> None:
        """Every logit but the forced token's set to -inf (FORCING only); a :class:`~sampler.candidates.Candidates`."""
        f = self.forced_token()
        if f is None:
            return
        logits = c.own()
        logits[c.ids[:len(logits)] != f] = -np.inf

    def mask_logits(self, logits: np.ndarray) -> np.ndarray:
        """``apply`` on a raw logits array (index = token id): a masked copy, or the array itself."""
        f = self.forced_token()
        if f is None:
            return logits
        out = np.full_like(logits, -np.inf)
        if 0 <= f < len(logits):
            out[f] = logits[f]
        return out

    def _arm(self) -> None:
        self.state = COUNTING
        self.remaining = self.budget
        if self.remaining <= 0:
            self.state = FORCING
            self.force_pos = 0

    def accept(self, token: int) -> None:
        st = self.state
        if st == IDLE:
            if self.start.advance(token) >= 0:
                self._arm()
        elif st in (COUNTING, WAITING_UTF8):
            m = self.end.advance(token)
            if m >= 0:
                self.state = DONE
                self._end_match = m
                return
            complete = utf8_is_complete(self.piece(int(token))) if self.piece is not None else True
            if st == WAITING_UTF8:
                if complete:
                    self.state = FORCING
                    self.force_pos = 0
                    self.end.reset()
            else:
                self.remaining -= 1
                if self.remaining <= 0:
                    self.state = FORCING if complete else WAITING_UTF8
                    self.force_pos = 0 if complete else self.force_pos
                    self.end.reset()
        elif st == FORCING:
            m = self.end.advance(token)
            self.force_pos += 1
            if self.force_pos >= len(self.forced):
                self.state = DONE
                self._end_match = m
        else:                                   # DONE: a new start tag re-arms it
            if self.start.advance(token) >= 0:
                self.end.reset()
                self._end_match = -1
                self._arm()

    def force(self) -> bool:
        """``common_reasoning_budget_force``: from COUNTING to FORCING now (True), else nothing (False)."""
        if self.state != COUNTING:
            return False
        self.state = FORCING
        self.force_pos = 0
        self.end.reset()
        return True

    def reset(self) -> None:
        self.state = IDLE
        self.remaining = self.budget
        self.start.reset()
        self.end.reset()
        self.force_pos = 0
        self._end_match = -1

    def clone(self) -> ReasoningBudget:
        out = copy.copy(self)
        out.start = copy.copy(self.start)
        out.end = copy.copy(self.end)
        return out
