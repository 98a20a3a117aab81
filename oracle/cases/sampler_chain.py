"""Our sampler chain beside llama.cpp's C chain, step by step (the sampler oracle tests and
``scripts/sampler_sweep.py``).

``run_sequence(params, n_vocab, rng, steps)`` accepts a random prompt, then for each step draws logits, runs both
chains stage by stage and demands identical candidate arrays after every stage; the selected token is accepted on
both sides. ``COUNTS`` and ``ACTIVE`` (the C stages that changed the array, by sampler name) accumulate over calls.
Needs llama-cpp-python (``oracle.chain``).

Example:
    >>> rng = np.random.default_rng(1)                        # doctest: +SKIP
    >>> run_sequence(Params(seed=1), 100, rng, 4); COUNTS["steps"]   # doctest: +SKIP
    4
"""

from __future__ import annotations

import numpy as np

from oracle.cases.sampler import random_logits, run_stages, same_state
from oracle.chain import CChain
from sampler.chain import Sampler
from sampler.params import Params

COUNTS = {"sequences": 0, "steps": 0, "stages": 0}
ACTIVE: dict[str, int] = {}  # C stages that changed the array, by sampler name


def run_sequence(p: Params, n: int, rng: np.random.Generator, steps: int, *, vocab=None, vm=None,  # noqa: ANN001
                 prompt_len: int = 16, modes: tuple[str, ...] | None = None, boost: list[int] | None = None) -> None:
    ours = Sampler(p, vocab)
    c = CChain(p, n, vm)
    names = c.names()
    try:
        _run(ours, c, names, p, n, rng, steps, prompt_len, modes, boost)
    except AssertionError as e:
        raise AssertionError(f"{e}\n  params={p}") from None
    finally:
        c.free()


def _run(ours: Sampler, c: CChain, names: list[str], p: Params, n: int, rng: np.random.Generator, steps: int,
         prompt_len: int, modes: tuple[str, ...] | None, boost: list[int] | None) -> None:
    assert len(names) == len(ours.steps or []) or ours.vocab is None
    pool = boost if boost else None
    for _ in range(int(rng.integers(0, prompt_len + 1))):
        t = int(rng.choice(pool)) if pool else int(rng.integers(0, n))
        ours.accept(t)
        c.accept(t)
    for step in range(steps):
        mode = None if modes is None else str(rng.choice(modes))
        lg = random_logits(rng, n, mode)
        if boost:
            lg[np.array(boost)] += 6
        cs = c.stages(lg)
        os_ = run_stages(ours, lg)
        assert len(cs) == len(os_), (names, [s.name for s in ours.steps])
        for i, (a, b) in enumerate(zip(os_, cs, strict=True)):
            same_state(a, b, f"n={n} step {step} stage {i} ({names[i]})")
        COUNTS["stages"] += len(cs)
        prev_ids, prev_lg = np.arange(n), lg
        for nm, b in zip(names, cs, strict=True):
            if len(b.ids) != len(prev_ids) or not np.array_equal(b.ids, prev_ids) or \
                    not np.array_equal(b.logits, prev_lg):
                ACTIVE[nm] = ACTIVE.get(nm, 0) + 1
            prev_ids, prev_lg = b.ids, b.logits
        tok = int(cs[-1].token)
        assert tok >= 0
        ours.accept(tok)
        c.accept(tok)
        COUNTS["steps"] += 1
    COUNTS["sequences"] += 1
