"""One sequence under a grammar, driven by an engine's token history: the core the integrations share.

Engines that call a logits hook (transformers' ``LogitsProcessor``, llama-cpp-python's ``logits_processor``, vLLM's
logits processors) hand over the tokens generated so far, not a stream of accept calls. :class:`SequenceConstraint`
keeps a :class:`~constrained.grammar.matcher.GrammarMatcher` in step with that history (accepting the new tokens
since the last call, rolling back when the history shrinks or changes) and writes the next-token mask as a packed
bitmask row. :func:`grammar_from_spec` turns what users pass (GBNF text, a JSON schema, a bundled grammar name, a
:class:`~constrained.grammar.Grammar`) into a grammar, JSON schemas converted as llama-server converts them.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> v = Vocabulary([b"a", b"b", b"</s>"], eog_ids=[2])
    >>> c = SequenceConstraint(grammar_from_spec('root ::= "a" "b"'), v)
    >>> c.sync([0]); c.allowed_ids()
    [1]
    >>> c.sync([0, 1]); c.allowed_ids(), c.can_end
    ([2], True)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import ConstrainedError, GrammarRejectedToken
from ..grammar import Grammar
from ..grammar.bitmask import fill_next_token_bitmask, pack_mask
from ..vocab import Vocabulary

__all__ = ["GrammarRejectedToken", "SequenceConstraint", "grammar_from_spec"]


def grammar_from_spec(spec: Any = None, *, gbnf: str | bytes | None = None, json_schema: Any = None,
                      name: str | None = None, regex: str | None = None, choice: Sequence[str] | None = None,
                      structural_tag: Any = None, enforce: str = "llama.cpp") -> Grammar:
    """A :class:`Grammar` from GBNF text, a JSON schema (dict, or its JSON text), a bundled grammar's name, a
    whole-text regex (:meth:`Grammar.from_regex`), a list of choices (:meth:`Grammar.from_choice`) or a structural
    tag (:meth:`Grammar.from_structural_tag`, a dict or its JSON text).

    ``spec`` alone is guessed: a ``Grammar`` is returned as is, a dict is a JSON schema, text containing ``::=`` is
    GBNF, other text is parsed as a JSON schema. ``enforce`` is passed to :meth:`Grammar.from_json_schema`.

    Raises:
        GrammarSyntaxError: bad GBNF (llama.cpp's message with line, column and caret).
        SchemaError: a JSON schema that cannot be converted.

    Example:
        >>> grammar_from_spec({"type": "boolean"}).to_gbnf().splitlines()[:2]
        ['root ::= root-1', 'root-1 ::= "true" | "false"']
    """
    import json

    given = [x is not None for x in (spec, gbnf, json_schema, name, regex, choice, structural_tag)]
    if sum(given) != 1:
        raise ConstrainedError("give exactly one of a grammar spec, gbnf=, json_schema=, name=, regex=, choice= "
                               "or structural_tag=")
    if regex is not None:
        return Grammar.from_regex(regex)
    if choice is not None:
        if isinstance(choice, (str, bytes)):
            choice = json.loads(choice)
        return Grammar.from_choice(list(choice) if isinstance(choice, (list, tuple)) else choice)
    if structural_tag is not None:
        return Grammar.from_structural_tag(structural_tag, enforce=enforce)
    if name is not None:
        return Grammar.from_name(name)
    if gbnf is not None:
        return Grammar.from_gbnf(gbnf)
    if json_schema is not None:
        schema = json.loads(json_schema) if isinstance(json_schema, (str, bytes)) else json_schema
        return Grammar.from_json_schema(schema, enforce=enforce)
    if isinstance(spec, Grammar):
        return spec
    if isinstance(spec, (str, bytes)):
        text = spec.decode("utf-8", "surrogateescape") if isinstance(spec, bytes) else spec
        if "::=" in text:
            return Grammar.from_gbnf(spec)
        try:
            schema = json.loads(text)
        except ValueError as err:
            raise ConstrainedError("text with no '::=' rule and not JSON: neither a GBNF grammar nor a JSON "
                                   "schema") from err
        return Grammar.from_json_schema(schema, enforce=enforce)
    if isinstance(spec, (dict, bool)):
        return Grammar.from_json_schema(spec, enforce=enforce)
    raise ConstrainedError(f"cannot make a grammar from {type(spec).__name__}")


class SequenceConstraint:
    """A grammar matcher kept in step with one sequence's generated tokens.

    Args:
        grammar: the grammar (see :func:`grammar_from_spec` for building one).
        vocab: the model's vocabulary as llama.cpp sees it (:meth:`Vocabulary.from_gguf`, ``from_hf``...).
        stop_ids: token ids the engine stops on. When the grammar ends on an end-of-generation token the engine
            does not stop on, only these are allowed afterwards, so the engine stops next. Empty = no such rule.
        only_stop_ids: where the grammar can end, allow ``stop_ids`` and no other end-of-generation token (the
            engine's own end instead of llama.cpp's set; vLLM's backends do so), so no end token is ever forced.
    """

    def __init__(self, grammar: Grammar, vocab: Vocabulary, *, stop_ids: Iterable[int] = (),
                 only_stop_ids: bool = False) -> None:
        self.grammar = grammar
        self.vocab = vocab
        self.matcher = grammar.matcher(vocab)          # a lazy grammar (structural tags) gives a lazy matcher
        self.compiled = self.matcher.compiled
        self.stop_ids = sorted({int(t) for t in stop_ids})
        self._eog_fix: tuple[np.ndarray, np.ndarray] | None = None
        if only_stop_ids and self.stop_ids:
            n = len(vocab)
            stops = np.array([t for t in self.stop_ids if 0 <= t < n], dtype=np.int64)
            other = np.array(sorted(set(int(t) for t in vocab.eog_ids) - set(stops.tolist())), dtype=np.int64)
            self._eog_fix = (other, stops)
        self._seen: list[int] = []          # the history the matcher has consumed (up to termination)
        self._after_end = 0                 # tokens the engine produced after the grammar ended

    @property
    def can_end(self) -> bool:
        """Whether the grammar may end here (end-of-generation tokens are allowed)."""
        return self.matcher.can_end()

    @property
    def is_terminated(self) -> bool:
        """Whether an end-of-generation token was accepted."""
        return self.matcher.is_terminated()

    def sync(self, generated: Sequence[int]) -> None:
        """Make the matcher's history equal to ``generated`` (the tokens produced so far, prompt excluded).

        New tokens are accepted; a history that shrank or changed is rolled back to the common prefix first.
        Tokens after the grammar terminated are ignored (engines pad finished rows).

        Raises:
            GrammarRejectedToken: a token the grammar does not allow at its position.
        """
        gen = [int(t) for t in generated]
        seen = self._seen
        common = 0
        limit = min(len(seen), len(gen))
        while common < limit and seen[common] == gen[common]:
            common += 1
        if common < len(seen):
            self.matcher.rollback(len(seen) - common)
            del seen[common:]
        for k in range(common, len(gen)):
            if self.matcher.is_terminated():
                self._after_end = len(gen) - k
                return
            t = gen[k]
            if not 0 <= t < len(self.vocab) or not self.matcher.accept_token(t):
                piece = self.vocab.pieces[t] if 0 <= t < len(self.vocab) else b"?"
                raise GrammarRejectedToken(f"token {t} ({piece!r}) at position {k} is not allowed by the grammar")
            seen.append(t)
        self._after_end = 0

    def allowed_ids(self) -> list[int]:
        """The token ids allowed next."""
        return np.flatnonzero(self._mask()).tolist()

    def _mask(self) -> np.ndarray:
        if self.matcher.is_terminated() and self.stop_ids:
            m = np.zeros(len(self.vocab), dtype=bool)
            m[[t for t in self.stop_ids if t < len(self.vocab)]] = True
            return m
        m = self.matcher.mask()
        if self._eog_fix is not None:
            other, stops = self._eog_fix
            end = self.matcher.can_end()
            if (len(other) and m[other].any()) or (end and not m[stops].all()):
                m = m.copy()
                m[other] = False
                if end:
                    m[stops] = True
        return m

    def fill_bitmask(self, bitmask: Any, index: int, vocab_size: int) -> None:
        """Write the next-token mask into row ``index`` of a packed bitmask for logits width ``vocab_size``."""
        if (self.matcher.is_terminated() and self.stop_ids) or (self._eog_fix is not None and self.can_end):
            row = pack_mask(self._mask(), vocab_size)
            if isinstance(bitmask, np.ndarray):
                bitmask[index] = row
            else:
                import torch

                bitmask[index].copy_(torch.from_numpy(row))
            return
        fill_next_token_bitmask(self.matcher, bitmask, index, vocab_size=vocab_size)

    def mask_logits(self, logits: Any) -> Any:
        """Set the disallowed entries of a 1-D logits row (numpy or torch; width >= vocabulary) to -inf."""
        m = self._mask()
        n = len(m)
        if isinstance(logits, np.ndarray):
            logits[:n][~m] = -np.inf
            logits[n:] = -np.inf
            return logits
        import torch

        keep = torch.from_numpy(np.ascontiguousarray(m)).to(logits.device)
        logits[:n].masked_fill_(~keep, float("-inf"))
        logits[n:] = float("-inf")
        return logits
