"""glibc's libm, bit for bit: the float functions llama.cpp's samplers call.

llama.cpp computes ``expf``, ``logf``, ``log2f``, ``powf`` (and double ``exp``/``pow``) with the C library. numpy's own
float32 ``exp``/``log`` are vectorised approximations that can differ by an ulp, so every value here comes from glibc
itself (through ctypes) or from a numpy path that provably gives the same bits:

* :func:`expf_vec` computes ``exp`` in double with numpy and rounds to float. glibc's ``expf`` is documented to be
  within 0.502 ulp of the true value, so both agree except where the exact result lies within 0.002 ulp of a
  rounding midpoint; elements within 1/256 ulp of one (about 1%) are recomputed with glibc's ``expf`` itself.
  ``scripts/check_expf.py`` checks this against glibc for every float in [-104, 0].
* :func:`logf_vec` calls glibc's ``logf`` once per distinct value (ties make this cheap).

Example:
    >>> import numpy as np
    >>> float(expf(np.float32(0.0))), float(logf(np.float32(1.0)))
    (1.0, 0.0)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct

import numpy as np

__all__ = ["expf", "logf", "log2f", "powf", "exp", "pow_", "f32", "expf_vec", "logf_vec"]


def _load_libm() -> ctypes.CDLL:
    name = ctypes.util.find_library("m") or "libm.so.6"
    return ctypes.CDLL(name)


_libm = _load_libm()


def _fn(name: str, res: type, *args: type):
    f = getattr(_libm, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_expf = _fn("expf", ctypes.c_float, ctypes.c_float)
_logf = _fn("logf", ctypes.c_float, ctypes.c_float)
_log2f = _fn("log2f", ctypes.c_float, ctypes.c_float)
_powf = _fn("powf", ctypes.c_float, ctypes.c_float, ctypes.c_float)
_exp = _fn("exp", ctypes.c_double, ctypes.c_double)
_pow = _fn("pow", ctypes.c_double, ctypes.c_double, ctypes.c_double)

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """Round a Python float to the nearest float32 (as a C ``(float)`` cast does), returned as a Python float."""
    return _F32.unpack(_F32.pack(x))[0] if math.isfinite(x) else float(np.float32(x))


def expf(x: float) -> float:
    """glibc ``expf``."""
    return _expf(x)


def logf(x: float) -> float:
    """glibc ``logf``."""
    return _logf(x)


def log2f(x: float) -> float:
    """glibc ``log2f``."""
    return _log2f(x)


def powf(x: float, y: float) -> float:
    """glibc ``powf``."""
    return _powf(x, y)


def exp(x: float) -> float:
    """glibc ``exp`` (double)."""
    return _exp(x)


def pow_(x: float, y: float) -> float:
    """glibc ``pow`` (double)."""
    return _pow(x, y)


_expf_u = np.frompyfunc(_expf, 1, 1)
_logf_u = np.frompyfunc(_logf, 1, 1)
# glibc's expf evaluates a double approximation y of exp(x) with relative error below 2**-33 and returns (float)y.
# numpy's float64 exp is within a few double ulps of exp(x). Wherever every double within 2**-32 (relative) of
# numpy's value rounds to the same float, glibc's y does too: that float is expf(x). The rest (under 1%) call libm's
# expf itself. scripts/check_expf.py compares this with glibc for every float32 in [-104, 0] (softmax's domain).
_MARGIN = 2.0**-32


def expf_vec(x: np.ndarray) -> np.ndarray:
    """glibc ``expf`` of every element of a float32 array, bit for bit (numpy's float32 ``exp`` is not).

    Example:
        >>> expf_vec(np.array([0.0, -1.0, -np.inf], dtype=np.float32)).tolist()
        [1.0, 0.3678794503211975, 0.0]
    """
    if type(x) is not np.ndarray or x.dtype != np.float32:
        x = np.asarray(x, dtype=np.float32)
    if 0 < x.size <= 4096 and not x.max() > 88.0:
        # nothing can overflow (softmax's x <= 0, NaN included): no errstate, whose context makes every ufunc call
        # inside it about 1 us slower (numpy 2), which dominates on the few candidates left after top-k
        y = np.exp(x.astype(np.float64))
        out = y.astype(np.float32)
        # a float32 rounding boundary (a midpoint between two floats) has its 29 low double-significand bits at
        # 2**28 in the binade of y; relative 2**-32 of y is under 2**21 of those units, so "hard" (the same test as
        # below) is |low29 - 2**28| <= 2**21, one masked compare.  Results below 2**-126 (float32 subnormals: a
        # coarser grid) and NaN are sent to libm as well.
        b = y.view(np.int64)
        hard = ((b - _MID_LO) & _LOW29) <= _MID_W
        if not y.min() >= _TINY:  # (NaN too)
            hard |= ~(y >= _TINY)
    else:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            y = np.exp(x.astype(np.float64))
            out = y.astype(np.float32)
            hard = (y * (1.0 - _MARGIN)).astype(np.float32) != (y * (1.0 + _MARGIN)).astype(np.float32)
    if np.count_nonzero(hard):
        idx = np.flatnonzero(hard)
        out[idx] = _expf_u(x[idx]).astype(np.float32)
    return out


_LOW29 = np.int64((1 << 29) - 1)
_MID_LO = np.int64((1 << 28) - (1 << 21))
_MID_W = np.int64(1 << 22)
_TINY = 2.0**-126


def logf_vec(x: np.ndarray) -> np.ndarray:
    """glibc ``logf`` of every element of a float32 array (one libm call per distinct value)."""
    x = np.asarray(x, dtype=np.float32)
    if x.size == 0:
        return np.empty(0, np.float32)
    with np.errstate(all="ignore"):
        if x.size > 64:
            u, inv = np.unique(x, return_inverse=True)
            if u.size < x.size:
                return _logf_u(u).astype(np.float32)[inv.reshape(-1)]
        return _logf_u(x).astype(np.float32)
