"""llama-server's sampler chain (``common_sampler``): build, sample, accept, reset, clone.

The chain is built as ``common_sampler_init`` builds it: logit bias first (request biases, the ``ignore_eos``
biases, the vocabulary's suppress tokens), then the ``samplers`` list in order (``temperature`` is the dynamic
temperature sampler), then ``dist(seed)`` -- or adaptive-p when listed; with mirostat 1/2: temperature then
mirostat. :meth:`Sampler.sample_constrained` is ``common_sampler_sample`` with a grammar and ``grammar_first =
false``.

Example:
    >>> import numpy as np
    >>> from sampler.params import Params
    >>> s = Sampler(Params(seed=42))
    >>> logits = np.linspace(0, 3, 100, dtype=np.float32)
    >>> tok = s.sample(logits); s.accept(tok); 0 <= tok < 100
    True
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import heapselect
from .candidates import Candidates
from .dist import Dist
from .dry import Dry, process_breakers
from .infill import Infill
from .kernels import OP, REC, K
from .mirostat import AdaptiveP, Mirostat, MirostatV2
from .params import Params
from .penalties import LogitBias, Penalties
from .rng import Mt19937
from .stage import Stage
from .temperature import Temp, TempExt
from .truncation import XTC, MinP, TopK, TopNSigma, TopP, Typical

NO_SELECTION = "no selected token during sampling - check your sampling configuration"
NAN_LOGITS = "logits contain NaN"


class _Empty(Stage):
    """llama.cpp's "empty" sampler (a disabled one): does nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def apply(self, c: Candidates) -> None:
        pass


def _noop(st: Any) -> bool:
    """Whether a sampler's apply returns at once, touching nothing (no draw either): the chain skips it."""
    if isinstance(st, _Empty):
        return True
    if isinstance(st, Penalties):
        return st.disabled()
    if isinstance(st, TopK):
        return st.k <= 0
    if isinstance(st, TopP | Typical):
        return bool(st.p >= 1.0)
    if isinstance(st, MinP):
        return bool(st.p <= 0.0)
    if isinstance(st, TopNSigma):
        return bool(st.n <= 0.0)
    if isinstance(st, XTC):
        return bool(st.probability <= 0.0 or st.threshold > 0.5)
    return False


def _check_penalties(p: Params) -> None:
    # as the checks at the top of common_sampler_init (reported by llama-server with this prefix)
    pre = "Failed to initialize samplers: "
    r = np.float32(p.penalty_repeat)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.float32(1.0) / r if r != 0 else np.float32(np.inf)
    if not math.isfinite(r) or r <= 0.0 or not math.isfinite(inv):
        raise ValueError(pre + "penalty_repeat must be finite and greater than 0")
    if not math.isfinite(p.penalty_freq):
        raise ValueError(pre + "penalty_freq must be finite")
    if not math.isfinite(p.penalty_present):
        raise ValueError(pre + "penalty_present must be finite")


def _op(st: Any) -> tuple | None:
    """The fused-run op (:data:`sampler.kernels.OP`) of a stage, or None when it cannot run inside ``K.run``."""
    if isinstance(st, TopK) and -2**31 <= st.k < 2**31:
        return (1, st.k, 0.0, 0.0, 0.0)
    if isinstance(st, TopP | MinP | Typical) and -2**31 <= st.min_keep < 2**31:
        return (2 if isinstance(st, TopP) else 3 if isinstance(st, MinP) else 4, st.min_keep, st._pf, 0.0, 0.0)
    if isinstance(st, TempExt):
        return (5, 0, *st._args)
    if isinstance(st, Dist):
        return (6, 0, 0.0, 0.0, 0.0)
    return None


def _fused_tail(active: list[Any]) -> tuple[int, np.ndarray | None]:
    """Where the chain's fusable tail starts (it ends with dist; it never starts with top-k, whose own apply reads
    the raw logits) and its program; (len(active), None) without one."""
    if K is None or not active or not isinstance(active[-1], Dist):
        return len(active), None
    i = len(active)
    while i > 0 and _op(active[i - 1]) is not None:
        i -= 1
    while i < len(active) and isinstance(active[i], TopK):
        i += 1
    if i >= len(active) - 1:  # dist alone: nothing to fuse
        return len(active), None
    return i, np.array([_op(st) for st in active[i:]], OP)


