"""Constrained generation on llama-cpp-python, as llama-server's ``/completion`` does it for one request.

``llama_cpp.Llama`` is used for its forward pass and logits only: the sampling (llama-server's chain, with the
grammar's rejection and redraw) is :class:`sampler.Sampler`, and the grammar is :class:`constrained.Grammar`'s
matcher, both exact ports of llama.cpp. With the same seed the tokens, and the positions of the redraws, are those
llama-server would produce from the same logits.

Example:
    >>> from constrained.llama import generate, load_default_model  # doctest: +SKIP
    >>> llm = load_default_model()                                  # doctest: +SKIP
    >>> r = generate(llm, "Name a colour as JSON: ", schema={"type": "object",
    ...              "properties": {"colour": {"type": "string"}}, "required": ["colour"]},
    ...              params=Params(seed=7))                            # doctest: +SKIP
    >>> r.json, r.valid                                              # doctest: +SKIP
    ({'colour': 'blue'}, True)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sampler import Params, Sampler, token_probs

from ..errors import ConstrainedError, GenerationError
from ..grammar import Grammar
from ..json_schema.validation import ValidationIssue, validate

if TYPE_CHECKING:
    import llama_cpp

from .model import decode, eval_prompt, last_logits, output_piece, slot_of, tokenize_prompt, vocabulary_of

__all__ = ["DEFAULT_N_PREDICT", "Generation", "TokenEvent", "TokenProb", "generate", "generate_stream", "resolve_grammar"]

DEFAULT_N_PREDICT = 256


@dataclass(frozen=True)
class TokenProb:
    """One entry of llama-server's ``probs`` (``n_probs``): a token, its piece and probability."""

    token: int
    piece: bytes
    prob: float


@dataclass(frozen=True)
class TokenEvent:
    """One generated token, as the streaming API yields it."""

    index: int
    token: int
    piece: bytes
    redrawn: bool
    probs: tuple[TokenProb, ...] = ()
    #: the probability of the sampled token (only with ``n_probs > 0``)
    prob: float | None = None


@dataclass
class Generation:
    """The result of :func:`generate`.

    Attributes:
        text: the generated text (special tokens rendered as llama-server renders them, stop string cut off).
        tokens: every generated token id, end-of-generation included when one was drawn.
        redrawn: per token, whether the grammar rejected the first draw and the token was drawn again.
        stop_reason: ``"eos"`` (end-of-generation token), ``"grammar"`` (the grammar cannot continue),
            ``"limit"`` (``n_predict``), ``"word"`` (a stop string; see ``stopping_word``).
        prompt_tokens: the prompt as token ids.
        timings: seconds spent in the prompt, in the forward steps, and in our sampling + grammar work.
        probs: per token, llama-server's ``probs`` entries when ``n_probs > 0``.
        schema_issues: when a JSON schema was given, what ``jsonschema`` reports about the text (empty = valid).
    """

    text: str
    tokens: list[int]
    redrawn: list[bool]
    stop_reason: str
    prompt_tokens: list[int]
    timings: dict[str, float]
    probs: list[tuple[TokenProb, ...]] = field(default_factory=list)
    stopping_word: str = ""
    #: prompt tokens reused from the previous request's cache (llama-server's ``tokens_cached``)
    n_cached: int = 0
    schema: Any = None
    schema_issues: list[ValidationIssue] = field(default_factory=list)

    @property
    def n_redraws(self) -> int:
        return sum(self.redrawn)

    @property
    def valid(self) -> bool | None:
        """True/False when a schema was given (the text validates or not), else None."""
        return None if self.schema is None else not self.schema_issues

    @property
    def json(self) -> Any:
        """The text parsed as JSON (raises ``json.JSONDecodeError`` if it is not JSON)."""
        return json.loads(self.text)


def resolve_grammar(grammar: Grammar | str | None, schema: Any, json_mode: bool) -> Grammar | None:
    given = sum(x is not None and x is not False for x in (grammar, schema, json_mode or None))
    if given > 1:
        raise ValueError("give at most one of grammar, schema and json_mode")
    if isinstance(grammar, str):
        return Grammar.from_gbnf(grammar)
    if grammar is not None:
        return grammar
    from ..json_schema import JSON_OBJECT_SCHEMA, server_json_schema

    if schema is not None:
        return Grammar.from_json_schema(server_json_schema(schema))   # {} means any object, as in llama-server
    if json_mode:
        return Grammar.from_json_schema(JSON_OBJECT_SCHEMA)
    return None

