"""The compiled sampler stages (``sampler._kernels``) against the numpy port, bit for bit, and the build check.

The stage-by-stage oracle tests (tests/sampler/test_sampler_oracle.py, ...) run the default path, which is the compiled one
when it is built; here both paths run on the same inputs (plain, tied, -inf-heavy and extreme logits at 32,000 and
262,144 tokens, every sampler family) and every stage's state must be the same bits. ``test_kernels_are_built``
fails when the extension is missing, so a machine that could not build it never falls back silently; set
``CONSTRAINED_PURE_PYTHON=1`` to ask for the numpy path on purpose.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from oracle.cases.sampler import bits
from sampler import candidates, chain, dist, dry, kernels, mirostat, rng, temperature, truncation
from sampler.candidates import Candidates
from sampler.chain import Sampler
from sampler.params import Params

# the numpy reference warns on the extreme logits (overflowing sums and exps, as C computes them silently)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# every module that binds the kernels (checked by test_every_kernel_user_is_listed)
KERNEL_USERS = (candidates, chain, dist, dry, mirostat, rng, temperature, truncation)

needs_kernels = pytest.mark.skipif(kernels.K is None, reason="the numpy path was asked for "
                                   "(CONSTRAINED_PURE_PYTHON=1)" if kernels.PURE else "not built")


def test_kernels_are_built() -> None:
    if kernels.PURE:
        pytest.skip("CONSTRAINED_PURE_PYTHON=1: the numpy path was asked for")
    assert kernels.K is not None, (
        f"sampler._kernels is not importable ({kernels.IMPORT_ERROR}); `pip install -e .` builds it (a C++17 "
        "compiler is needed), or set CONSTRAINED_PURE_PYTHON=1 to run the numpy path on purpose")


def test_every_kernel_user_is_listed() -> None:
    root = Path(candidates.__file__).parent
    users = {p.stem for p in root.glob("*.py") if re.search(r"from \.kernels import .*\bK\b", p.read_text())}
    assert users == {m.__name__.rsplit(".", 1)[1] for m in KERNEL_USERS}


@contextlib.contextmanager
def numpy_path() -> Iterator[None]:
    saved = [m.K for m in KERNEL_USERS]
    for m in KERNEL_USERS:
        m.K = None
    try:
        yield
    finally:
        for m, k in zip(KERNEL_USERS, saved, strict=True):
            m.K = k


CHAINS = {
    "default": Params(seed=11),
    "all-on": Params(seed=12, penalty_repeat=1.1, penalty_freq=0.1, penalty_present=0.1, penalty_last_n=64,
                     dry_multiplier=0.8, dry_penalty_last_n=256, dry_sequence_breakers=(), top_n_sigma=2.0,
                     typ_p=0.95, xtc_probability=1.0, xtc_threshold=0.01, dynatemp_range=0.3),
    "nsigma": Params(seed=13, top_n_sigma=1.0),
    "mirostat1": Params(seed=14, mirostat=1),
    "mirostat2": Params(seed=15, mirostat=2),
    "adaptive-p": Params(seed=16, adaptive_target=0.5, samplers=("top_k", "top_p", "min_p", "temperature",
                                                                  "adaptive_p")),
    # unsorted full-vocabulary entries: top-p's 256-bucket try, min-p's filter, typical's full sort, top-k's
    # bucket path (k > 128), temperature 0 and dynamic temperature on the whole array
    "unsorted": Params(seed=17, top_k=300, top_p=0.9, min_p=0.02, typ_p=0.9, dynatemp_range=0.5,
                       samplers=("temperature", "top_p", "min_p", "typ_p", "top_k")),
    "greedy-first": Params(seed=19, temp=0.0, samplers=("temperature", "top_k", "min_p")),  # temp 0 on raw logits
    "greedy-xtc": Params(seed=18, temp=0.0, xtc_probability=0.7, xtc_threshold=0.1, min_keep=3,
                         samplers=("min_p", "xtc", "top_k", "temperature")),
}


def make_logits(rng: np.random.Generator, n: int, mode: str) -> np.ndarray:
    x = rng.standard_normal(n).astype(np.float32) * np.float32(2.5)
    if mode == "tied":
        x = (np.round(x * 2) / 2).astype(np.float32)
    elif mode == "inf":
        x[rng.random(n) < 0.95] = -np.inf
    elif mode == "extreme":
        pick = rng.integers(0, 6, n)
        x = np.where(pick == 0, np.float32(3e38), x)
        x = np.where(pick == 1, np.float32(-3e38), x)
        x = np.where(pick == 2, np.float32(1e-42), x)  # subnormal
        x = np.where(pick == 3, np.float32(1e30), x)
        x = x.astype(np.float32)
    return x


def snapshot(c: Candidates) -> tuple:
    return (c.ids.copy(), bits(c.logits).copy(), bits(c.p).copy(), bool(c.sorted), int(c.selected))


def run(s: Sampler, logits: np.ndarray, used: list[int] | None = None) -> list[tuple]:
    cand = Candidates.from_logits(s._logits(logits))
    out = []
    assert s.steps is not None
    for st in s.steps:
        st.apply(cand)
        if used is not None:
            used.append(cand._rec is not None)  # the stage left its state in kernel records
        out.append(snapshot(cand))
    return out


@needs_kernels
@pytest.mark.parametrize("n", [32000, 262144])
@pytest.mark.parametrize("name", list(CHAINS))
def test_kernel_and_numpy_paths_identical(name: str, n: int) -> None:
    p = CHAINS[name]
    rng = np.random.default_rng(n + len(name))
    fast, ref = Sampler(p), Sampler(p)
    hist = rng.integers(0, n, 300).tolist()
    hist[150:] = hist[:150]  # repeats for DRY
    for t in hist:
        fast.accept(t)
        ref.accept(t)
    compared = 0
    used: list[int] = []
    for mode in ("plain", "tied", "inf", "extreme"):
        for step in range(2):
            lg = make_logits(rng, n, mode)
            got = run(fast, lg, used)
            with numpy_path():
                want = run(ref, lg, used_ref := [])
            assert not any(used_ref)
            names = [st.name for st in fast.steps]
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                where = f"{name} n={n} {mode} step {step} after {names[i]}"
                assert g[0].tolist() == w[0].tolist(), f"{where}: ids"
                assert np.array_equal(g[1], w[1]), f"{where}: logits"
                assert np.array_equal(g[2], w[2]), f"{where}: p"
                assert g[3:] == w[3:], f"{where}: sorted/selected {g[3:]} vs {w[3:]}"
                compared += 1
            tok = int(got[-1][0][got[-1][4]])
            fast.accept(tok)
            ref.accept(tok)
    assert compared >= 8 and any(used)


@needs_kernels
@pytest.mark.parametrize("chain_name", list(CHAINS))
@pytest.mark.parametrize("mode", ["plain", "tied", "inf", "extreme", "allinf", "nan"])
def test_sample_whole_chain_identical(mode: str, chain_name: str) -> None:
    """Sampler.sample on both paths: the kernel path opens with top-k's pass (the NaN check fused into it) and
    runs the chain's tail after it in one call (``K.run``)."""
    rng = np.random.default_rng(7)
    p = CHAINS[chain_name]
    for n in (32000, 262144):
        fast, ref = Sampler(p), Sampler(p)
        for _ in range(3):
            lg = make_logits(rng, n, "plain" if mode in ("allinf", "nan") else mode)
            if mode == "allinf":
                lg[:] = -np.inf
            if mode == "nan":
                lg[rng.integers(0, n)] = np.nan
                for s, ctx in ((fast, contextlib.nullcontext()), (ref, numpy_path())):
                    with ctx, pytest.raises(ValueError, match="NaN"):
                        s.sample(lg)
                continue
            a = fast.sample(lg)
            if chain_name in ("default", "nsigma", "all-on", "unsorted", "greedy-xtc"):
                assert fast._prog is not None  # the fused tail ran
            with numpy_path():
                b = ref.sample(lg)
            assert a == b
            assert fast.cur is not None and ref.cur is not None
            g, w = snapshot(fast.cur), snapshot(ref.cur)
            assert all(np.array_equal(x, y) for x, y in zip(g[:3], w[:3], strict=True)) and g[3:] == w[3:]
            fast.accept(a)
            ref.accept(b)


