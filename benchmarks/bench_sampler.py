#!/usr/bin/env python
"""llama-server's sampler chains, stage by stage: our Sampler vs llama.cpp's C samplers, interleaved in one run.

For 32,000 and 262,144 logits, plain (normal, sd 2.5) and tied (the same rounded to 0.5, as quantised models give),
and for the chains ``default`` (llama-server's), ``nsigma`` (the default chain plus ``top_n_sigma: 1.0``),
``all-on`` (penalties, DRY with a 1,024-token window, top-n-sigma, top-k, typical, top-p, min-p, XTC at probability
1, dynamic temperature), ``mirostat1``, ``mirostat2`` and ``adaptive-p``, each step times, back to back on the same
logits:

* the whole chain: C ``llama_sampler_apply`` on a filled candidate buffer vs our ``Sampler.sample(logits)`` (the
  whole call: validation, candidate array, chain), and checks that both select the same token;
* every stage: each C sampler of a second C chain applied in turn to one buffer vs each of our samplers applied in
  turn to one candidate array (so every stage sees the same input on both sides).

The two sides alternate step by step (and which goes first, since the second finds the caches as the first left
them: C's 262,144-record buffer is 3 MB) and every time is the thread's CPU time (``time.thread_time``: a preemption on
a loaded machine is not counted; ``--wall`` uses ``perf_counter`` instead); the table gives the medians over the
steps and the median of the per-step ratios (ours / C), with the load average before and after. Every row whose
ratio is over 1.5 is flagged, however small its times: many stages take 1-5 us, where the clock itself matters, so the
header prints the timer's floor (the median of an empty timed interval: both sides' times include it once) and the
default is 60 steps per row; the last lines give the worst stage ratio of every row and the flagged count.

    GGML_NO_BACKTRACE=1 .venv/bin/python benchmarks/bench_sampler.py [--steps 60] [--chains default,all-on] [--pure]

``--pure`` measures our numpy path (``CONSTRAINED_PURE_PYTHON=1``) instead of the compiled kernels.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
if "--pure" in sys.argv:  # before sampler is imported
    os.environ["CONSTRAINED_PURE_PYTHON"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from oracle.chain import CChain  # noqa: E402
from oracle.llama import L  # noqa: E402
from sampler import kernels  # noqa: E402
from sampler.candidates import Candidates  # noqa: E402
from sampler.chain import Sampler  # noqa: E402
from sampler.params import Params  # noqa: E402

CHAINS = {
    "default": Params(seed=1234),
    "all-on": Params(seed=1234, penalty_repeat=1.1, penalty_freq=0.1, penalty_present=0.1, penalty_last_n=256,
                     dry_multiplier=0.8, dry_penalty_last_n=1024, dry_sequence_breakers=(), top_n_sigma=2.0,
                     typ_p=0.95, xtc_probability=1.0, xtc_threshold=0.01, dynatemp_range=0.3),
    "nsigma": Params(seed=1234, top_n_sigma=1.0),  # the default chain plus top-n-sigma (issue 17's case)
    "mirostat1": Params(seed=1234, mirostat=1),
    "mirostat2": Params(seed=1234, mirostat=2),
    "adaptive-p": Params(seed=1234, adaptive_target=0.5,
                         samplers=("top_k", "top_p", "min_p", "temperature", "adaptive_p")),
}


_clock = time.thread_time  # CPU time of this thread: a preemption (7 other agents on 2 cores) is not counted


def make_logits(rng: np.random.Generator, n: int, ties: bool) -> np.ndarray:
    x = rng.standard_normal(n).astype(np.float32) * np.float32(2.5)
    return (np.round(x * 2) / 2).astype(np.float32) if ties else x


def bench(p: Params, n: int, ties: bool, steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ours, ours_st = Sampler(p), Sampler(p)
    c, c_st = CChain(p, n), CChain(p, n)
    names = c_st.names()
    hist = rng.integers(0, n, 1500)  # a prompt: fills the penalty and DRY windows (with repeats for DRY)
    hist[700:1400] = hist[:700]
    for t in hist.tolist():
        for s in (ours, ours_st):
            s.accept(t)
        for s in (c, c_st):
            s.accept(t)
    whole: list[tuple[float, float]] = []
    stages: list[list[tuple[float, float]]] = [[] for _ in names]
    for step in range(steps):
        lg = make_logits(rng, n, ties)
        c_first = step % 2 == 0  # the side that goes second finds the caches as the other left them: alternate

        def c_whole(lg: np.ndarray = lg) -> tuple[int, float]:
            c.cand.fill(lg)
            t0 = _clock()
            L.llama_sampler_apply(c.chain, ctypes.byref(c.cand.arr))
            t1 = _clock()
            return c.cand.result().token, t1 - t0

        def ours_whole(lg: np.ndarray = lg) -> tuple[int, float]:
            t0 = _clock()
            tok = ours.sample(lg)
            return tok, _clock() - t0

        if c_first:
            (want, tc), (got, to) = c_whole(), ours_whole()
        else:
            (got, to), (want, tc) = ours_whole(), c_whole()
        if got != want:
            raise SystemExit(f"MISMATCH n={n} ties={ties}: ours {got} vs C {want}")
        whole.append((to, tc))

        # stage by stage on the second pair of chains
        def c_stages(lg: np.ndarray = lg) -> tuple[int, list[float]]:
            c_st.cand.fill(lg)
            ct = []
            for i in range(len(names)):
                s = L.llama_sampler_chain_get(c_st.chain, i)
                t0 = _clock()
                L.llama_sampler_apply(s, ctypes.byref(c_st.cand.arr))
                ct.append(_clock() - t0)
            return c_st.cand.result().token, ct

        def ours_stages(lg: np.ndarray = lg) -> tuple[Candidates, list[float]]:
            cand = Candidates.from_logits(ours_st._logits(lg), copy=False)
            ot = []
            for st in ours_st.steps:
                t0 = _clock()
                st.apply(cand)
                ot.append(_clock() - t0)
            return cand, ot

        if c_first:
            (want_st, ct), (cand, ot) = c_stages(), ours_stages()
        else:
            (cand, ot), (want_st, ct) = ours_stages(), c_stages()
        got_st = int(cand.ids[cand.selected])
        if got_st != want_st:
            raise SystemExit(f"MISMATCH (stages) n={n} ties={ties}: ours {got_st} vs C {want_st}")
        for i in range(len(names)):
            stages[i].append((ot[i], ct[i]))
        for s in (ours, ours_st):
            s.accept(got)
        for s in (c, c_st):
            s.accept(got)
    c.free()
    c_st.free()
    return whole, list(zip(names, stages, strict=True))


def _ratio(pairs: list[tuple[float, float]]) -> float:
    a = np.array(pairs)
    return float(np.median(a[:, 0] / np.maximum(a[:, 1], 1e-9)))


def _row(label: str, pairs: list[tuple[float, float]]) -> str:
    a = np.array(pairs)
    o, cc = np.median(a[:, 0]) * 1e3, np.median(a[:, 1]) * 1e3
    r = _ratio(pairs)
    flag = "  <-- over 1.5x" if r > 1.5 else ""  # every row, however small (see the timer floor in the header)
    return f"  {label:14} {o:9.4f} {cc:9.4f} {r:7.2f}{flag}"


def timer_floor(n: int = 2001) -> float:
    """The median time of an empty timed interval, in ms (what one clock pair adds to every measurement)."""
    d = []
    for _ in range(n):
        t0 = _clock()
        d.append(_clock() - t0)
    return float(np.median(d)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--chains", default=",".join(CHAINS))
    ap.add_argument("--sizes", default="32000,262144")
    ap.add_argument("--wall", action="store_true", help="wall-clock time instead of the thread's CPU time")
    ap.add_argument("--pure", action="store_true", help="our numpy path (CONSTRAINED_PURE_PYTHON=1), not the kernels")
    a = ap.parse_args()
    global _clock
    if a.wall:
        _clock = time.perf_counter
    load = os.getloadavg()
    print(f"# load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {a.steps} steps per row; "
          f"medians (ms, {'wall clock' if a.wall else 'thread CPU time'}) of interleaved steps, "
          "ratio = median of per-step ours/C")
    print(f"# ours: {'the compiled kernels (sampler._kernels)' if kernels.K is not None else 'the numpy path'}; "
          f"C and ours alternate which goes first; timer floor {timer_floor():.4f} ms (in both sides' times)")
    worst: list[tuple[str, str, float]] = []
    for chain in a.chains.split(","):
        p = CHAINS[chain]
        for n in (int(x) for x in a.sizes.split(",")):
            for ties in (False, True):
                whole, stages = bench(p, n, ties, a.steps)
                print(f"{chain} n={n} {'tied' if ties else 'plain'}:   {'ours ms':>9} {'C ms':>9} {'ratio':>7}")
                print(_row("whole chain", whole))
                for name, pairs in stages:
                    print(_row(name, pairs))
                rs = [(name, _ratio(pairs)) for name, pairs in stages]
                name, r = max(rs, key=lambda x: x[1])
                worst.append((f"{chain} n={n} {'tied' if ties else 'plain'}", f"{name} {r:.2f}, whole {_ratio(whole):.2f}",
                              max(r, _ratio(whole))))
                sys.stdout.flush()
    print("# worst stage per row (and the whole chain):")
    for row, txt, _ in worst:
        print(f"#   {row:28} {txt}")
    over = sum(r > 1.5 for *_, r in worst)
    print(f"# rows with a stage or the whole chain over 1.5x: {over} of {len(worst)}")
    load = os.getloadavg()
    print(f"# load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