def _stops(stop: str | Sequence[str] | None) -> list[bytes]:
    if stop is None:
        return []
    if isinstance(stop, (str, bytes)):
        stop = [stop]                                   # one stop string, not one per character
    out = []
    for s in stop:
        if not isinstance(s, (str, bytes)):
            raise ValueError(f"stop strings must be strings, got {s!r}")
        if s:
            out.append(s.encode() if isinstance(s, str) else bytes(s))
    return out


def _finish(res: Generation, text: bytearray, schema: Any) -> None:
    res.text = text.decode("utf-8", "replace")
    if schema is not None:
        try:
            res.schema_issues = validate(res.text, schema)
        except Exception as err:  # noqa: BLE001 - the generation is kept whatever the validator does
            res.schema_issues = [ValidationIssue("$", f"the schema could not be checked: {err}")]


def generate_stream(llm: llama_cpp.Llama, prompt: str | bytes | Sequence[int], *,
                    grammar: Grammar | str | None = None, schema: Any = None, json_mode: bool = False,
                    params: Params | None = None, n_predict: int = DEFAULT_N_PREDICT,
                    stop: str | Sequence[str] | None = (), cache_prompt: bool | None = None,
                    result: Generation | None = None) -> Iterator[TokenEvent]:
    """Generate token by token, yielding a :class:`TokenEvent` per token; see :func:`generate`.

    If ``result`` is given, it is filled in as generation proceeds (text, stop reason, timings).
    """
    params = params or Params()
    slot = slot_of(llm)
    g = resolve_grammar(grammar, schema, json_mode)
    stops = _stops(stop)
    if isinstance(n_predict, bool) or not isinstance(n_predict, (int, np.integer)):
        raise ValueError(f"n_predict must be an integer, got {n_predict!r}")
    n_predict = int(n_predict)
    if not -1 <= n_predict <= 2147483647:               # as llama-server's request schema refuses it
        raise ValueError(f"Field 'n_predict': Value must be between -1 <= value <= 2147483647, but got {n_predict}")
    cache_prompt = slot.args.cache_prompt if cache_prompt is None else bool(cache_prompt)
    vocab = vocabulary_of(llm)
    n_vocab = len(vocab)
    res = result if result is not None else Generation("", [], [], "", [], {})
    res.schema = schema
    t0 = time.perf_counter()
    prompt_toks = tokenize_prompt(llm, prompt, slot.n_ctx)
    res.prompt_tokens = prompt_toks
    matcher = g.matcher(vocab) if g is not None else None
    smpl = Sampler(params, vocab)
    smpl.reset()                              # init_sampler(): common_sampler_reset, then every prompt token
    for t in prompt_toks:
        smpl.accept(t)
    res.n_cached = eval_prompt(llm, slot, prompt_toks, cache_prompt)
    t_prompt = time.perf_counter() - t0
    t_sample = 0.0
    t_forward = 0.0
    text = bytearray()
    longest_stop = max((len(s) for s in stops), default=0)
    n_probs = int(getattr(params, "n_probs", 0) or 0)
    res.stop_reason = "limit"
    i = 0
    try:
        while True:
            ts = time.perf_counter()
            logits = last_logits(llm, n_vocab)
            if matcher is not None:
                tok, redrawn = smpl.sample_constrained(logits, matcher.allows, matcher.mask)
            else:
                tok, redrawn = smpl.sample(logits), False
            probs: tuple[TokenProb, ...] = ()
            prob = None
            if n_probs > 0:
                raw = token_probs(logits, tok, n_probs)   # llama-server's get_token_probabilities, raw logits
                prob = float(raw.prob)
                probs = tuple(TokenProb(int(t), vocab.pieces[int(t)], float(p))
                              for t, p in zip(raw.ids, raw.probs, strict=True))
            if matcher is not None and not matcher.accept_token(tok):
                why = getattr(matcher, "dead_end", lambda: None)()   # a grammar that can never match says why
                raise ConstrainedError(why or f"internal error: the grammar rejected the sampled token {tok}")
            smpl.accept(tok)
            t_sample += time.perf_counter() - ts
            res.tokens.append(tok)
            res.redrawn.append(redrawn)
            res.probs.append(probs)
            piece = b"" if vocab.is_eog(tok) else output_piece(vocab, tok)
            yield TokenEvent(i, tok, piece, redrawn, probs, prob)
            i += 1
            if vocab.is_eog(tok):
                res.stop_reason = "eos"
                break
            text += piece
            if stops:   # a stop string can only end inside the new piece: search the tail, take the earliest match
                start = max(0, len(text) - len(piece) - longest_stop + 1)
                hits = [(pos, s) for s in stops if (pos := text.find(s, start)) >= 0]
                if hits:
                    pos, word = min(hits)
                    del text[pos:]
                    res.stop_reason = "word"
                    res.stopping_word = word.decode("utf-8", "replace")
                    break
            if matcher is not None and all(not s for s in matcher.stacks):
                res.stop_reason = "grammar"   # only an end-of-generation token could follow: the text is complete
                break
            if len(slot.tokens) + 1 >= slot.n_ctx:    # no context shift: the slot is full (process_token)
                res.stop_reason = "limit"
                break
            if n_predict != -1 and n_predict - i <= 0:   # has_budget(), checked after a token: 0 still gives one
                res.stop_reason = "limit"
                break
            tf = time.perf_counter()
            decode(llm, slot, [tok])
            t_forward += time.perf_counter() - tf
    except ConstrainedError as err:
        res.stop_reason = "error"
        _finish(res, text, schema)
        raise GenerationError(str(err), res) from err
    finally:
        res.timings = {"prompt_s": t_prompt, "forward_s": t_forward, "sampling_s": t_sample,
                       "n_tokens": float(len(res.tokens))}
    _finish(res, text, schema)