@needs_kernels
def test_top_n_sigma_bulk_sum_edges() -> None:
    """The variance sum's bulk blocks (one float binade, no tie) against the plain loop the kernel falls back to,
    through the C oracle-checked numpy port: sums crossing binades, exact half-ulp ties, huge and tiny terms."""
    rng = np.random.default_rng(5)
    cases = []
    for _ in range(6):
        cases.append((rng.standard_normal(262144) * 3).astype(np.float32))
    cases.append(np.round(rng.standard_normal(262144) * 4).astype(np.float32) / np.float32(2))  # many exact ties
    cases.append(np.full(262144, 0.5, np.float32))                    # zero variance: acc stays 0
    x = np.zeros(262144, np.float32)
    x[::2] = 1.0                                                      # squares of 0.5: exact quarter terms
    cases.append(x)
    y = (rng.standard_normal(262144) * 1e-20).astype(np.float32)      # tiny terms (near-subnormal squares)
    cases.append(y)
    z = (rng.standard_normal(262144) * 1e18).astype(np.float32)       # huge terms (squares beyond float)
    cases.append(z)
    for x in cases:
        for nsig in (0.5, 1.0, 3.0):
            a = Candidates.from_logits(x)
            b = Candidates.from_logits(x)
            truncation.TopNSigma(nsig).apply(a)
            with numpy_path():
                truncation.TopNSigma(nsig).apply(b)
            assert np.array_equal(bits(a.logits), bits(b.logits))


