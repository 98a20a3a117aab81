"""The compiled sampler stages (``sampler._kernels``, built from ``sampler/_kernels.cpp``), or None.

The extension is optional: ``pip install -e .`` builds it (see pyproject.toml); without a compiler, or with
``CONSTRAINED_PURE_PYTHON=1`` in the environment, :data:`K` is None and every stage runs its numpy port, the
reference the kernels are tested against bit for bit (``tests/sampler/test_sampler_kernels.py``).

The kernels work on a record array laid out as llama.cpp's ``llama_token_data`` (:data:`REC`: int32 id, float
logit, float p), so libstdc++'s sorts order ties exactly as llama.cpp's do.

Besides functions, the module has two types (``sampler/_kernels_objects.h``): ``K.Mt19937``, a ``std::mt19937`` whose
state lives in C (:func:`sampler.rng.engine` gives one to every drawing sampler; same interface and outputs as
:class:`sampler.rng.Mt19937`), and ``K.Stage``, one stage with its parameters parsed once, whose ``apply`` reads and
writes a :class:`sampler.candidates.Candidates`' slots in C and draws from its generator in the same call (the
compiled ``apply`` of top-p, min-p, typical, top-n-sigma, temp-ext, dist, XTC and adaptive-p instances).

Example:
    >>> import numpy as np
    >>> REC.itemsize
    12
    >>> (K is None) == (IMPORT_ERROR is not None or PURE)
    True
    >>> K is None or K.Mt19937(5489).next_u32() == 3499211612
    True
"""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np

__all__ = ["K", "REC", "OP", "PURE", "IMPORT_ERROR"]

REC = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data
# one stage of a fused run (K.run): code 1 top-k, 2 top-p, 3 min-p, 4 typical, 5 temp-ext, 6 dist
OP = np.dtype([("code", "<i4"), ("i1", "<i4"), ("f1", "<f4"), ("f2", "<f4"), ("f3", "<f4")])
PURE = os.environ.get("CONSTRAINED_PURE_PYTHON", "") not in ("", "0")
IMPORT_ERROR: str | None = None
K: ModuleType | None = None
if not PURE:
    try:
        from . import _kernels as K  # noqa: N814
    except ImportError as e:  # not built (no compiler at install time)
        IMPORT_ERROR = f"{type(e).__name__}: {e}"
        K = None
