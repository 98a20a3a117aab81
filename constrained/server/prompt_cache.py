"""llama-server's host-memory prompt cache (``--cache-ram``, ``server_prompt_cache`` in server-task.cpp:1691-1920).

A slot about to lose most of its context saves its sequence state (the whole KV of its sequence, plus its
checkpoints) here, and a slot that starts a task loads the cached prompt that keeps the most of the new prompt. With
``--cache-idle-slots`` (the default) every idle slot is saved when a task starts, and cleared when the KV cache is
unified. Entries are dropped oldest first past the size limit (MiB) and past the token limit (the context size,
raised while the average entry would still fit the size limit).

Example:
    >>> c = PromptCache(limit_mib=1, limit_tokens=100)
    >>> c.alloc([1, 2, 3], [], 10, lambda: b"0123456789") is not None
    True
    >>> c.alloc([1, 2], [], 10, lambda: b"x" * 10) is None       # contained in a cached prompt
    True
    >>> best = c.find([7], [1, 2, 3, 4])
    >>> best.tokens
    [1, 2, 3]
    >>> c.take(best); c.size()
    0
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..llama.slot import common_prefix

__all__ = ["CachedPrompt", "PromptCache"]

_f32 = np.float32


@dataclass
class CachedPrompt:
    """``server_prompt_cache_state``: a prompt's tokens, its checkpoints and its sequence state."""

    tokens: list[int]
    checkpoints: list[Any] = field(default_factory=list)
    data: bytes = b""

    def size(self) -> int:
        return len(self.data) + sum(len(c.data or b"") for c in self.checkpoints)


class PromptCache:
    """``server_prompt_cache(limit_size_mib, limit_tokens)``: ``limit_mib`` < 0 is no size limit."""

    def __init__(self, limit_mib: int, limit_tokens: int) -> None:
        self.limit_size = 1024 * 1024 * max(limit_mib, 0)
        self.limit_tokens = limit_tokens
        self.states: list[CachedPrompt] = []

    def size(self) -> int:
        return sum(s.size() for s in self.states)

    def n_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.states)

    def alloc(self, tokens: list[int], checkpoints: list[Any], state_size: int,
              read: Callable[[], bytes]) -> CachedPrompt | None:
        """``alloc`` + the state copy of ``prompt_save``: None when the prompt is already cached or too big."""
        for s in self.states:
            if common_prefix(s.tokens, tokens) == len(tokens):
                return None                        # already contained in the cache
        new = state_size + sum(len(c.data or b"") for c in checkpoints)
        if self.limit_size > 0 and new > self.limit_size:
            return None
        self.states = [s for s in self.states if common_prefix(s.tokens, tokens) != len(s.tokens)]
        if self.limit_size > 0:
            while self.states and self.size() + new > self.limit_size:
                self.states.pop(0)
        entry = CachedPrompt(list(tokens), list(checkpoints), read())
        self.states.append(entry)
        return entry

    def find(self, slot_tokens: list[int], tokens_new: list[int]) -> CachedPrompt | None:
        """``load``'s choice: the cached prompt keeping more of its own tokens and covering more of the new prompt
        than the slot's (never one that would keep under a quarter of itself); :meth:`take` it once restored."""
        lcp = common_prefix(slot_tokens, tokens_new)
        f_keep_best = _f32(lcp) / _f32(len(slot_tokens)) if slot_tokens else _f32(-1.0)
        f_sim_best = _f32(lcp) / _f32(len(tokens_new))
        best = None
        for s in self.states:
            n = common_prefix(s.tokens, tokens_new)
            f_keep = _f32(n) / _f32(len(s.tokens))
            f_sim = _f32(n) / _f32(len(tokens_new))
            if f_keep < _f32(0.25):
                continue
            if f_keep_best < f_keep and f_sim_best < f_sim:
                f_keep_best, f_sim_best, best = f_keep, f_sim, s
        return best

    def take(self, entry: CachedPrompt) -> None:
        self.states.remove(entry)

    def update(self) -> None:
        """Drop the oldest entries past the size limit, then past the (dynamically raised) token limit."""
        if self.limit_size > 0:
            while self.states and self.size() > self.limit_size:
                self.states.pop(0)
        per_token = max(_f32(1.0), _f32(self.size()) / _f32(max(1, self.n_tokens())))
        limit = (max(self.limit_tokens, int(_f32(self.limit_size) / per_token)) if self.limit_size > 0
                 else self.limit_tokens)
        if self.limit_tokens > 0:
            while self.states and self.n_tokens() > limit:
                self.states.pop(0)
