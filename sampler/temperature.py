"""Temperature (``temp``) and dynamic temperature (``temp-ext``), as in ``src/llama-sampler.cpp``.

With the compiled kernels a TempExt instance's ``apply`` is a compiled stage (``K.Stage``); the method written here is
the numpy reference. A temperature <= 0 keeps the first strict maximum (in array order) and masks everything else to -inf; it does not
select anything itself (``dist`` still draws).

Example:
    >>> import numpy as np
    >>> from sampler.candidates import Candidates
    >>> c = Candidates.from_logits(np.array([1.0, 3.0, 3.0], np.float32))
    >>> Temp(0.0).apply(c); c.logits.tolist()
    [-inf, 3.0, -inf]
"""

from __future__ import annotations

import functools

import numpy as np

from . import mathf
from .candidates import Candidates
from .dist import softmax
from .kernels import K
from .stage import Stage

_F32 = np.float32


# as llama_sampler_temp_impl
def temp_impl(c: Candidates, temp: np.float32) -> None:
    if K is not None:
        if c._rec is not None:
            K.temp(c._rec, c._n, c.sorted, float(temp))
        else:
            src = c._lg
            dst = src if c._owned else np.empty(len(src), _F32)
            K.temp_floats(src, float(temp), dst)
            c._lg, c._owned = dst, True
        return
    if c.size == 0:
        return
    if temp <= 0.0:
        lg = c.logits
        keep = int(np.argmax(lg))  # first index of the maximum = first strict maximum in a left-to-right scan
        if lg[keep] != lg[keep]:  # NaN logits (adaptive-p can make them): `l > max` is false for NaN
            keep = 0 if lg[0] != lg[0] else int(np.nanargmax(lg))
        out = np.full(len(lg), -np.inf, dtype=_F32)
        out[keep] = lg[keep]
        c.logits = out
        return
    lg = c.logits if c.logits.dtype == _F32 else c.logits.astype(_F32)
    with np.errstate(over="ignore", invalid="ignore"):
        c.logits = lg / _F32(temp)  # float32 / float32: a float32 division, as in C


class Temp(Stage):
    """``llama_sampler_init_temp(t)`` (used by the mirostat chains)."""

    name = "temp"

    def __init__(self, temp: float) -> None:
        self.temp = _F32(temp)

    def apply(self, c: Candidates) -> None:
        temp_impl(c, self.temp)


class TempExt(Stage):
    """``llama_sampler_init_temp_ext(t, delta, exponent)``: entropy-scaled temperature when delta > 0."""

    name = "temp-ext"

    def __init__(self, temp: float, delta: float, exponent: float) -> None:
        self.temp = _F32(temp)
        self.delta = _F32(delta)
        self.exponent = _F32(exponent)
        self._args = (float(self.temp), float(self.delta), float(self.exponent))
        if K is not None:  # the compiled apply; arrays not in record form go to the float path as below
            fallback = None if self.delta > 0 else functools.partial(temp_impl, temp=self.temp)
            self.apply = K.Stage(5, 0, *self._args, None, fallback).apply  # type: ignore[method-assign]

    # as llama_sampler_temp_ext_apply
    def apply(self, c: Candidates) -> None:
        if not self.delta > 0:
            temp_impl(c, self.temp)
            return
        min_temp = max(_F32(0.0), _F32(self.temp - self.delta))
        max_temp = _F32(self.temp + self.delta)
        if c.size <= 1:
            return
        max_entropy = _F32(-_F32(mathf.logf(float(_F32(1.0) / _F32(c.size)))))
        softmax(c, True)
        p = c.p
        pos = p[p > 0.0]
        with np.errstate(invalid="ignore"):
            terms = (pos * mathf.logf_vec(pos)).astype(_F32)
        ent = _F32(0.0)
        if terms.size:
            # entropy -= prob * logf(prob), sequentially in float
            ent = np.cumsum(np.concatenate(([_F32(0.0)], -terms)).astype(_F32), dtype=_F32)[-1]
        norm = _F32(ent / max_entropy)
        dyn = _F32(min_temp + _F32(_F32(max_temp - min_temp) * _F32(mathf.powf(float(norm), float(self.exponent)))))
        temp_impl(c, dyn)
        # p recomputed in double relative to data[0]
        m = float(c.logits[0])
        with np.errstate(invalid="ignore"):
            lg = c.logits.astype(np.float64) - m
        pd = np.array([mathf.exp(v) for v in lg.tolist()]) if len(lg) <= 64 else _exp_vec(lg)
        pf = pd.astype(_F32)
        total = float(np.cumsum(pd)[-1])  # the double values are summed, not their float copies
        c.p = (pf.astype(np.float64) / total).astype(_F32)


_exp_u = np.frompyfunc(mathf.exp, 1, 1)


def _exp_vec(x: np.ndarray) -> np.ndarray:
    return _exp_u(x).astype(np.float64)
