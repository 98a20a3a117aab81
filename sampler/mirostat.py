"""Mirostat v1 and v2 and adaptive-p: selecting samplers that draw with ``std::discrete_distribution``.

Example:
    >>> import numpy as np
    >>> from sampler.candidates import Candidates
    >>> m = MirostatV2(42, 5.0, 0.1)
    >>> c = Candidates.from_logits(np.array([0.0, 1.0, 2.0], np.float32)); m.apply(c); c.selected >= 0
    True
"""

from __future__ import annotations

import numpy as np

from . import mathf
from .candidates import Candidates
from .dist import rng_seed, sample_discrete, softmax
from .kernels import K
from .rng import Mt19937, engine
from .truncation import top_k_impl

_F32 = np.float32


class _Seeded:
    seed: int
    seed_cur: int
    rng: Mt19937

    def _init_rng(self, seed: int) -> None:
        self.seed = seed & 0xFFFFFFFF
        self.seed_cur = rng_seed(self.seed)
        self.rng = engine(self.seed_cur)

    def clone(self):  # noqa: ANN201
        o = self.__class__.__new__(self.__class__)
        o.__dict__.update(self.__dict__)
        o.rng = self.rng.clone()
        return o


class _MirostatBase(_Seeded):
    """What mirostat v1 and v2 share: the draw, the mu update inside apply, the reset."""

    tau: np.float32
    eta: np.float32
    mu: np.float32

    def _draw_and_update(self, c: Candidates) -> None:
        idx = sample_discrete(c, self.rng)
        if K is not None:
            c.selected = idx
            p = float(c._rec[idx]["p"])  # type: ignore[index]
            self.mu = _F32(K.mirostat_mu(p, float(self.mu), float(self.tau), float(self.eta)))
            return
        c.selected = idx
        surprise = _F32(-_F32(mathf.log2f(float(c.p[idx]))))
        e = _F32(surprise - self.tau)
        self.mu = _F32(self.mu - _F32(self.eta * e))

    def accept(self, token: int) -> None:
        pass

    def reset(self) -> None:
        self.mu = _F32(_F32(2.0) * self.tau)
        self.seed_cur = rng_seed(self.seed)
        self.rng.seed(self.seed_cur)


class Mirostat(_MirostatBase):
    """``llama_sampler_init_mirostat(n_vocab, seed, tau, eta, m)``."""

    name = "mirostat"

    def __init__(self, n_vocab: int, seed: int, tau: float, eta: float, m: int = 100) -> None:
        self.n_vocab = int(n_vocab)
        self.tau = _F32(tau)
        self.eta = _F32(eta)
        self.m = int(m)
        self.mu = _F32(_F32(2.0) * self.tau)
        self._init_rng(seed)

    # as llama_sampler_mirostat_apply
    def apply(self, c: Candidates) -> None:
        if K is not None:
            r = K.mirostat(c.records(), c._n, c.sorted, self.n_vocab, self.m, float(self.mu))
            c._n, c.sorted = r >> 1, bool(r & 1)
            self._draw_and_update(c)
            return
        softmax(c, True)
        sum_ti_bi = _F32(0.0)
        sum_ti_sq = _F32(0.0)
        p = c.p
        lim = min(self.m - 1, c.size - 1)
        with np.errstate(all="ignore"):
            for i in range(max(lim, 0)):
                t_i = _F32(mathf.logf(float(_F32(_F32(i + 2) / _F32(i + 1)))))
                b_i = _F32(mathf.logf(float(_F32(p[i] / p[i + 1]))))
                sum_ti_bi = _F32(sum_ti_bi + _F32(t_i * b_i))
                sum_ti_sq = _F32(sum_ti_sq + _F32(t_i * t_i))
            s_hat = _F32(sum_ti_bi / sum_ti_sq)
            eps = _F32(s_hat - _F32(1.0))
            num = _F32(eps * _F32(mathf.powf(2.0, float(self.mu))))
            den = _F32(_F32(1.0) - _F32(mathf.powf(float(_F32(self.n_vocab)), float(-eps))))
            k = _F32(mathf.powf(float(_F32(num / den)), float(_F32(_F32(1.0) / s_hat))))
        ki = _float_to_int(k)
        top_k_impl(c, max(ki, 1))
        softmax(c, True)
        self._draw_and_update(c)


def _float_to_int(x: np.float32) -> int:
    """``int(x)`` for a float as x86 does it (truncation; NaN and out-of-range give INT_MIN)."""
    v = float(x)
    if v != v or not -2147483649.0 < v < 2147483648.0:
        return -2147483648
    return int(v)


class MirostatV2(_MirostatBase):
    """``llama_sampler_init_mirostat_v2(seed, tau, eta)``."""

    name = "mirostat-v2"

    def __init__(self, seed: int, tau: float, eta: float) -> None:
        self.tau = _F32(tau)
        self.eta = _F32(eta)
        self.mu = _F32(_F32(2.0) * self.tau)
        self._init_rng(seed)

    # as llama_sampler_mirostat_v2_apply
    def apply(self, c: Candidates) -> None:
        if K is not None:
            r = K.mirostat_v2(c.records(), c._n, c.sorted, float(self.mu))
            c._n, c.sorted = r >> 1, bool(r & 1)
            self._draw_and_update(c)
            return
        softmax(c, True)
        cut = _first_surprise_above(c.p, self.mu)
        c.truncate(max(cut, 1))
        softmax(c, True)
        self._draw_and_update(c)