@needs_kernels
def test_records_round_trip() -> None:
    """Record mode and the three arrays convert losslessly (ids, logit and p bits, order)."""
    rng = np.random.default_rng(9)
    lg = rng.standard_normal(1000).astype(np.float32)
    c = Candidates.from_logits(lg)
    c.take(rng.permutation(1000)[:700])
    c.p = rng.random(700).astype(np.float32)
    want = snapshot(c)
    c.records()
    assert c.size == 700 and not c.identity
    assert [x.tolist() if isinstance(x, np.ndarray) else x for x in snapshot(c)] == \
        [x.tolist() if isinstance(x, np.ndarray) else x for x in want]
    assert c.token(5) == int(want[0][5])


# ---------------------------------------------------------------------------------------------------------------
# the generator in the kernel (sampler._kernels.Mt19937) and the compiled stages (K.Stage)

GEN_SEEDS = [0, 1, 42, 5489, 123456789, 2**31, 2**32 - 1, 2**32 + 7, 2**40 + 3, -1, -12345]


@needs_kernels
def test_kernel_generator_is_libstdcxx_mt19937_and_rng_py() -> None:
    """K.Mt19937 (a std::mt19937 in C) gives libstdc++'s outputs (the C++ oracle oracle/shims/rng_oracle.cpp) and is
    rng.Mt19937 state for state: outputs, getstate/setstate across the two, clone, discard, seed, ==."""
    from oracle.programs import compile_cpp, gxx
    from oracle.programs import run as run_cpp

    assert gxx() is not None, "no g++ for the libstdc++ oracle"
    exe = compile_cpp("rng_oracle.cpp")
    seeds = GEN_SEEDS + [int(x) for x in np.random.default_rng(3).integers(0, 2**32, 20)]
    out = run_cpp(exe, "".join(f"u32 {s & 0xFFFFFFFF} 1300\n" for s in seeds)).splitlines()
    G = kernels.K.Mt19937
    for s, line in zip(seeds, out, strict=True):
        g, r = G(s), rng.Mt19937(s)
        assert g.getstate() == r.getstate() and g == G(s & 0xFFFFFFFF)
        got = [g.next_u32() for _ in range(1300)]
        assert got == [int(x) for x in line.split()], s
        assert got == r.u32(1300).tolist() and g.getstate() == r.getstate(), s
    assert G().next_u32() == 3499211612  # default seed 5489
    g = G(99)
    g.discard(700)
    h = g.clone()
    st = g.getstate()
    a = [g() for _ in range(1000)]
    assert [h.next_u32() for _ in range(1000)] == a and g == h
    g.setstate(st)
    assert g != h
    g.discard(500)
    assert [g.next_u32() for _ in range(500)] == a[500:]
    r = rng.Mt19937(1)  # a state moved across, both ways, mid-block
    r.u32(333)
    g.setstate(r.getstate())
    assert [g.next_u32() for _ in range(700)] == r.u32(700).tolist()
    r.setstate(g.getstate())
    assert [g.next_u32() for _ in range(10)] == r.u32(10).tolist()
    g.seed(5)
    assert g == G(5) and g != G(6)
    assert g.__hash__ is None or isinstance(g.__hash__, type(None))
    for bad in (1.5, True, "1"):
        with pytest.raises(TypeError):
            G(bad)
    with pytest.raises(ValueError):
        g.setstate(((0,) * 3, 0))
    with pytest.raises(ValueError):
        g.setstate(((0,) * 624, 625))
    assert isinstance(rng.engine(7), G)
    with numpy_path():
        assert type(rng.engine(7)) is rng.Mt19937


