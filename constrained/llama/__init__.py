"""The one-slot llama-server runtime on llama-cpp-python: flags, model and context, slot bookkeeping, generation.

- :mod:`.flags`: llama-server's command line -> load, sampling and server settings (no llama.cpp needed);
- :mod:`.slot`: a slot's prefix reuse, prompt batches and checkpoints, as pure functions (no llama.cpp needed);
- :mod:`.model`: the model and the context llama-server creates, prompt evaluation, logits;
- :mod:`.generation`: one request as llama-server's ``/completion`` runs it.

The names below are loaded on first use, so ``constrained.llama.flags`` imports without llama-cpp-python.

Example:
    >>> from constrained.llama import generate, load_default_model  # doctest: +SKIP
    >>> llm = load_default_model()                                  # doctest: +SKIP
    >>> generate(llm, "2+2=", grammar='root ::= [0-9]+').text        # doctest: +SKIP
    '4'
"""

from __future__ import annotations

from typing import Any

_PUBLIC = {
    "DEFAULT_N_PREDICT": "generation", "Generation": "generation", "TokenEvent": "generation", "TokenProb": "generation",
    "generate": "generation", "generate_stream": "generation",
    "context_params": "model", "default_model_path": "model", "load_default_model": "model", "load_model": "model",
    "smollm2_model_path": "model", "vocabulary_of": "model",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:  # PEP 562: llama-cpp-python is imported only when a model is needed
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