class Sampler:
    """llama-server's sampling for one request: the chain of :class:`Params`, its RNGs and windows.

    Args:
        params: the sampling parameters.
        vocab: a ``constrained.Vocabulary``; gives the vocabulary size, EOG ids (``ignore_eos``), suppress tokens,
            and the tokenizer for DRY's sequence breakers and string logit biases. Without it the vocabulary size
            is taken from the first logits.

    Raises:
        ValueError: parameters llama-server refuses (same message).
    """

    def __init__(self, params: Params, vocab: Any = None) -> None:
        _check_penalties(params)
        if params.mirostat not in (0, 1, 2):
            raise ValueError("unknown mirostat version")
        if "infill" in params.samplers and params.mirostat == 0 and vocab is None:
            raise ValueError("the infill sampler needs a vocabulary (pass vocab=...)")
        self.params = params
        self.vocab = vocab
        self.n_vocab: int | None = len(vocab) if vocab is not None else None
        self.steps: list[Any] | None = None
        self._active: list[Any] = []  # the steps whose apply does something (see _noop)
        self._tail, self._prog = 0, None  # the fused tail of _active (see _fused_tail)
        self._topk_first = 0
        self.cur: Candidates | None = None
        self._pending: list[int] = []
        # common_sampler's reasoning-budget sampler (sampler.reasoning_budget), applied before the chain; it is fed
        # generated tokens only, by the caller (common_sampler_accept's is_generated), and not reset with the chain
        self.rbudget: Any = None
        if self.n_vocab is not None:
            self._build(self.n_vocab)

    # as common_sampler_init (the chain part)
    def _build(self, n_vocab: int) -> None:
        p = self.params
        v = self.vocab
        steps: list[Any] = []
        merged: list[tuple[int, float]] = []
        for tok, b in p.logit_bias:
            if isinstance(tok, str):
                if v is None:
                    raise ValueError("a string logit_bias entry needs a vocabulary to tokenize it")
                merged.extend((t, b) for t in v.tokenize(tok, parse_special=False))
            else:
                merged.append((int(tok), b))
        if p.ignore_eos:
            if v is None:
                raise ValueError("ignore_eos needs a vocabulary (its end-of-generation ids)")
            merged.extend((t, -math.inf) for t in sorted(v.eog_ids))
        for t in getattr(v, "suppress_tokens", None) or ():
            merged.append((int(t), -math.inf))
        if merged:
            steps.append(LogitBias(n_vocab, merged))
        if p.mirostat == 0:
            use_adaptive = False
            for name in p.samplers:
                if name == "dry":
                    enabled = p.dry_multiplier != 0.0 and p.dry_base >= 1.0 and p.dry_penalty_last_n > 0
                    if not enabled:
                        steps.append(_Empty("?dry"))
                        continue
                    if v is None and any(p.dry_sequence_breakers):
                        raise ValueError("DRY sequence breakers need a vocabulary (pass vocab=...)")
                    br = process_breakers(v, p.dry_sequence_breakers) if v is not None else {}
                    steps.append(Dry(p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n,
                                     breakers=br))
                elif name == "top_k":
                    steps.append(TopK(p.top_k))
                elif name == "top_p":
                    steps.append(TopP(p.top_p, p.min_keep))
                elif name == "top_n_sigma":
                    steps.append(TopNSigma(p.top_n_sigma))
                elif name == "min_p":
                    steps.append(MinP(p.min_p, p.min_keep))
                elif name == "xtc":
                    steps.append(XTC(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed))
                elif name == "typ_p":
                    steps.append(Typical(p.typ_p, p.min_keep))
                elif name == "temperature":
                    steps.append(TempExt(p.temp, p.dynatemp_range, p.dynatemp_exponent))
                elif name == "infill":
                    steps.append(Infill(v))
                elif name == "penalties":
                    steps.append(Penalties(n_vocab, p.penalty_last_n, p.penalty_repeat, p.penalty_freq,
                                           p.penalty_present))
                elif name == "adaptive_p":
                    use_adaptive = True
            steps.append(AdaptiveP(p.adaptive_target, p.adaptive_decay, p.seed) if use_adaptive else Dist(p.seed))
        elif p.mirostat == 1:
            steps += [Temp(p.temp), Mirostat(n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100)]
        else:
            steps += [Temp(p.temp), MirostatV2(p.seed, p.mirostat_tau, p.mirostat_eta)]
        self.steps = steps
        self._active = [st for st in steps if not _noop(st)]
        self._tail, self._prog = _fused_tail(self._active)
        first = self._active[0] if self._active else None
        # a chain that opens with top-k (k <= 128: the heap path) reads every logit there: it checks for NaN too
        self._topk_first = first.k if isinstance(first, TopK) and 0 < first.k <= 128 and n_vocab >= 8192 else 0
        self.n_vocab = n_vocab
        for t in self._pending:
            self._accept_checked(t)
        self._pending = []

    def _logits(self, logits: Any, defer_nan: bool = False) -> np.ndarray:
        a = np.asarray(logits)
        if a.ndim != 1:
            raise ValueError(f"logits must be a 1-D array, got shape {a.shape}")
        if a.dtype.kind != "f":
            raise ValueError(f"logits must be a float array, got dtype {a.dtype}")
        a = a.astype(np.float32, copy=False)
        if self.n_vocab is not None and len(a) != self.n_vocab:
            raise ValueError(f"expected {self.n_vocab} logits (the vocabulary size), got {len(a)}")
        if len(a) == 0:
            raise ValueError("logits must not be empty")
        if self.steps is None:
            self._build(len(a))
        if not (defer_nan and self._topk_first) and np.isnan(a.max()):  # max propagates NaN: one pass
            raise ValueError(NAN_LOGITS)
        return a

    def _run(self, cand: Candidates, start: int = 0) -> Candidates:
        assert self.steps is not None
        active = self._active
        if self._prog is None or K is None:
            for st in active[start:] if start else active:
                st.apply(cand)
        else:
            tail = self._tail
            for i in range(start, tail):
                active[i].apply(cand)
            self._run_tail(cand)
        self.cur = cand
        return cand

    def _run_tail(self, c: Candidates) -> None:
        # the fused tail in one kernel call; its dist draws uniform_real_distribution<double> from its generator
        # (a Python one's two outputs are replayed)
        g = self._active[-1].rng
        r, c.selected = K.run(c._rec if c._rec is not None else c.records(), c._n, c.sorted,  # type: ignore[union-attr]
                              self._prog, (g.next_u32(), g.next_u32()) if isinstance(g, Mt19937) else g)
        c._n, c.sorted = r >> 1, bool(r & 1)

    def sample(self, logits: Any) -> int:
        """Run the chain on raw logits and return the selected token id (``common_sampler_sample``, no grammar).

        Raises:
            ValueError: logits that are not a 1-D float array of the vocabulary's size, or that contain NaN.
        """
        a = self._logits(logits, defer_nan=True)
        if self.rbudget is not None:
            a = self.rbudget.mask_logits(a)
        return self._sample(a, nan_checked=False)

    def _sample(self, a: np.ndarray, nan_checked: bool = True) -> int:
        if not nan_checked and self._topk_first:
            # as top_k_impl with k <= 128 on unsorted logits (partial_sort_inplace's heap path), NaN check fused
            k = min(self._topk_first, len(a))
            if K is not None:
                out = np.empty(k, REC)
                if K.top_k(a, None, None, k, out, True) < 0:
                    raise ValueError(NAN_LOGITS)
                c = Candidates.from_records(out, k, True)
            else:
                order = heapselect.top_k(a, k, nan_check=True)
                if order is None:
                    raise ValueError(NAN_LOGITS)
                c = Candidates.from_logits(a, copy=False)
                c.take(order)
                c.sorted = True
            self._run(c, 1)
        else:
            c = self._run(Candidates.from_logits(a, copy=False))
        if c.selected < 0 or c.selected >= c.size:
            raise ValueError(NO_SELECTION)
        return c.token(c.selected)

    def sample_constrained(self, logits: Any, allows: Callable[[int], bool],
                           mask: Callable[[], np.ndarray]) -> tuple[int, bool]:
        """``common_sampler_sample(..., grammar_first=false)`` with a grammar given as two callables.

        The chain runs on the raw logits; if ``allows(token)`` the token stands. Otherwise the logits are taken
        afresh, every token ``mask()`` rejects (False) is set to -inf, and the chain runs again with the same
        generators (a second dist/XTC draw, a second mirostat update). Returns ``(token, redrew)``.

        Raises:
            ValueError: nothing selectable (llama.cpp's "no selected token during sampling ..." assertion).
        """
        a = self._logits(logits, defer_nan=True)
        if self.rbudget is not None:            # applied first, on both draws (common_sampler_sample)
            a = self.rbudget.mask_logits(a)
        tok = self._sample(a, nan_checked=False)
        if allows(tok):
            return tok, False
        m = np.asarray(mask(), dtype=bool)
        if m.shape != a.shape:
            raise ValueError(f"mask must have shape {a.shape}, got {m.shape}")
        c = Candidates.from_logits(a)
        c.own()[~m] = -np.inf
        c = self._run(c)
        if c.selected < 0 or c.selected >= c.size:
            raise ValueError(NO_SELECTION)
        return c.token(c.selected), True

    def _accept_checked(self, token: int) -> None:
        assert self.steps is not None and self.n_vocab is not None
        if not 0 <= token < self.n_vocab:
            raise ValueError(f"token id {token} out of range for a vocabulary of {self.n_vocab} tokens")
        for st in self.steps:
            st.accept(token)

    def accept(self, token: int) -> None:
        """Feed a prompt or generated token to the chain (penalty/DRY windows, adaptive-p's history)."""
        t = int(token)
        if t < 0:
            raise ValueError(f"token id {token} out of range")
        if self.steps is None:
            self._pending.append(t)
            return
        self._accept_checked(t)

    def reset(self) -> None:
        """``common_sampler_reset``: clear windows, re-seed every generator (a new random seed for the default)."""
        self._pending = []
        if self.steps is not None:
            for st in self.steps:
                st.reset()

    def clone(self) -> Sampler:
        """An independent copy with the same state, as ``llama_sampler_clone`` of the chain: generators and windows
        are copied, except adaptive-p's generator, which llama.cpp re-creates from the seed."""
        s = copy.copy(self)
        s.steps = [st.clone() for st in self.steps] if self.steps is not None else None
        s._active = [st for st in s.steps if not _noop(st)] if s.steps is not None else []
        s._tail, s._prog = _fused_tail(s._active)
        s._pending = list(self._pending)
        s.rbudget = self.rbudget.clone() if self.rbudget is not None else None
        s.cur = self.cur.copy() if self.cur is not None else None
        return s

    @property
    def candidates(self) -> Candidates | None:
        """The candidate array after the last chain run (``common_sampler_get_candidates``)."""
        return self.cur