DRAWING = {  # chains whose stages draw: dist, XTC, mirostat v1/v2, adaptive-p (and one adaptive-p off: target < 0)
    "default": CHAINS["default"],
    "all-on": CHAINS["all-on"],
    "xtc-half": Params(seed=21, xtc_probability=0.5, xtc_threshold=0.05, min_keep=2),
    "mirostat1": CHAINS["mirostat1"],
    "mirostat2": CHAINS["mirostat2"],
    "adaptive-p": CHAINS["adaptive-p"],
    "adaptive-off": Params(seed=22, adaptive_target=-1.0, samplers=("top_k", "adaptive_p")),
}


def _generators(s: Sampler) -> list[tuple]:
    assert s.steps is not None
    out = []
    for st in s.steps:
        if hasattr(st, "rng"):
            out.append(st.rng.getstate())
        if hasattr(st, "mu"):
            out.append(bits(np.float32(st.mu)).tolist())
        if hasattr(st, "state"):
            out.append(st.state)
    return out


@needs_kernels
@pytest.mark.parametrize("name", list(DRAWING))
def test_compiled_stages_and_generators_over_many_steps(name: str) -> None:
    """Stage by stage, 150 steps: the compiled stages drawing from generators in C vs the numpy port drawing from
    rng.py's Mt19937, with every generator's state (and mirostat's mu, adaptive-p's EMA) compared after every
    step, through a clone at step 50 and a reset at step 100."""
    p = DRAWING[name]
    n = 3000
    rng_ = np.random.default_rng(len(name))
    fast, ref = Sampler(p), Sampler(p)
    fast._build(n)
    with numpy_path():
        ref._build(n)
    assert fast.steps is not None and ref.steps is not None
    compiled = {st.name for st in fast.steps if isinstance(getattr(st.apply, "__self__", None), kernels.K.Stage)}
    assert compiled == {"top-p", "min-p", "temp-ext", "dist", "xtc", "typical", "adaptive-p", "top-n-sigma"} & {
        st.name for st in fast.steps if name != "adaptive-off" or st.name != "adaptive-p"}, compiled
    for step in range(150):
        if step == 50:
            fast, ref = fast.clone(), ref.clone()
        if step == 100:
            fast.reset()
            ref.reset()
        lg = make_logits(rng_, n, ("plain", "tied", "inf")[step % 3])
        got = run(fast, lg)
        with numpy_path():
            want = run(ref, lg)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            where = f"{name} step {step} after {fast.steps[i].name}"
            assert g[0].tolist() == w[0].tolist() and np.array_equal(g[1], w[1]) and np.array_equal(g[2], w[2]), where
            assert g[3:] == w[3:], where
        assert _generators(fast) == _generators(ref), f"{name} step {step}: generator states"
        tok = int(got[-1][0][got[-1][4]])
        fast.accept(tok)
        with numpy_path():
            ref.accept(tok)
        assert _generators(fast) == _generators(ref), f"{name} step {step}: after accept"


