"""llama-cpp-python's high-level API: a ``logits_processor`` that applies our exact grammar.

For code that keeps ``Llama.create_completion`` / ``create_chat_completion`` (or ``Llama.generate``) instead of
:func:`constrained.llama.generate`: pass ``logits_processor=grammar_logits_processor(llm, spec)`` and leave
``grammar=`` unset. llama-cpp-python calls the processor with the tokens evaluated so far (prompt included) and the
logits row of the next token, before its own samplers; the processor advances the matcher over the new tokens and
sets every token llama.cpp's grammar sampler would reject to -inf (end-of-generation only where the grammar can end,
and llama-cpp-python stops on those). Unlike llama-cpp-python's ``LlamaGrammar`` (about 30 ms per token on a 262k
vocabulary), the mask comes from the cached matcher.

It is not llama-server's sampling: the masking happens before llama-cpp-python's chain instead of llama-server's
sample-then-check-then-redraw (:func:`constrained.llama.generate` reproduces that). The set of allowed tokens is
the same, so the draw is from the same support.

Example:
    >>> from llama_cpp import Llama                                          # doctest: +SKIP
    >>> llm = Llama("model.gguf", n_ctx=512, verbose=False)                  # doctest: +SKIP
    >>> out = llm.create_completion("A JSON person: ", max_tokens=64,
    ...                             logits_processor=grammar_logits_processor(llm, {"type": "object"}))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..vocab import Vocabulary
from .constraint import SequenceConstraint, grammar_from_spec

__all__ = ["GrammarLogitsProcessor", "grammar_logits_processor"]


class GrammarLogitsProcessor:
    """A llama-cpp-python logits processor over one completion (make a new one per call).

    Args:
        grammar: a Grammar, GBNF text, a JSON schema (dict or JSON text) or see :func:`grammar_from_spec`.
        llm_or_vocab: the ``llama_cpp.Llama`` (its vocabulary is read through llama.cpp's C API), or a
            :class:`Vocabulary`.
        enforce: passed to the JSON-schema conversion.
    """

    def __init__(self, grammar: Any, llm_or_vocab: Any, *, enforce: str = "llama.cpp") -> None:
        vocab = llm_or_vocab if isinstance(llm_or_vocab, Vocabulary) else _vocab_of(llm_or_vocab)
        self.constraint = SequenceConstraint(grammar_from_spec(grammar, enforce=enforce), vocab)
        self._prompt_len = -1

    @property
    def generated(self) -> list[int]:
        """The tokens accepted so far (the completion's tokens, up to its end)."""
        return list(self.constraint._seen)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self._prompt_len < 0:
            self._prompt_len = len(input_ids)
        self.constraint.sync(input_ids[self._prompt_len:])
        return self.constraint.mask_logits(scores)


def _vocab_of(llm: Any) -> Vocabulary:
    v = getattr(llm, "_constrained_vocab", None)
    if v is None:
        v = Vocabulary.from_llama(llm)
        try:
            llm._constrained_vocab = v        # kept on the model (a global cache would keep models alive)
        except AttributeError:  # pragma: no cover - a foreign object
            pass
    return v


def grammar_logits_processor(llm: Any, grammar: Any, *, enforce: str = "llama.cpp") -> Any:
    """A ``llama_cpp.LogitsProcessorList`` holding one :class:`GrammarLogitsProcessor` for ``llm``."""
    from llama_cpp import LogitsProcessorList

    return LogitsProcessorList([GrammarLogitsProcessor(grammar, llm, enforce=enforce)])
