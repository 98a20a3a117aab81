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
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from llama_cpp import llama_cpp as L

from ..errors import ConstrainedError
from ..vocab import Vocabulary
from ..vocab.tokenizer import c_tokenize
from .batch import BatchStep
from .embeddings import EmbeddingOutput, can_split
from .errors import HttpError
from .loading import EngineConfig, ModelLoad, VocabLoad, context_params, resolved_parallel
from .prompt_cache import PromptCache
from .sampling import SlotSampling
from .scheduler import SlotScheduler
from .slot_actions import SlotActions
from .slots import Slot, Task

__all__ = ["Engine", "EngineConfig"]


class Engine(SlotScheduler, BatchStep, SlotSampling, SlotActions, EmbeddingOutput):
    """The model, its context and the slots; :meth:`submit` queues a task (with its ``n`` children)."""

    def __init__(self, cfg: EngineConfig, progress: Callable[[str], None] | None = None,
                 load: ModelLoad | None = None, vocab_load: VocabLoad | None = None) -> None:
        """Load the model and its context (``load``: a :class:`~.loading.ModelLoad` already started, as
        ``constrained serve`` does while it imports the app; else loaded here, warm-up run if ``cfg.warmup``).
        ``vocab_load``: the vocabulary reader that load started (else one is started here)."""
        self.cfg = cfg
        say = progress or (lambda s: None)
        if load is None:
            vocab_load = VocabLoad(cfg.model_path)
            load = ModelLoad(cfg.model_path, say, on_model=vocab_load.start, cfg=cfg)
            load.run()
        self.model, self.ctx = load.result()
        self.vocab_ptr = L.llama_model_get_vocab(self.model)
        if vocab_load is None or not vocab_load.started:
            vocab_load = VocabLoad(cfg.model_path).start(self.model)
        # the vocabulary tables and the grammar engine's token index are read on a thread started as soon as the
        # model is loaded (meanwhile the context is created and the server starts listening); the first request
        # that needs them waits for what is left
        self._vocab_load = vocab_load
        self.n_parallel, self.kv_unified = resolved_parallel(cfg.n_parallel, cfg.kv_unified)
        n_par = self.n_parallel
        self.n_ctx_train = int(L.llama_model_n_ctx_train(self.model))
        self.n_ctx = int(L.llama_n_ctx(self.ctx))
        self.n_ctx_slot = int(L.llama_n_ctx_seq(self.ctx))
        self.n_batch = int(L.llama_n_batch(self.ctx))
        self.n_ubatch = int(L.llama_n_ubatch(self.ctx))
        self.n_swa = int(L.llama_model_n_swa(self.model))
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab_ptr))
        # server-context.cpp load_model: context shift is turned off where the memory cannot shift (a sliding-window
        # model without --swa-full: the two caches differ in size)
        self.ctx_shift = cfg.ctx_shift and bool(L.llama_memory_can_shift(self.mem))
        if cfg.ctx_shift and not self.ctx_shift:
            say("ctx_shift is not supported by this context, it will be disabled")
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab_ptr))
        # --embedding: the context's pooling (the model's own unless --pooling), whether a prompt may be split
        self.pooling = int(L.llama_pooling_type(self.ctx))
        self.embd_can_split = can_split(pooling=self.pooling, causal=bool(L.llama_get_causal_attn(self.ctx)))
        self.checkpoints_on = cfg.ctx_checkpoints > 0 and self.n_swa > 0 and not cfg.swa_full
        self.prompt_cache = PromptCache(cfg.cache_ram_mib, self.n_ctx) if cfg.cache_ram_mib != 0 else None
        if cfg.cache_idle_slots and self.prompt_cache is not None:
            self._debug("__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__")
        self._pieces: dict[int, bytes] = {}
        self.batch = L.llama_batch_init(self.n_batch, 0, n_par)
        self.slots = [Slot(i, self.n_ctx_slot) for i in range(n_par)]
        for s in self.slots:
            s.reset_gen()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._controls: list[tuple[str, str, dict[str, Any], threading.Event]] = []
        self._controls_lock = threading.Lock()
        self._pending: list[Task] = []       # queue_tasks: offered to the slots at the next iteration, in order
        self._deferred: list[Task] = []      # queue_tasks_deferred: back in _pending one per released slot
        self._thread: threading.Thread | None = None
        self._stop = False
        self.fatal = ""                       # why the model thread ended, if it did
        self._tick = 0
        self.metrics = {"prompt_tokens_total": 0, "prompt_tokens_cached_total": 0, "prompt_seconds_total": 0.0,
                        "tokens_predicted_total": 0, "tokens_predicted_seconds_total": 0.0, "n_decode_total": 0,
                        "n_tokens_max": 0, "requests_processing": 0, "requests_deferred": 0,
                        # server_metrics: generation steps (the first token, from the prompt's batch, is not one),
                        # busy slots summed over decodes (n_busy_slots_per_decode)
                        "tokens_predicted_steps_total": 0, "n_busy_slots_total": 0}
        self.lock = threading.Lock()          # guards slot snapshots for /slots
        # sleep on idle (server_queue::start_loop): the time of the last task, the state, the wake-up
        self.sleeping = False
        self._t_last_task = time.monotonic()
        self._awake = threading.Event()
        self._awake.set()
        self.on_sleep: Callable[[], None] | None = None      # called on the model thread before sleeping
        say(f"model loaded: {self.n_vocab} tokens, n_ctx {self.n_ctx} ({n_par} slots of {self.n_ctx_slot})")

    def _debug(self, msg: str) -> None:
        """A debug line on stderr with ``-v`` (the ones llama-server's own test suite looks for)."""
        if self.cfg.debug:
            print(msg, file=sys.stderr, flush=True)

    @property
    def vocab(self) -> Vocabulary:
        """The model's vocabulary (waits for the loader thread the first time)."""
        v = self._vocab_load.vocab
        return v if v is not None else self._vocab_load.vocabulary()

    @property
    def eog_ids(self) -> list[int]:
        """End-of-generation ids, ascending."""
        e = self.__dict__.get("_eog_ids")
        if e is None:
            e = self.__dict__["_eog_ids"] = sorted(int(t) for t in self.vocab.eog_ids)
        return e

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

    def tokens_array(self, text: bytes, add_special: bool, parse_special: bool) -> Any:
        """``text`` tokenized into a numpy ``int32`` array (no Python list of a huge prompt)."""
        import numpy as np

        cap = len(text) + 8
        while True:
            buf = np.empty(cap, dtype=np.int32)
            ptr = buf.ctypes.data_as(ctypes.POINTER(L.llama_token))
            k = L.llama_tokenize(self.vocab_ptr, text, len(text), ptr, cap, add_special, parse_special)
            if k >= 0:
                return buf[:k].copy() if k < cap // 2 else buf[:k]
            if k == -2147483648 or -k <= cap:
                raise ConstrainedError(f"llama_tokenize failed ({k})")
            cap = -k

    def count_tokens(self, text: bytes, add_special: bool, parse_special: bool) -> int:
        """How many tokens ``text`` is, tokenized into a numpy buffer (no Python list of a huge prompt)."""
        return len(self.tokens_array(text, add_special, parse_special))

    def tokenize_prompt(self, p: Any, refuse_from: int = 0) -> Any:
        """``tokenize_mixed`` with add_special and parse_special (a string, token ids, or both mixed).
        ``refuse_from`` > 0: a string prompt of at least that many tokens (one the slot will refuse) comes back as
        a numpy ``int32`` array (4 bytes a token, as llama-server's vector) instead of a Python list (a 50 MB prompt
        would cost over 1 GB as one). It still goes to a slot: llama-server picks a slot for it, saves and clears
        the idle slots, then refuses it in the slot (``exceed_context_size_error``) and releases that slot, so
        the next requests' slot choice depends on it."""
        if isinstance(p, str):
            if refuse_from > 0 and len(p) + 2 >= refuse_from // 4:
                b = p.encode("utf-8")
                if len(b) + 2 >= refuse_from:
                    arr = self.tokens_array(b, True, True)
                    if len(arr) >= refuse_from:
                        return arr
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

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the model thread: every running and waiting task cancelled, the thread joined (``timeout``
        seconds at most: it is a daemon, so a step still running cannot keep the process alive)."""
        self._stop = True
        for s in self.slots:
            if s.task is not None:
                s.task.cancel()
        for t in [*self._pending, *self._deferred]:
            t.cancel()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def submit(self, task: Task | list[Task]) -> None:
        """Queue a task, or a request's tasks at once (``server_queue::post(tasks)``: the model thread takes them
        in one pass, so one prompt's slot choice never sees the next one's absence)."""
        tasks = task if isinstance(task, list) else [task]
        if not self.alive():                  # nobody would answer it: 503 at once
            for t in tasks:
                t.emit(HttpError(f"the model thread stopped: {self.fatal}", "unavailable_error"))
            return
        self._t_last_task = time.monotonic()
        self._queue.put(tasks)

    def wait_until_no_sleep(self) -> None:
        """``server_queue::wait_until_no_sleep``: wake a sleeping engine and wait until its context is back.
        Blocks: call it off the event loop."""
        if not self.sleeping:
            return
        self._queue.put(_WAKE)
        self._awake.wait()

    def _sleep(self) -> None:
        """Idle past ``--sleep-idle-seconds``: the context (the KV cache) freed with the slots and the prompt cache
        (llama-server also frees the weights; here they stay loaded), until a task or a wake-up arrives; then a
        fresh context, fresh slots and an empty prompt cache, as llama-server's ``load_model`` on resume."""
        if self.on_sleep is not None:
            self.on_sleep()
        self._awake.clear()
        self.sleeping = True
        print("server is entering sleeping state", file=sys.stderr, flush=True)
        L.llama_free(self.ctx)
        self.ctx = None
        item = self._queue.get()
        self.ctx = L.llama_init_from_model(self.model, context_params(self.cfg, self.model))
        if not self.ctx:
            raise ConstrainedError("llama.cpp could not create the context after sleeping")
        self.mem = L.llama_get_memory(self.ctx)
        with self.lock:
            self.slots = [Slot(i, self.n_ctx_slot) for i in range(self.n_parallel)]
            for sl in self.slots:
                sl.reset_gen()
        if self.prompt_cache is not None:
            self.prompt_cache = PromptCache(self.cfg.cache_ram_mib, self.n_ctx)
        print("server is exiting sleeping state", file=sys.stderr, flush=True)
        self._t_last_task = time.monotonic()
        self.sleeping = False
        self._awake.set()
        self._queue.put(item)

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
    def alive(self) -> bool:
        """False once the model thread has ended without being stopped (``/health`` then answers 503)."""
        return self._thread is None or self._thread.is_alive() or self._stop

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - never silently: every waiting task is answered
            import traceback

            traceback.print_exc()
            self.fatal = f"{type(e).__name__}: {e}"
            err = HttpError(f"the model thread stopped: {self.fatal}", "server_error")
            for s in self.slots:
                if s.task is not None:
                    s.task.emit(err)
            for t in [*getattr(self, "_pending", []), *self._deferred]:
                t.emit(err)
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                for t in item if isinstance(item, list) else [item] if item is not None else []:
                    if t is not _WAKE:
                        t.emit(err)

    def _loop(self) -> None:
        # server_queue::start_loop: the new tasks offered to the slots in arrival order (process_new_tasks), then
        # one iteration of the slots (update_slots); idle, it waits for the next task
        offered_idle = False
        while not self._stop:
            active = any(s.state != "idle" for s in self.slots)
            if not active and self._deferred and not self._pending and not offered_idle:
                # every slot is idle and tasks still wait: llama-server would offer them again only when a slot is
                # released, which will not happen now (a task waiting on a busy requested slot that freed while
                # another was offered); offered again here so they are answered
                self._pending, self._deferred = self._deferred, []
                offered_idle = True                 # once until the next task arrives (never a busy loop)
            block = not active and not self._pending
            idle_s = self.cfg.sleep_idle_seconds
            try:
                if block and idle_s > 0:
                    left = self._t_last_task + idle_s - time.monotonic()
                    if left <= 0:
                        self._sleep()
                        continue
                    item = self._queue.get(timeout=min(left, 1.0))
                else:
                    item = self._queue.get() if block else self._queue.get_nowait()
            except queue.Empty:
                if block:
                    continue
                item = _WAKE
            while True:
                if item is None and self._stop:
                    return
                if isinstance(item, list):
                    self._pending.extend(item)
                    offered_idle = False
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if self._controls:
                self._run_controls()
            for s in self.slots:                     # SERVER_TASK_TYPE_CANCEL: before the new tasks are offered
                if s.task is not None and s.task.cancelled:
                    self._release(s)
            try:
                self._launch_pending()
            except Exception as e:  # noqa: BLE001 - a failure outside every task's guard: the waiting tasks answered
                import traceback

                traceback.print_exc()
                for t in [*self._pending, *self._deferred]:
                    self._error(t, HttpError(f"got exception: {type(e).__name__}: {e}", "server_error"))
                self._pending, self._deferred = [], []
            if any(s.state != "idle" for s in self.slots):
                self._t_last_task = time.monotonic()      # generating is not idle time
                try:
                    self._step()
                    self._t_last_task = time.monotonic()
                except Exception as e:  # noqa: BLE001 - a failure answers every running task, the loop goes on
                    import traceback

                    traceback.print_exc()
                    for s in self.slots:
                        if s.task is not None:
                            self._error(s.task, HttpError(f"{type(e).__name__}: {e}", "server_error"))
                            self._release(s)


_WAKE = object()      # wakes the worker loop for a control request
