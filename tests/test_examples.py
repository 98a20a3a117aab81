"""The examples run as a user runs them and print a result that validates against their schema."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["extract.py", "api_response.py", "tool_call.py"])
def test_example_runs_and_validates(name: str) -> None:
    r = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, GGML_NO_BACKTRACE="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "valid against the schema: True" in r.stdout
