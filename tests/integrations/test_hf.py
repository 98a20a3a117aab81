"""The transformers side of the scale path, run in the scale venv (tests/scale): ``Vocabulary.from_hf`` equal to
``Vocabulary.from_gguf`` id by id, and the transformers ``LogitsProcessor`` whose outputs llama.cpp's grammar
sampler accepts."""

from __future__ import annotations

from pathlib import Path

from tests.scale import run_in_scale_venv

SCALE = Path(__file__).resolve().parents[1] / "scale"


def test_hf_in_scale_venv() -> None:
    run_in_scale_venv(*sorted(str(p.relative_to(SCALE.parent.parent)) for p in SCALE.glob("test_hf*.py")))
