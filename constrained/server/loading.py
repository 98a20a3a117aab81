"""The model and its context loaded on a thread (with llama-server's warm-up run on ``--warmup``) while the server's
Python code is imported: ``constrained serve`` starts this before it imports the app, and the engine takes the result.

The C calls (``llama_model_load_from_file``, ``llama_init_from_model``, ``llama_decode``) run without the GIL, so
the imports and the load overlap. The warm-up is ``common_init_from_params``' (common/common.cpp): one decode of
``[bos, eos]`` (those the model has; ``[0]`` when it has neither), the memory cleared, the context synchronised; it
pages the weights in and sizes the compute buffers before the first request (``--warmup``; off by default here, unlike llama-server: it changes no output, and measured on CPU with the
model file in the page cache the first request gains nothing from it while the start pays ~0.2-0.4 s).

Example:
    >>> load = ModelLoad("model.gguf").start()                # doctest: +SKIP
    >>> load.configure(EngineConfig(model_path="model.gguf"))   # doctest: +SKIP
    >>> model, ctx = load.result()                              # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llama_cpp import llama_cpp as L

from sampler import Params

from ..errors import ConstrainedError

__all__ = ["EngineConfig", "ModelLoad", "VocabLoad", "context_params", "resolved_parallel", "warm_up"]


@dataclass
class EngineConfig:
    """The model and context settings (llama-server's flags, already parsed)."""

    model_path: str
    n_ctx: int = 0                 # 0: the model's training context
    n_parallel: int = -1           # -1: auto = 4 slots with a unified KV cache
    n_batch: int = 2048
    n_ubatch: int = 512
    flash_attn: str = "auto"       # on | off | auto
    swa_full: bool = False
    ctx_checkpoints: int = 32
    n_threads: int = -1
    n_threads_batch: int = -1
    kv_unified: bool | None = None
    n_predict: int = -1
    antiprompt: list[str] = field(default_factory=list)
    sampling: Params = field(default_factory=Params)
    slot_prompt_similarity: float = 0.1
    cache_prompt: bool = True
    checkpoint_min_step: int = 8192
    cache_ram_mib: int = 8192      # --cache-ram: the host-memory prompt cache (0: off, < 0: no size limit)
    cache_idle_slots: bool = True  # --cache-idle-slots: idle slots saved to it (and cleared if unified) per task
    warmup: bool = False           # --warmup: llama-server's empty run before serving (off by default here)
    ctx_shift: bool = False        # --context-shift: a full slot drops half of what follows n_keep (pre_decode)
    n_keep: int = 0                # --keep: the default n_keep of a request
    sleep_idle_seconds: int = -1   # --sleep-idle-seconds: idle this long (no task), the context is freed
    debug: bool = False            # -v: llama-server's debug log lines that its own tests read (the test tags)
    embedding: bool = False        # --embedding / --rerank: the context outputs embeddings (the embedding routes)
    pooling: int = -1              # --pooling: LLAMA_POOLING_TYPE_* (-1: the model's own)
    embd_normalize: int = 2        # --embd-normalize: a request's default normalisation


def resolved_parallel(n_parallel: int, kv_unified: bool | None) -> tuple[int, bool]:
    """Slots and unified KV for ``-np`` (``-1``, auto: 4 slots with a unified KV cache, server.cpp:156-161).

    Example:
        >>> resolved_parallel(-1, None), resolved_parallel(2, None)
        ((4, True), (2, False))
    """
    if n_parallel < 0:
        return 4, True if kv_unified is None else bool(kv_unified)
    return n_parallel, bool(kv_unified)


def context_params(cfg: EngineConfig, model: Any) -> Any:
    """``llama_context_params`` for an :class:`~constrained.server.engine.EngineConfig` (as llama-server sets them)."""
    n_par, unified = resolved_parallel(cfg.n_parallel, cfg.kv_unified)
    cp = L.llama_context_default_params()
    cp.n_ctx = cfg.n_ctx if cfg.n_ctx > 0 else int(L.llama_model_n_ctx_train(model))
    cp.n_batch = cfg.n_batch
    cp.n_ubatch = min(cfg.n_ubatch, cfg.n_batch)
    cp.n_seq_max = n_par
    nt = cfg.n_threads if cfg.n_threads > 0 else max(1, min(4, os.cpu_count() or 1))
    ntb = cfg.n_threads_batch if cfg.n_threads_batch > 0 else nt
    cp.n_threads = nt
    cp.n_threads_batch = ntb
    cp.flash_attn_type = {"on": 1, "off": 0, "auto": -1}.get(cfg.flash_attn, -1)
    cp.swa_full = cfg.swa_full            # as llama-server: the cache layout changes the logits
    cp.kv_unified = unified
    cp.no_perf = True
    cp.embeddings = cfg.embedding
    cp.pooling_type = cfg.pooling
    if cfg.embedding or cfg.pooling not in (-1, 0):     # server_output_limits: every token of a batch may output
        cp.n_outputs_max, cp.n_outputs_max_per_seq = cfg.n_batch, 1
    return cp


def warm_up(model: Any, ctx: Any, n_batch: int) -> None:
    """llama-server's warm-up run (``common_init_from_params``, decoder-only models): ``[bos, eos]`` decoded once,
    then the memory cleared and the context synchronised. Nothing of it stays in the KV cache."""
    vocab = L.llama_model_get_vocab(model)
    toks = [t for t in (int(L.llama_vocab_bos(vocab)), int(L.llama_vocab_eos(vocab))) if t != L.LLAMA_TOKEN_NULL]
    toks = (toks or [0])[:max(1, n_batch)]
    if not L.llama_model_has_decoder(model):
        return                            # encoder-only models are not served here
    arr = (L.llama_token * len(toks))(*toks)
    L.llama_decode(ctx, L.llama_batch_get_one(arr, len(toks)))
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    L.llama_synchronize(ctx)


class ModelLoad:
    """Loads the model, then its context, then runs the warm-up, on a daemon thread (:meth:`start`);
    :meth:`result` waits and gives ``(model, ctx)`` or raises the load's :class:`ConstrainedError`.

    The context settings may come later than the start (:meth:`configure`): ``constrained serve`` starts the load
    as soon as it knows the model's path and reads the rest of its settings meanwhile. ``on_model(model)`` is
    called on the thread right after the model is loaded (the server starts its vocabulary reader there)."""

    def __init__(self, model_path: str, say: Callable[[str], None] | None = None,
                 on_model: Callable[[Any], None] | None = None, cfg: EngineConfig | None = None) -> None:
        self.model_path = model_path
        self.say = say or (lambda s: None)
        self.on_model = on_model
        self.cfg = cfg
        self.model: Any = None
        self.ctx: Any = None
        self.error: BaseException | None = None
        self._configured = threading.Event()
        if cfg is not None:
            self._configured.set()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ModelLoad:
        if not os.path.isfile(self.model_path):
            raise ConstrainedError(f"model file not found: {self.model_path}")
        self._thread = threading.Thread(target=self._run, daemon=True, name="constrained-load")
        self._thread.start()
        return self

    def configure(self, cfg: EngineConfig) -> None:
        """The context settings (``cfg.model_path`` must be the path the load started with)."""
        if cfg.model_path != self.model_path:
            raise ValueError(f"the load started with {self.model_path}, not {cfg.model_path}")
        self.cfg = cfg
        self._configured.set()

    def run(self) -> tuple[Any, Any]:
        """The same work on the calling thread (the settings given to the constructor)."""
        if not os.path.isfile(self.model_path):
            raise ConstrainedError(f"model file not found: {self.model_path}")
        self._run()
        return self.result()

    def _run(self) -> None:
        try:
            from ..llama.model import silence_llama_log

            silence_llama_log()
            self.say(f"loading model {self.model_path} ...")
            mp = L.llama_model_default_params()
            mp.n_gpu_layers = 0
            model = L.llama_model_load_from_file(self.model_path.encode(), mp)
            if not model:
                raise ConstrainedError(f"llama.cpp could not load the model {self.model_path}")
            self.model = model
            if self.on_model is not None:
                self.on_model(model)
            self._configured.wait()
            cfg = self.cfg
            assert cfg is not None
            ctx = L.llama_init_from_model(model, context_params(cfg, model))
            if not ctx:
                raise ConstrainedError("llama.cpp could not create the context")
            if cfg.warmup:
                warm_up(model, ctx, cfg.n_batch)
            self.ctx = ctx
        except BaseException as err:  # noqa: BLE001 - raised again by result() on the caller's thread
            self.error = err
        finally:
            self._done.set()

    def result(self) -> tuple[Any, Any]:
        self._done.wait()
        if self.error is not None:
            if isinstance(self.error, ConstrainedError):
                raise self.error
            raise ConstrainedError(f"loading the model failed: {self.error}") from self.error
        return self.model, self.ctx


class VocabLoad:
    """The vocabulary tables (``Vocabulary.from_llama``) and the grammar engine's token index, read on a daemon
    thread as soon as the model is loaded, then a warm-up of the converter, the GBNF reader and the mask kernels
    (one generic object schema's first masks); :meth:`vocabulary` waits for the tables only.

    The server answers meanwhile; the first request that needs the vocabulary waits for what is left."""

    def __init__(self, model_path: str) -> None:
        self.model_path = model_path
        self.vocab: Any = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, model: Any) -> VocabLoad:
        self._thread = threading.Thread(target=self._run, args=(model,), daemon=True, name="constrained-vocab")
        self._thread.start()
        return self

    @property
    def started(self) -> bool:
        return self._thread is not None

    def _run(self, model: Any) -> None:
        try:
            from ..vocab import Vocabulary

            self.vocab = Vocabulary.from_llama(_ModelHolder(L.llama_model_get_vocab(model), self.model_path))
        except BaseException as err:  # noqa: BLE001 - raised again by the first request that needs it
            self.error = err
        finally:
            self._ready.set()
        if self.vocab is None:
            return
        from ..grammar.tokenindex import vocab_index

        vocab_index(self.vocab)     # under its lock: a grammar compiled meanwhile waits instead of building twice
        try:                        # first use of the converter, the GBNF parser and the mask kernels
            from ..grammar import Grammar

            m = Grammar.from_json_schema({"type": "object"}).matcher(self.vocab)
            m.mask()
            m.accept_token(int(m.mask().argmax()))
            m.mask()
        except Exception:  # noqa: BLE001, S110 - a warm-up only; the request that needs it reports errors
            pass
        import gc

        gc.freeze()                 # as freeze_loaded_heap: the tables join the collector's permanent generation

    def vocabulary(self) -> Any:
        """The :class:`~constrained.vocab.Vocabulary` (waits for the reader the first time)."""
        self._ready.wait()
        if self.error is not None:
            raise ConstrainedError(f"reading the vocabulary failed: {self.error}") from self.error
        return self.vocab


class _ModelHolder:
    """What :meth:`Vocabulary.from_llama` reads: ``_model.vocab`` and ``model_path``."""

    def __init__(self, vocab_ptr: Any, path: str) -> None:
        class _M:
            vocab = vocab_ptr
        self._model = _M()
        self.model_path = path
