"""Case tables for the S2 sampler against ``oracle/shims/s2_oracle.cpp`` (``tests/sampler/test_s2.py`` and
``scripts/s2_sweep.py``): the temperatures and top-p values swept, and random logits with the shapes that find
differences (ties, infinities, underflow).

Example:
    >>> s2_logits(np.random.default_rng(0), 8).dtype
    dtype('float32')
"""

from __future__ import annotations

import numpy as np

TEMPS = [-1.0, 0.0, 0.8, 1.0, 2.0]
TOP_PS = [0.0, 0.8, 1.0]


def s2_logits(rs: np.random.Generator, n: int) -> np.ndarray:
    """Random float32 logits of one of eight shapes (normal, heavy ties, rounded, peaked, nearly flat, constant,
    wide), then sometimes -inf entries, all -inf but two, +inf entries, or all -inf."""
    kind = int(rs.integers(0, 8))
    if kind == 0:
        x = rs.normal(size=n) * float(rs.choice([1.0, 3.0, 10.0]))
    elif kind == 1:  # heavy ties: 1..8 distinct values
        x = rs.integers(0, int(rs.integers(1, 9)), n) * float(rs.choice([0.1, 1.0, 5.0]))
    elif kind == 2:
        x = np.round(rs.normal(size=n) * 3)
    elif kind == 3:
        x = np.round(rs.normal(size=n) * 2, 1)
    elif kind == 4:  # a peaked, llm-like distribution
        x = rs.normal(size=n) * 2 + np.where(rs.random(n) < 0.002, 12.0, 0.0)
    elif kind == 5:
        x = rs.normal(size=n) * 0.001  # nearly flat: top-p keeps many
    elif kind == 6:
        x = np.full(n, float(rs.normal()))
    else:
        x = np.round(rs.normal(size=n) * 30)  # wide: many probabilities underflow
    x = x.astype(np.float32)
    r = rs.random()
    if r < 0.3:
        x[rs.random(n) < rs.random()] = -np.inf
    elif r < 0.33:
        x[:] = -np.inf
        x[rs.integers(0, n, 2)] = 1.0
    elif r < 0.35:
        x[rs.integers(0, n, int(rs.integers(1, 3)))] = np.inf
    elif r < 0.36:
        x[:] = -np.inf
    return x