def generate(llm: llama_cpp.Llama, prompt: str | bytes | Sequence[int], *, grammar: Grammar | str | None = None,
             schema: Any = None, json_mode: bool = False, params: Params | None = None,
             n_predict: int = DEFAULT_N_PREDICT, stop: str | Sequence[str] | None = (),
             cache_prompt: bool | None = None) -> Generation:
    """Generate from ``prompt`` as llama-server's ``/completion`` would for one request on its slot.

    Args:
        llm: a model from :func:`load_model` (its context is the one llama-server creates).
        prompt: text (``str`` or UTF-8 ``bytes``; tokenized as llama-server does: special tokens parsed, BOS added
            when the model adds it) or a list of token ids (used as given).
        grammar: a :class:`Grammar` or GBNF text.
        schema: a JSON schema (dict, JSON text or pydantic model): converted as llama-server converts it, and the
            result validated with ``jsonschema``.
        json_mode: constrain to a JSON object (``response_format: {"type": "json_object"}``).
        params: llama-server's sampling parameters (:class:`sampler.Params`); its default seed means random.
        n_predict: the most tokens to generate; -1: no limit but the context (llama-server's default). As in
            llama-server, 0 still gives one token and values below -1 are refused.
        stop: a stop string or a list of them (the text is cut before the first one found).
        cache_prompt: reuse the cached prefix of the previous request as llama-server does (default: the
            ``--cache-prompt`` setting the model was loaded with, on unless ``--no-cache-prompt``).

    Returns:
        a :class:`Generation`.

    Raises:
        ValueError: bad arguments (an empty prompt, token ids out of range or not integers, several constraints).
        GrammarSyntaxError / SchemaError: a grammar or schema that cannot be used.
        GenerationError: generation failed midway; its ``generation`` holds the tokens and text produced.
    """
    res = Generation("", [], [], "", [], {})
    for _ in generate_stream(llm, prompt, grammar=grammar, schema=schema, json_mode=json_mode, params=params,
                             n_predict=n_predict, stop=stop, cache_prompt=cache_prompt, result=res):
        pass
    return res
