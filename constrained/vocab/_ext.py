"""The package's one loader of its compiled extension (:mod:`constrained.vocab._read`): ``read_ext`` is the module,
or None where it is not built or ``CONSTRAINED_PURE_PYTHON=1`` asks for the Python loops (the references)."""

from __future__ import annotations

import os
from typing import Any

PURE = os.environ.get("CONSTRAINED_PURE_PYTHON", "") not in ("", "0")
read_ext: Any = None
if not PURE:
    try:
        from . import _read as read_ext
    except ImportError:  # pragma: no cover - no C++ compiler at install time: the Python loops run
        read_ext = None
