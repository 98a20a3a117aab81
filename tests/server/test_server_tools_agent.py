"""``examples/agent.py`` runs as a user runs it: the whole loop (question, tool call, tool result, answer) on the
default model through the Python API and through ``constrained serve`` with the official ``openai`` client."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent.py"

pytest.importorskip("openai")


def test_agent_example_both_paths() -> None:
    r = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, GGML_NO_BACKTRACE="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    for path in ("api", "server"):
        call = re.search(rf"^\[{path}\] tool call: get_weather\((.*?)\)  ", r.stdout, re.S | re.M)
        assert call, r.stdout
        assert f"[{path}] final answer: " in r.stdout
        assert f"[{path}] tool call valid against the schema: True" in r.stdout
    assert re.search(r"\[server\] tool call: .* id [0-9A-Za-z]{32}$", r.stdout, re.M | re.S)
