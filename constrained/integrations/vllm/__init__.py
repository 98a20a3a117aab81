"""vLLM: llama.cpp's grammar semantics as a structured-output backend and as a per-request logits processor.

**Structured-output backend** (:mod:`.backend`): vLLM has no registry for third-party backends yet (RFC
vllm-project/vllm#50966), so the ``vllm.general_plugins`` entry point of this package (:func:`register`, which vLLM
runs in every process: front end, engine core, workers) puts :class:`~.backend.ConstrainedBackend` in place of the
backend vLLM builds for ``structured_outputs_config={"backend": "xgrammar"}``, and our request validator in place of
xgrammar's. It is opt-in: nothing changes unless ``CONSTRAINED_VLLM=1`` is in the environment (or :func:`enable` was
called before the engine started, which sets it for the engine's processes). Then ``structured_outputs`` ``grammar``
is GBNF as llama.cpp parses it, ``json`` / ``response_format`` schemas are converted as llama-server converts them
(``CONSTRAINED_VLLM_ENFORCE=all`` for :meth:`Grammar.from_json_schema`'s ``enforce="all"``), and a bad grammar fails
its own request only (HTTP 400 with llama.cpp's message and a caret).

**Logits processor** (:mod:`.logits_processor`): :class:`~.logits_processor.ConstrainedLogitsProcessor`, the public V1
interface, opt-in per request through ``SamplingParams(extra_args={"constrained": {...}})`` (``vllm_xargs`` in the
OpenAI API); its parity mode draws each token with llama-server's sampler chain on vLLM's logits.

Example:
    >>> import constrained.integrations.vllm as cv
    >>> cv.ENV, cv.enabled() in (True, False)
    ('CONSTRAINED_VLLM', True)
    >>> cv.enable()                                                    # doctest: +SKIP
    >>> from vllm import LLM, SamplingParams                           # doctest: +SKIP
    >>> from vllm.sampling_params import StructuredOutputsParams       # doctest: +SKIP
    >>> llm = LLM(model_dir, structured_outputs_config={"backend": "xgrammar"})          # doctest: +SKIP
    >>> llm.generate(["2+2="], SamplingParams(structured_outputs=StructuredOutputsParams(
    ...     grammar='root ::= [0-9]+')))                               # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ENV", "enable", "enabled", "register"]

ENV = "CONSTRAINED_VLLM"
_registered = False


def enabled() -> bool:
    """Whether the backend is switched on for this process (``CONSTRAINED_VLLM`` is 1/true/yes/on)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def enable() -> None:
    """Switch the backend on: set ``CONSTRAINED_VLLM=1`` (inherited by the engine's processes) and patch this one.

    Call it before creating ``vllm.LLM``; for ``vllm serve`` set the variable in its environment instead.
    """
    os.environ[ENV] = "1"
    register()


def register() -> None:
    """The ``vllm.general_plugins`` entry point: install the backend when :func:`enabled`; never raises."""
    global _registered
    if _registered or not enabled():
        return
    try:
        from .backend import install

        install()
        _registered = True
    except Exception as err:  # pragma: no cover - a vLLM version whose internals moved
        import logging

        logging.getLogger("constrained.integrations.vllm").error("constrained: could not install the vLLM backend: %s", err)


def __getattr__(name: str) -> Any:  # the classes need vllm and torch: built on first use
    if name in ("ConstrainedBackend", "ConstrainedGrammar", "validate_request"):
        from . import backend

        return getattr(backend, name)
    if name == "ConstrainedLogitsProcessor":
        from .logits_processor import ConstrainedLogitsProcessor

        return ConstrainedLogitsProcessor
    raise AttributeError(f"module 'constrained.integrations.vllm' has no attribute {name!r}")
