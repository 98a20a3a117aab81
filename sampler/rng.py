"""libstdc++'s ``std::mt19937`` and the distributions llama.cpp and the s2 sampler draw with, bit for bit.

Everything here follows g++ 12's ``bits/random.h`` / ``bits/random.tcc``:

* :class:`Mt19937` is ``std::mt19937`` seeded with one 32-bit value (``init_genrand``).  The generator itself runs
  inside a :class:`random.Random` (CPython's ``_random`` is the same MT19937 with the same tempering), whose state is
  set to the words ``std::mt19937(seed)`` starts from, so single and bulk outputs come at C speed.
* :func:`generate_canonical_double` is ``generate_canonical<double, 53>``: two outputs ``u1, u2`` give
  ``round_to_double(u1 + u2 * 2**32) / 2**64``, and a result that rounded up to 1.0 becomes ``nextafter(1.0, 0.0)``.
* :func:`generate_canonical_float` is ``generate_canonical<float, 24>``: one output, ``float(u) / 2**32`` in float,
  1.0 replaced by ``nextafter(1.0f, 0.0f)``.
* :func:`uniform_real_double` / :func:`uniform_real_float` are ``uniform_real_distribution``: ``c * (b - a) + a`` in
  the distribution's type.
* :func:`engine` is the generator a drawing sampler owns: the compiled ``sampler._kernels.Mt19937`` (a real
  ``std::mt19937`` whose state lives in C, drawn from inside the stage's own kernel call) when the kernels are built,
  else :class:`Mt19937`; the two have the same interface and the same outputs (tests/sampler/test_sampler_kernels.py).
* :func:`discrete_distribution` is ``std::discrete_distribution<int>{first, last}(rng)``: with fewer than two weights
  it returns 0 *without drawing*; otherwise the weights are converted to double, summed left to right
  (``std::accumulate``), each divided by the sum, accumulated left to right (``std::partial_sum``), the last
  cumulative entry is set to exactly 1.0, one ``generate_canonical<double, 53>`` is drawn and the answer is
  ``std::lower_bound``'s binary search for it.  A zero or NaN sum is not checked by a release libstdc++
  (``__glibcxx_assert`` is off) and is not checked here either: the same table and search give the same index.

Example:
    >>> rng = Mt19937(5489)
    >>> rng.u32(10000)[-1]
    np.uint32(4123659995)
    >>> discrete_distribution([1.0, 3.0], Mt19937(1))
    1
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from .kernels import K

__all__ = [
    "Mt19937",
    "engine",
    "canonical_double_from",
    "canonical_doubles",
    "canonical_float_from",
    "discrete_distribution",
    "discrete_table",
    "discrete_pick",
    "generate_canonical_double",
    "generate_canonical_float",
    "lower_bound",
    "uniform_real_double",
    "uniform_real_float",
]

_N = 624
_MASK32 = 0xFFFFFFFF
_TWO64 = float(2**64)
_ONE_BELOW_D = math.nextafter(1.0, 0.0)
_ONE_BELOW_F = np.nextafter(np.float32(1.0), np.float32(0.0))
_TWO32_F = np.float32(2.0**32)


def _init_genrand(seed: int) -> list[int]:
    # as std::mersenne_twister_engine::seed(result_type): x[i] = f * (x[i-1] ^ (x[i-1] >> 30)) + i  (mod 2**32)
    mt = [seed & _MASK32]
    for i in range(1, _N):
        prev = mt[-1]
        mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & _MASK32)
    return mt


class Mt19937:
    """``std::mt19937`` seeded with a 32-bit value (the seed is reduced modulo 2**32, as the C++ engine does).

    Example:
        >>> g = Mt19937()          # default seed 5489
        >>> g.next_u32()
        3499211612
        >>> h = g.clone(); h.next_u32() == g.next_u32()
        True
    """

    __slots__ = ("_r",)

    def __init__(self, seed: int = 5489) -> None:
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"Mt19937 seed must be an int, got {type(seed).__name__}")
        self._r = random.Random()
        self.seed(int(seed))

    def seed(self, seed: int) -> None:
        """Re-seed exactly as ``std::mt19937::seed(seed)``."""
        words = _init_genrand(int(seed))
        self._r.setstate((3, (*words, _N), None))

    def next_u32(self) -> int:
        """One output, as ``rng()``."""
        return self._r.getrandbits(32)

    __call__ = next_u32

    def u32(self, n: int) -> np.ndarray:
        """The next ``n`` outputs as a ``uint32`` array (in generation order)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        if n == 0:
            return np.zeros(0, dtype=np.uint32)
        # CPython fills getrandbits(32*n) from the least significant 32-bit word upwards, one output per word
        return np.frombuffer(self._r.getrandbits(32 * n).to_bytes(4 * n, "little"), dtype="<u4").astype(np.uint32)

    def discard(self, n: int) -> None:
        """Advance by ``n`` outputs, as ``rng.discard(n)``."""
        while n > 0:
            step = min(n, 1 << 20)
            self._r.getrandbits(32 * step)
            n -= step

    def getstate(self) -> tuple[tuple[int, ...], int]:
        """``(624 state words, index)``: the full engine state (``index`` 624 means "twist before the next output")."""
        st = self._r.getstate()[1]
        return tuple(st[:_N]), st[_N]

    def setstate(self, state: tuple[Sequence[int], int]) -> None:
        """Restore a state from :meth:`getstate`."""
        words, index = state
        words = tuple(int(w) & _MASK32 for w in words)
        if len(words) != _N or not 0 <= int(index) <= _N:
            raise ValueError("an mt19937 state is 624 words and an index in [0, 624]")
        self._r.setstate((3, (*words, int(index)), None))

    def clone(self) -> Mt19937:
        """An independent copy in the same state."""
        other = Mt19937.__new__(Mt19937)
        other._r = random.Random()
        other._r.setstate(self._r.getstate())
        return other

    def __eq__(self, other: object) -> bool:
        # as operator== on engines: same state sequence from here on
        if not isinstance(other, Mt19937):
            return NotImplemented
        return self._r.getstate() == other._r.getstate()

    __hash__ = None  # type: ignore[assignment]


