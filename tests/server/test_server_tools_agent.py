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


@pytest.mark.parametrize("template", ["Qwen-Qwen3-0.6B", "google-gemma-4-31B-it"])
def test_agent_example_under_another_template(template: str) -> None:
    """``--template``: the loop under a thinking template (Qwen3, llama-server's ``<tool_call>`` with ``<think>``) and
    a non-Hermes format (Gemma 4's ``<|tool_call>call:name{...}`` notation, llama-server's handler), over HTTP."""
    r = subprocess.run([sys.executable, str(EXAMPLE), "server", "--template", template], capture_output=True,
                       text=True, timeout=900, env=dict(os.environ, GGML_NO_BACKTRACE="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^\[server\] tool call: get_weather\(\{.*\}\)  id ", r.stdout, re.M), r.stdout
    assert "[server] final answer: " in r.stdout
    assert re.search(r"^\[server\] tool call valid against the schema: (True|False)$", r.stdout, re.M)