def _first_surprise_above(p: np.ndarray, mu: np.float32) -> int:
    """Index of the first p with ``-log2f(p) > mu`` (or len(p)); glibc log2f decides every close call."""
    mu_f = float(mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        approx = -np.log2(p.astype(np.float64))
    sure = approx > mu_f + 1e-5 * (abs(mu_f) + 1.0)
    close = np.abs(approx - mu_f) <= 1e-5 * (abs(mu_f) + 1.0)
    close |= np.isnan(approx)
    for i in np.flatnonzero(sure | close).tolist():
        if sure[i] and not close[i]:
            return i
        if _F32(-_F32(mathf.log2f(float(p[i])))) > mu:
            return i
    return len(p)


# adaptive probability transformation constants
_WIDTH_INV = _F32(_F32(1.0) / _F32(0.3))
_PEAK = _F32(5.0)
_SHARP = _F32(10.0)


class AdaptiveP(_Seeded):
    """``llama_sampler_init_adaptive_p(target, decay, seed)``."""

    name = "adaptive-p"

    def __init__(self, target: float, decay: float, seed: int) -> None:
        self.target = _F32(target)
        self._target = float(self.target)
        self.decay = _F32(min(max(_F32(decay), _F32(0.0)), _F32(0.99)))
        self._init_rng(seed)
        self._stage = None
        self._bind()
        if self._stage is None:
            self._reset_state()

    def _bind(self) -> None:
        # with the kernels (and a target >= 0) apply and accept are a compiled stage's (K.Stage), which keeps the
        # EMA state and the original probabilities and draws from the generator in the same call; the methods
        # below are the reference and keep that state in the attributes _reset_state sets
        if K is not None and self._target >= 0.0 and not isinstance(self.rng, Mt19937):
            self._stage = K.Stage(8, 0, self._target, float(self.decay), 0.0, self.rng, None)
            self.apply, self.accept = self._stage.apply, self._stage.accept  # type: ignore[method-assign]

    @property
    def state(self) -> tuple[float, float, int, int]:
        """``(weighted_sum, total_weight, pending_id, pending_idx)``, wherever they are kept."""
        if self._stage is not None:
            return self._stage.state()
        return float(self.weighted_sum), float(self.total_weight), self.pending_id, self.pending_idx

    def _reset_state(self) -> None:
        self.weighted_sum = _F32(self.target / _F32(_F32(1.0) - self.decay))
        self.total_weight = _F32(_F32(1.0) / _F32(_F32(1.0) - self.decay))
        self.original_probs = np.zeros(0, _F32)
        self.pending_id = -1
        self.pending_idx = -1

    # as llama_sampler_adaptive_p_apply
    def apply(self, c: Candidates) -> None:
        softmax(c, False)
        if self.target < 0.0:
            c.selected = sample_discrete(c, self.rng)
            return
        self.original_probs = c.p.copy()
        target = min(max(self.target, _F32(0.0)), _F32(1.0))
        if self.total_weight == 0.0:
            at = target
        else:
            at = _F32(_F32(_F32(2.0) * target) - _F32(self.weighted_sum / self.total_weight))
        at = min(max(at, _F32(0.0)), _F32(1.0))
        lg = c.logits.copy()
        fin = lg != -np.inf
        d = np.abs(((c.p[fin] - at) * _WIDTH_INV).astype(_F32))
        lg[fin] = (_PEAK - (((_SHARP * d) * d) / (_F32(1.0) + d))).astype(_F32)
        c.logits = lg
        softmax(c, False)
        idx = sample_discrete(c, self.rng)
        c.selected = idx
        self.pending_id = int(c.ids[idx])
        self.pending_idx = idx

    # as llama_sampler_adaptive_p_accept
    def accept(self, token: int) -> None:
        if self.pending_id == token and self.pending_id != -1:
            self.weighted_sum = _F32(self.original_probs[self.pending_idx] + _F32(self.decay * self.weighted_sum))
            self.total_weight = _F32(_F32(1.0) + _F32(self.decay * self.total_weight))
        self.pending_id = -1
        self.pending_idx = -1

    def reset(self) -> None:
        if self._stage is not None:
            self._stage.reset()
        else:
            self._reset_state()
        self.seed_cur = rng_seed(self.seed)
        self.rng.seed(self.seed_cur)

    # as llama_sampler_adaptive_p_clone: the EMA state is copied, but the generator is a fresh one from the seed
    def clone(self) -> AdaptiveP:
        o = super().clone()
        o.seed_cur = rng_seed(self.seed)
        o.rng = engine(o.seed_cur)
        if self._stage is not None:
            o._stage = self._stage.clone(o.rng)
            o.apply, o.accept = o._stage.apply, o._stage.accept  # type: ignore[method-assign]
        else:
            o.original_probs = self.original_probs.copy()
        return o