def engine(seed: int) -> Mt19937:
    """A new ``std::mt19937(seed)`` for a sampler: ``sampler._kernels.Mt19937`` when built, else :class:`Mt19937`.

    Example:
        >>> g, h = engine(5489), Mt19937(5489)
        >>> [g.next_u32() for _ in range(700)] == h.u32(700).tolist() and g.getstate() == h.getstate()
        True
    """
    return K.Mt19937(seed) if K is not None else Mt19937(seed)


def generate_canonical_double(rng: Mt19937) -> float:
    """``std::generate_canonical<double, 53>(rng)``: two outputs, low word first.

    Example:
        >>> 0.0 <= generate_canonical_double(Mt19937(7)) < 1.0
        True
    """
    lo = rng.next_u32()
    return canonical_double_from(lo, rng.next_u32())


def canonical_double_from(lo: int, hi: int) -> float:
    """The ``generate_canonical<double, 53>`` value for the two outputs ``lo`` (first) and ``hi`` (second)."""
    ret = float(lo + (hi << 32)) / _TWO64  # int -> float rounds to nearest even, as the double sum does
    return _ONE_BELOW_D if ret >= 1.0 else ret


def canonical_doubles(rng: Mt19937, n: int) -> np.ndarray:
    """``n`` successive :func:`generate_canonical_double` values (2n outputs), as a float64 array."""
    u = rng.u32(2 * n).astype(np.uint64)
    s = (u[0::2] | (u[1::2] << np.uint64(32))).astype(np.float64) / _TWO64
    s[s >= 1.0] = _ONE_BELOW_D
    return s


def generate_canonical_float(rng: Mt19937) -> np.float32:
    """``std::generate_canonical<float, 24>(rng)``: one output ``u``, ``float(u) / 2**32`` in float."""
    return canonical_float_from(rng.next_u32())


def canonical_float_from(u: int) -> np.float32:
    """The ``generate_canonical<float, 24>`` value for the output ``u``."""
    ret = np.float32(float(u)) / _TWO32_F
    return _ONE_BELOW_F if ret >= np.float32(1.0) else ret


def uniform_real_double(rng: Mt19937, a: float = 0.0, b: float = 1.0) -> float:
    """``std::uniform_real_distribution<double>(a, b)(rng)``: ``canonical * (b - a) + a`` in double."""
    return generate_canonical_double(rng) * (b - a) + a


def uniform_real_float(rng: Mt19937, a: float = 0.0, b: float = 1.0) -> np.float32:
    """``std::uniform_real_distribution<float>(a, b)(rng)``: one output, ``canonical * (b - a) + a`` in float."""
    fa, fb = np.float32(a), np.float32(b)
    return np.float32(generate_canonical_float(rng) * np.float32(fb - fa) + fa)


def lower_bound(table: Sequence[float] | np.ndarray, value: float) -> int:
    """``std::lower_bound`` with ``<``, step for step (so an unsorted or NaN table gives libstdc++'s index too)."""
    first = 0
    length = len(table)
    while length > 0:
        half = length >> 1
        middle = first + half
        if table[middle] < value:
            first = middle + 1
            length = length - half - 1
        else:
            length = half
    return first


def discrete_table(weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """The cumulative table ``std::discrete_distribution`` builds (``_M_cp``); empty for fewer than two weights."""
    # as discrete_distribution::param_type::_M_initialize
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.size < 2:
        return np.zeros(0, dtype=np.float64)
    total = np.add.accumulate(w)[-1]  # std::accumulate, left to right
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero/inf sum is not checked by libstdc++ either
        cp = np.add.accumulate(w / total)  # __normalize then std::partial_sum, left to right
    cp[-1] = 1.0
    return cp


def discrete_pick(table: np.ndarray, rng: Mt19937) -> int:
    """Draw from a :func:`discrete_table` as ``discrete_distribution::operator()`` does (no draw when empty)."""
    if len(table) == 0:
        return 0
    return lower_bound(table, generate_canonical_double(rng))


def discrete_distribution(weights: Sequence[float] | np.ndarray, rng: Mt19937) -> int:
    """``std::discrete_distribution<int>(weights.begin(), weights.end())(rng)`` with libstdc++'s arithmetic.

    Float weights are widened to double exactly as the C++ constructor does.  Fewer than two weights: 0, no draw.

    Example:
        >>> g = Mt19937(3)
        >>> discrete_distribution([0.5], g), g.getstate()[1]   # no output consumed
        (0, 624)
    """
    return discrete_pick(discrete_table(weights), rng)
