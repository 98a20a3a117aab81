"""sampler.rng against libstdc++'s real std::mt19937 / generate_canonical / distributions (oracle/shims/rng_oracle.cpp)."""

from __future__ import annotations

import numpy as np
import pytest

from oracle.programs import compile_cpp, gxx, run
from sampler import rng as R

pytestmark = pytest.mark.skipif(gxx() is None, reason="no C++ compiler (g++) to build the libstdc++ oracle")

SEEDS = [0, 1, 2, 42, 5489, 123456789, 2**31, 2**32 - 1, 2**32 + 7, 2**40 + 3]


@pytest.fixture(scope="module")
def oracle():
    exe = compile_cpp("rng_oracle.cpp")
    return lambda text: [line.split() for line in run(exe, text).splitlines()]


def test_standard_check():
    # [rand.predef]: the 10000th consecutive invocation of a default-constructed mt19937 produces 4123659995
    assert int(R.Mt19937().u32(10000)[-1]) == 4123659995
    g = R.Mt19937()
    for _ in range(9999):
        g.next_u32()
    assert g.next_u32() == 4123659995


def test_u32_many_seeds(oracle):
    rs = np.random.default_rng(1)
    seeds = SEEDS + [int(x) for x in rs.integers(0, 2**32, 40)]
    out = oracle("".join(f"u32 {s} 1300\n" for s in seeds))
    for s, line in zip(seeds, out, strict=True):
        want = np.array([int(x) for x in line], dtype=np.uint32)
        g = R.Mt19937(s)
        got = np.concatenate([g.u32(7), [g.next_u32() for _ in range(620)], g.u32(673)]).astype(np.uint32)
        assert np.array_equal(got, want), s


def test_state_clone_discard():
    g = R.Mt19937(99)
    g.u32(700)
    h = g.clone()
    st = g.getstate()
    a = g.u32(1000)
    assert np.array_equal(h.u32(1000), a)
    g.setstate(st)
    g.discard(500)
    assert np.array_equal(g.u32(500), a[500:])
    assert R.Mt19937(5) == R.Mt19937(5) and R.Mt19937(5) != R.Mt19937(6)
    with pytest.raises(TypeError):
        R.Mt19937(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        g.setstate(((0,) * 3, 0))


def test_canonical_double_and_float(oracle):
    seeds = SEEDS[:6]
    out = oracle("".join(f"canon {s} 500\ncanonf {s} 500\n" for s in seeds))
    for i, s in enumerate(seeds):
        want_d = [float.fromhex(x) for x in out[2 * i]]
        want_f = [float.fromhex(x) for x in out[2 * i + 1]]
        g = R.Mt19937(s)
        assert [R.generate_canonical_double(g) for _ in range(250)] == want_d[:250]
        assert R.canonical_doubles(g, 250).tolist() == want_d[250:]
        g = R.Mt19937(s)
        assert [float(R.generate_canonical_float(g)) for _ in range(500)] == want_f


def test_canonical_rounding_edges(oracle):
    # values whose sum rounds up to 2**64 (double) or whose float rounds up to 2**32: the nextafter branch,
    # and round-half-even neighbours of it
    top = 0xFFFFFFFF
    pairs = [(top, top), (top - 1023, top), (top - 1024, top), (top - 1025, top), (0, 0), (1, 0), (0, 1),
             (2047, 0x80000000), (1024, 0x80000000), (3072, 0x80000000), (1023, 1), (2**31, 2**31)]
    vals = [v for p in pairs for v in p]
    singles = [top, top - 127, top - 128, top - 129, 0, 1, 2**31 + 128, 2**31 + 384, 0xFFFFFF80, 0xFFFFFF7F]
    out = oracle(f"canonv {len(pairs)} {len(vals)} {' '.join(map(str, vals))}\n"
                 f"canonfv {len(singles)} {len(singles)} {' '.join(map(str, singles))}\n")
    assert [R.canonical_double_from(lo, hi) for lo, hi in pairs] == [float.fromhex(x) for x in out[0]]
    assert [float(R.canonical_float_from(u)) for u in singles] == [float.fromhex(x) for x in out[1]]
    u = np.array(vals, dtype=np.uint32)

    class Fixed(R.Mt19937):
        def u32(self, n):  # replay the pairs through the bulk path
            return u[:n]

    assert R.canonical_doubles(Fixed(0), len(pairs)).tolist() == [float.fromhex(x) for x in out[0]]


@pytest.mark.parametrize("a,b", [(0.0, 1.0), (-3.5, 2.25), (1e-3, 7e5), (5.0, 5.0), (2.0, -1.0)])
def test_uniform_real(oracle, a, b):
    out = oracle(f"urd 77 300 {a.hex()} {b.hex()}\nurf 77 300 {a.hex()} {b.hex()}\n")
    g = R.Mt19937(77)
    assert [R.uniform_real_double(g, a, b) for _ in range(300)] == [float.fromhex(x) for x in out[0]]
    g = R.Mt19937(77)
    assert [float(R.uniform_real_float(g, a, b)) for _ in range(300)] == [float.fromhex(x) for x in out[1]]


def _weight_sets():
    rs = np.random.default_rng(5)
    sets = [[], [1.0], [0.0], [2.0, 1.0], [0.0, 0.0], [0.0, 1.0, 0.0], [1e-30, 1e30, 1e-30], [1.0] * 10,
            [0.1] * 333, [np.inf, 1.0], [3.0, 0.0, 0.0, 0.0, 0.0]]
    for n in [2, 3, 5, 17, 100, 1000, 4096]:
        w = rs.random(n).astype(np.float32)
        sets.append(list(w))
        sets.append(list((np.round(w * 3) / 3).astype(np.float32)))  # ties and zeros
        e = np.exp(rs.normal(0, 4, n)).astype(np.float32)
        sets.append(list(e / e.sum()))  # normalised probabilities: partial sums may overshoot 1 before the end
    for _ in range(30):  # probability vectors whose float rounding makes the double table end above 1.0 early
        n = int(rs.integers(2, 60))
        e = rs.random(n).astype(np.float32)
        sets.append(list((e / e.sum(dtype=np.float32)).astype(np.float32)))
    return [[np.float32(x) for x in w] for w in sets]


def test_discrete_distribution(oracle):
    sets = _weight_sets()
    cmds = []
    for i, w in enumerate(sets):
        cmds.append(f"disc {1000 + i} 40 {len(w)} {' '.join(float(x).hex() for x in w)}\n")
    out = oracle("".join(cmds))
    total = 0
    for i, (w, line) in enumerate(zip(sets, out, strict=True)):
        g = R.Mt19937(1000 + i)
        table = R.discrete_table(np.array(w, dtype=np.float32))
        got = [R.discrete_distribution(np.array(w, dtype=np.float32), g) for _ in range(20)]
        got += [R.discrete_pick(table, g) for _ in range(20)]
        got.append(g.next_u32())  # proves the number of outputs consumed (none for < 2 weights)
        assert got == [int(x) for x in line], (i, w[:5])
        total += 40
    assert total >= 2000


def test_lower_bound_matches_bisect_on_sorted():
    import bisect

    rs = np.random.default_rng(2)
    t = np.sort(rs.random(100))
    for v in list(rs.random(200)) + [0.0, 1.0, float(t[3])]:
        assert R.lower_bound(t, v) == bisect.bisect_left(t, v)