@needs_kernels
@pytest.mark.parametrize("name", list(DRAWING))
def test_drawing_chains_match_llama_cpp_over_many_steps(name: str) -> None:
    """Sampler.sample with the generators in C against llama.cpp's own chain (llama-cpp-python) on the same seed:
    400 steps, the same token every step, through llama_sampler_clone and llama_sampler_reset."""
    from oracle.chain import CChain
    from oracle.llama import L

    p = DRAWING[name]
    n = 1000
    rng_ = np.random.default_rng(100 + len(name))
    ours, c = Sampler(p), CChain(p, n)
    try:
        for step in range(400):
            if step == 150:
                twin, ctwin = ours.clone(), L.llama_sampler_clone(c.chain)
                L.llama_sampler_free(c.chain)
                c.chain, ours = ctwin, twin
            if step == 300:
                ours.reset()
                c.reset()
            lg = make_logits(rng_, n, ("plain", "tied")[step % 2])
            want = c.apply(lg).token
            assert ours.sample(lg) == want, f"{name} step {step}"
            ours.accept(want)
            c.accept(want)
    finally:
        c.free()


@needs_kernels
def test_compiled_stage_edges() -> None:
    """K.Stage on arrays not in record form (packed, or temp-ext's float path), on empty and one-element arrays
    (dist's -1 and no draw, top-p's assertion, XTC's no draw), and on a wrong argument."""
    lg = np.linspace(-2, 2, 50, dtype=np.float32)
    for mk in (lambda: truncation.TopP(0.9, 1), lambda: truncation.MinP(0.05, 1), lambda: truncation.Typical(0.9, 1),
               lambda: temperature.TempExt(0.8, 0.3, 1.0), lambda: dist.Dist(3),
               lambda: truncation.XTC(1.0, 0.01, 1, 4), lambda: truncation.TopNSigma(1.0)):
        a, b = Candidates.from_logits(lg), Candidates.from_logits(lg)
        st = mk()
        st.apply(a)  # the compiled stage packs the three arrays first
        with numpy_path():
            ref = mk()
            ref.apply(b)
        assert snapshot(a)[0].tolist() == snapshot(b)[0].tolist(), st.name
        assert all(np.array_equal(x, y) for x, y in zip(snapshot(a)[1:3], snapshot(b)[1:3], strict=True)), st.name
        assert snapshot(a)[3:] == snapshot(b)[3:], st.name
    rs = np.random.default_rng(4)  # top-n-sigma on records (after top-k), -inf-heavy and tied too
    for mode in ("plain", "tied", "inf"):
        big = make_logits(rs, 32000, mode)
        a, b = Candidates.from_logits(big), Candidates.from_logits(big)
        truncation.TopK(3000).apply(a)
        truncation.TopNSigma(0.5).apply(a)
        assert a._rec is not None
        with numpy_path():
            truncation.TopK(3000).apply(b)
            truncation.TopNSigma(0.5).apply(b)
        assert snapshot(a)[0].tolist() == snapshot(b)[0].tolist() and np.array_equal(snapshot(a)[1], snapshot(b)[1])
    t = temperature.TempExt(0.5, 0.0, 1.0)
    c = Candidates.from_logits(lg)
    t.apply(c)
    assert c._rec is None and np.array_equal(c.logits, lg / np.float32(0.5))  # the float path, no packing
    d = dist.Dist(9)
    before = d.rng.getstate()
    e = Candidates.from_records(np.empty(0, kernels.REC), 0, True)
    d.apply(e)
    assert e.selected == -1 and d.rng.getstate() == before
    x = truncation.XTC(1.0, 0.01, 1, 9)
    one = Candidates.from_records(np.zeros(1, kernels.REC), 1, True)
    x.apply(one)
    assert x.rng.getstate() == before and one.size == 1
    with pytest.raises(RuntimeError, match="cur_p->size > 0"):
        truncation.TopP(0.5, 1).apply(Candidates.from_records(np.empty(0, kernels.REC), 0, True))
    with numpy_path(), pytest.raises(RuntimeError, match="cur_p->size > 0"):
        truncation.TopP(0.5, 1).apply(Candidates.from_records(np.empty(0, kernels.REC), 0, True))
    with pytest.raises(TypeError):
        truncation.TopP(0.5, 1).apply(object())
    with pytest.raises(ValueError):
        kernels.K.Stage(99, 0, 0.0, 0.0, 0.0, None, None)
    with pytest.raises(TypeError):
        kernels.K.Stage(6, 0, 0.0, 0.0, 0.0, None, None)  # dist needs its generator
