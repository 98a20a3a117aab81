"""Logit bias and the repetition penalties (repeat, frequency, presence), as in ``src/llama-sampler.cpp``.

Example:
    >>> import numpy as np
    >>> from sampler.candidates import Candidates
    >>> c = Candidates.from_logits(np.array([1.0, 2.0, -1.0], np.float32))
    >>> pen = Penalties(3, 64, 2.0, 0.0, 0.0); pen.accept(1); pen.accept(2); pen.apply(c)
    >>> c.logits.tolist()
    [1.0, 1.0, -2.0]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from .candidates import Candidates
from .stage import Stage

_F32 = np.float32


class LogitBias(Stage):
    """``llama_sampler_init_logit_bias(n_vocab, biases)``: float additions, duplicates all applied, in order."""

    name = "logit-bias"

    def __init__(self, n_vocab: int, biases: Sequence[tuple[int, float]]) -> None:
        self.n_vocab = int(n_vocab)
        self.biases = [(int(t), _F32(b)) for t, b in biases]

    # as llama_sampler_logit_bias_apply
    def apply(self, c: Candidates) -> None:
        if not self.biases:
            return
        n = c.size
        search: list[tuple[int, np.float32]] = []
        lg = c.own()
        ident = c.identity
        with np.errstate(invalid="ignore", over="ignore"):
            for tok, b in self.biases:
                if 0 <= tok < n and (ident or c.ids[tok] == tok):
                    lg[tok] = lg[tok] + b
                else:
                    search.append((tok, b))
            if search:
                first: dict[int, np.float32] = {}
                for tok, b in search:
                    first.setdefault(tok, b)
                for tok, b in first.items():
                    pos = np.flatnonzero(c.ids == tok)
                    lg[pos] = lg[pos] + b


class Penalties:
    """``llama_sampler_init_penalties(n_vocab, last_n, repeat, freq, present)``: a window of the last n tokens."""

    name = "penalties"

    def __init__(self, n_vocab: int, last_n: int, repeat: float, freq: float, present: float) -> None:
        self.n_vocab = int(n_vocab)
        self.last_n = max(int(last_n), 0)
        self.repeat = _F32(repeat)
        self.freq = _F32(freq)
        self.present = _F32(present)
        self.prev: deque[int] = deque()
        self.count: dict[int, int] = {}
        self._off = self.last_n == 0 or (self.repeat == 1.0 and self.freq == 0.0 and self.present == 0.0)

    def disabled(self) -> bool:
        return self._off

    # as llama_sampler_penalties_accept
    def accept(self, token: int) -> None:
        if self.last_n == 0:
            return
        token = int(token)
        self.count[token] = self.count.get(token, 0) + 1
        if len(self.prev) >= self.last_n:
            old = self.prev.popleft()
            k = self.count[old] - 1
            if k == 0:
                del self.count[old]
            else:
                self.count[old] = k
        self.prev.append(token)

    # as llama_sampler_penalties_apply
    def apply(self, c: Candidates) -> None:
        if self._off:  # disabled()
            return
        if self.count:
            toks = np.fromiter(self.count.keys(), dtype=np.int64, count=len(self.count))
            cnts = np.fromiter(self.count.values(), dtype=np.int64, count=len(self.count))
            order = np.argsort(toks)
            toks, cnts = toks[order], cnts[order]
            pos = None
            if c.identity and toks[0] >= 0 and toks[-1] < c.size:
                pos = toks  # the array is still in id order: the token is its own index
            if pos is None:
                ids = c.ids
                j = np.searchsorted(toks, ids)
                j[j >= len(toks)] = 0
                hit = toks[j] == ids
                pos = np.flatnonzero(hit)
                cnt = cnts[j[pos]]
            else:
                cnt = cnts
            lg = c.logits[pos]
            with np.errstate(invalid="ignore", over="ignore"):
                lg = np.where(lg <= 0, lg * self.repeat, lg / self.repeat).astype(_F32)
                sub = (cnt.astype(_F32) * self.freq + (cnt > 0).astype(_F32) * self.present).astype(_F32)
                c.own()[pos] = lg - sub
        c.sorted = False

    def reset(self) -> None:
        self.prev.clear()
        self.count.clear()

    def clone(self) -> Penalties:
        p = Penalties(self.n_vocab, self.last_n, float(self.repeat), float(self.freq), float(self.present))
        p.prev = deque(self.prev)
        p.count = dict(self.count)
        return p
