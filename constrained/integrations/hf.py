"""transformers: a ``LogitsProcessor`` that applies llama.cpp's grammar semantics to ``model.generate``.

Each row of the batch gets its own matcher (one grammar for all rows, or one per row). On every step the processor
accepts the token each row produced since the last call, fills a packed bitmask row per sequence
(:mod:`constrained.grammar.bitmask`) and sets the disallowed logits to -inf. End-of-generation tokens are allowed only
where the grammar can end, as in llama.cpp; pass ``eos_token_id=processor.eos_token_id`` to ``generate`` so that
generation stops on every token llama.cpp would stop on (otherwise a row that ended on an end-of-generation token
``generate`` does not know is then allowed only ``generate``'s own stop tokens).

One processor serves one ``generate`` call (as xgrammar's): it keeps per-row state from the first call on. Beam
search reorders rows, so use sampling or greedy decoding.

Example:
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer          # doctest: +SKIP
    >>> tok = AutoTokenizer.from_pretrained(path); model = AutoModelForCausalLM.from_pretrained(path)  # doctest: +SKIP
    >>> proc = GrammarLogitsProcessor({"type": "object", "properties": {"n": {"type": "integer"}}}, tok)  # doctest: +SKIP
    >>> out = model.generate(**tok(["Give n as JSON: "], return_tensors="pt"), logits_processor=[proc],
    ...                      eos_token_id=proc.eos_token_id, max_new_tokens=32)     # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConstrainedError
from ..grammar.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from ..vocab import Vocabulary
from .constraint import SequenceConstraint, grammar_from_spec

__all__ = ["GrammarLogitsProcessor"]

try:  # transformers is optional: the class is a plain callable without it
    from transformers import LogitsProcessor as _Base
except ImportError:  # pragma: no cover - depends on the environment
    _Base = object


def _eos_ids(tokenizer: Any, model_eos: Any) -> list[int]:
    ids = model_eos if model_eos is not None else getattr(tokenizer, "eos_token_id", None)
    if ids is None:
        return []
    return [int(ids)] if isinstance(ids, int) else [int(i) for i in ids]


class GrammarLogitsProcessor(_Base):  # type: ignore[misc, valid-type]
    """Constrain ``generate`` to a GBNF grammar or a JSON schema, with llama.cpp's grammar semantics.

    Args:
        grammar: a :class:`~constrained.grammar.Grammar`, GBNF text, a JSON schema (dict or JSON text), or a list
            of those, one per batch row.
        tokenizer_or_vocab: the model's transformers (fast) tokenizer, or a :class:`Vocabulary`.
        eos_token_id: the token id(s) ``generate`` stops on (default: the tokenizer's eos); they are added to the
            end-of-generation set, and are the tokens allowed after the grammar ended.
        enforce: passed to the JSON-schema conversion (``"llama.cpp"`` or ``"all"``).
    """

    supports_continuous_batching = False

    def __init__(self, grammar: Any, tokenizer_or_vocab: Any, *, eos_token_id: int | Sequence[int] | None = None,
                 enforce: str = "llama.cpp") -> None:
        if isinstance(tokenizer_or_vocab, Vocabulary):
            stop = _eos_ids(None, eos_token_id)
            self.vocab = tokenizer_or_vocab
        else:
            stop = _eos_ids(tokenizer_or_vocab, eos_token_id)
            self.vocab = Vocabulary.from_hf(tokenizer_or_vocab, eog_ids=stop)
        specs = grammar if isinstance(grammar, list) else None
        self._grammars = [grammar_from_spec(g, enforce=enforce) for g in specs] if specs is not None else \
            [grammar_from_spec(grammar, enforce=enforce)]
        self._stop = stop
        self.rows: list[SequenceConstraint] = []
        self._prompt_len = -1
        self._bitmask: Any = None

    @property
    def eos_token_id(self) -> list[int]:
        """Every token id that ends generation (llama.cpp's end-of-generation set plus ``generate``'s own)."""
        return sorted(set(self.vocab.eog_ids) | set(self._stop))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        batch = int(scores.shape[0])
        if self._prompt_len < 0:
            if len(self._grammars) not in (1, batch):
                raise ConstrainedError(f"{len(self._grammars)} grammars for a batch of {batch} rows")
            grammars = self._grammars * batch if len(self._grammars) == 1 else self._grammars
            self.rows = [SequenceConstraint(g, self.vocab, stop_ids=self._stop) for g in grammars]
            self._prompt_len = int(input_ids.shape[1])
        elif batch != len(self.rows):
            raise ConstrainedError(f"batch changed from {len(self.rows)} to {batch} rows (one processor per "
                                   "generate call; beam search is not supported)")
        else:
            ids = input_ids[:, self._prompt_len:].tolist()
            for row, gen in zip(self.rows, ids, strict=True):
                row.sync(gen)
        width = int(scores.shape[-1])
        if self._bitmask is None or tuple(self._bitmask.shape) != (batch, (width + 31) // 32):
            self._bitmask = allocate_token_bitmask(batch, width, torch=True)
        for i, row in enumerate(self.rows):
            row.fill_bitmask(self._bitmask, i, width)
        if scores.device.type != "cpu":
            apply_token_bitmask_inplace(scores, self._bitmask.to(scores.device))
        else:
            apply_token_bitmask_inplace(scores, self._bitmask)
        return scores
