"""The model worker: one thread owns the llama.cpp context and runs llama-server's slots in one batch.

``--parallel N`` slots share one ``llama_context`` (``n_seq_max = N``; slot i is KV sequence i). Each iteration
builds one ``llama_batch`` as llama-server's ``update_slots`` does (the last sampled token of every generating slot,
then pending prompt tokens up to ``n_batch``), decodes it once, and samples every slot from its own logits row with
its own :class:`sampler.Sampler` and grammar matcher (``sample_constrained`` = ``common_sampler_sample``). Queued
requests wait for a free slot; a cancelled task (a client that went away) frees its slot at the next iteration.

Slot choice, prompt reuse, prompt splitting and the sliding-window checkpoints (saved and restored with
``llama_state_seq_*_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)``) follow llama-server (:mod:`constrained.llama.slot`),
with the same KV cache layout (``swa_full`` as given), so requests served one at a time get the real
llama-server's tokens for the same flags.

This module holds the model, the context and the loop; the jobs of one iteration are apart: :mod:`.scheduler`
(which slot a task gets, the prompt cache, launch and release), :mod:`.batch` (the batch built and decoded),
:mod:`.sampling` (each slot's token drawn, stops and limits, the final result), :mod:`.slots` (the task, result
and slot data).

Example:
    >>> eng = Engine(EngineConfig(model_path="model.gguf"))     # doctest: +SKIP
    >>> eng.start()                                             # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llama_cpp import llama_cpp as L

from sampler import Params

from ..errors import ConstrainedError
from ..vocab import Vocabulary
from ..vocab.tokenizer import c_tokenize
from .batch import BatchStep
from .errors import HttpError
from .prompt_cache import PromptCache
from .sampling import SlotSampling
from .scheduler import SlotScheduler
from .slots import Slot, Task

__all__ = ["Engine", "EngineConfig"]


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


class Engine(SlotScheduler, BatchStep, SlotSampling):
    """The model, its context and the slots; :meth:`submit` queues a task (with its ``n`` children)."""

    def __init__(self, cfg: EngineConfig, progress: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        say = progress or (lambda s: None)
        if not os.path.isfile(cfg.model_path):
            raise ConstrainedError(f"model file not found: {cfg.model_path}")
        from ..llama.model import silence_llama_log

        silence_llama_log()
        say(f"loading model {cfg.model_path} ...")
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(cfg.model_path.encode(), mp)
        if not self.model:
            raise ConstrainedError(f"llama.cpp could not load the model {cfg.model_path}")
        self.vocab_ptr = L.llama_model_get_vocab(self.model)
        n_par = cfg.n_parallel
        unified = cfg.kv_unified
        if n_par < 0:                         # -np auto: 4 slots, unified KV (server.cpp:156-161)
            n_par = 4
            unified = True if unified is None else unified
        self.n_parallel = n_par
        self.kv_unified = bool(unified)
        cp = L.llama_context_default_params()
        self.n_ctx_train = int(L.llama_model_n_ctx_train(self.model))
        cp.n_ctx = cfg.n_ctx if cfg.n_ctx > 0 else self.n_ctx_train
        cp.n_batch = cfg.n_batch
        cp.n_ubatch = min(cfg.n_ubatch, cfg.n_batch)
        cp.n_seq_max = n_par
        nt = cfg.n_threads if cfg.n_threads > 0 else max(1, min(4, os.cpu_count() or 1))
        ntb = cfg.n_threads_batch if cfg.n_threads_batch > 0 else nt
        cp.n_threads = nt
        cp.n_threads_batch = ntb
        cp.flash_attn_type = {"on": 1, "off": 0, "auto": -1}.get(cfg.flash_attn, -1)
        cp.swa_full = cfg.swa_full            # as llama-server: the cache layout changes the logits
        cp.kv_unified = self.kv_unified
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise ConstrainedError("llama.cpp could not create the context")
        self.n_ctx = int(L.llama_n_ctx(self.ctx))
        self.n_ctx_slot = int(L.llama_n_ctx_seq(self.ctx))
        self.n_batch = int(L.llama_n_batch(self.ctx))
        self.n_ubatch = int(L.llama_n_ubatch(self.ctx))
        self.n_swa = int(L.llama_model_n_swa(self.model))
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab_ptr))
        self.checkpoints_on = cfg.ctx_checkpoints > 0 and self.n_swa > 0 and not cfg.swa_full
        self.prompt_cache = PromptCache(cfg.cache_ram_mib, self.n_ctx) if cfg.cache_ram_mib != 0 else None
        holder = _ModelHolder(self, cfg.model_path)
        say("reading the vocabulary ...")
        self.vocab = Vocabulary.from_llama(holder)
        self.eog_ids = sorted(int(t) for t in self.vocab.eog_ids)
        self._pieces: dict[int, bytes] = {}
        self.batch = L.llama_batch_init(self.n_batch, 0, n_par)
        self.slots = [Slot(i, self.n_ctx_slot) for i in range(n_par)]
        for s in self.slots:
            s.reset_gen()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._controls: list[tuple[str, str, dict[str, Any], threading.Event]] = []
        self._controls_lock = threading.Lock()
        self._deferred: list[Task] = []
        self._thread: threading.Thread | None = None
        self._stop = False
        self._tick = 0
        self.metrics = {"prompt_tokens_total": 0, "prompt_tokens_cached_total": 0, "prompt_seconds_total": 0.0,
                        "tokens_predicted_total": 0, "tokens_predicted_seconds_total": 0.0, "n_decode_total": 0,
                        "n_tokens_max": 0, "requests_processing": 0, "requests_deferred": 0}
        self.lock = threading.Lock()          # guards slot snapshots for /slots
        say(f"model loaded: {self.n_vocab} tokens, n_ctx {self.n_ctx} ({n_par} slots of {self.n_ctx_slot})")

    # ------------------------------------------------------------------ tokens
    def piece(self, tok: int, special: bool = False) -> bytes:
        """``common_token_to_piece(ctx, tok, special)``."""
        key = tok if not special else -1 - tok
        p = self._pieces.get(key)
        if p is None:
            buf = ctypes.create_string_buffer(64)
            n = L.llama_token_to_piece(self.vocab_ptr, tok, buf, len(buf), 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(self.vocab_ptr, tok, buf, len(buf), 0, special)
            p = buf.raw[:n]
            self._pieces[key] = p
        return p

    def tokenize(self, text: str | bytes, add_special: bool, parse_special: bool) -> list[int]:
        """``common_tokenize``."""
        b = text.encode("utf-8") if isinstance(text, str) else text
        return c_tokenize(L, self.vocab_ptr, b, add_special, parse_special, "model")

    def detokenize(self, toks: list[int], special: bool) -> bytes:
        """``common_detokenize`` (``remove_special`` false, ``unparse_special`` = ``special``)."""
        cap = max(16, len(toks) * 8)
        arr = (L.llama_token * len(toks))(*toks)
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = L.llama_detokenize(self.vocab_ptr, arr, len(toks), buf, cap, False, special)
            if n >= 0:
                return buf.raw[:n]
            cap = -n

    def tokenize_prompt(self, p: Any) -> list[int]:
        """``tokenize_mixed`` with add_special and parse_special (a string, token ids, or both mixed)."""
        if isinstance(p, str):
            return self.tokenize(p, True, True)
        out: list[int] = []
        first = True
        for x in p:
            if isinstance(x, str):
                out += self.tokenize(x, first, True)
            else:
                out.append(int(x))
            first = False
        return out

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="constrained-model", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def submit(self, task: Task) -> None:
        self._queue.put(task)

    def control(self, cmpl_id: str, action: str, timeout: float = 30.0) -> dict[str, Any]:
        """``SERVER_TASK_TYPE_CONTROL`` (server-context.cpp:2446-2476), run on the worker thread between two
        iterations: ``reasoning_end`` moves the live completion's reasoning budget from counting to forcing its end.
        Returns the result JSON (``{"success": bool, "message"?}``). Blocks: call it off the event loop."""
        done = threading.Event()
        box: dict[str, Any] = {}
        with self._controls_lock:
            self._controls.append((cmpl_id, action, box, done))
        self._queue.put(_WAKE)
        if not done.wait(timeout):
            return {"success": False, "message": "timed out"}
        return box

    def _run_controls(self) -> None:
        with self._controls_lock:
            todo, self._controls = self._controls, []
        for cmpl_id, action, box, done in todo:
            slot = next((s for s in self.slots if cmpl_id and s.task is not None and s.state != "idle"
                         and s.task.cmpl_id == cmpl_id), None)
            if slot is None:
                box.update(success=False, message="no active completion for this id")
            elif action != "reasoning_end":
                box.update(success=False, message="unknown control action")
            elif not slot.task.params.reasoning_control:
                box.update(success=False, message="reasoning control not enabled for this completion")
            else:
                rb = slot.sampler.rbudget if slot.sampler is not None else None
                if rb is not None:
                    rb.force()                   # common_sampler_reasoning_budget_force: its result is not reported
                box.update(success=True)
            done.set()

    def busy(self) -> bool:
        return any(s.state != "idle" for s in self.slots)

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        while not self._stop:
            active = any(s.state != "idle" for s in self.slots)
            try:
                t = self._queue.get(timeout=None if not active and not self._deferred else 0.0) \
                    if not active and not self._deferred else self._queue.get_nowait()
            except queue.Empty:
                t = None
            else:
                if t is None and self._stop:
                    break
            if t is not None and t is not _WAKE:
                self._deferred.append(t)
            if t is not None:
                while True:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is not None and more is not _WAKE:
                        self._deferred.append(more)
            if self._controls:
                self._run_controls()
            self._launch_pending()
            if any(s.state != "idle" for s in self.slots):
                try:
                    self._step()
                except Exception as e:  # noqa: BLE001 - a failure answers every running task, the loop goes on
                    import traceback

                    traceback.print_exc()
                    for s in self.slots:
                        if s.task is not None:
                            self._error(s.task, HttpError(f"{type(e).__name__}: {e}", "server_error"))
                            self._release(s)
            elif self._deferred:
                time.sleep(0.005)


_WAKE = object()      # wakes the worker loop for a control request


class _ModelHolder:
    """What :meth:`Vocabulary.from_llama` reads: ``_model.vocab`` and ``model_path``."""

    def __init__(self, eng: Engine, path: str) -> None:
        class _M:
            vocab = eng.vocab_ptr
        self._model = _M()
        self.model_path = path
        self._engine = eng
