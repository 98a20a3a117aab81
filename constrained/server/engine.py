"""The model worker: one thread owns the llama.cpp context and runs llama-server's slots in one batch.

``--parallel N`` slots share one ``llama_context`` (``n_seq_max = N``; slot i is KV sequence i). Each iteration
builds one ``llama_batch`` as llama-server's ``update_slots`` does (the last sampled token of every generating slot,
then pending prompt tokens up to ``n_batch``), decodes it once, and samples every slot from its own logits row with
its own :class:`sampler.Sampler` and grammar matcher (``sample_constrained`` = ``common_sampler_sample``). Queued
requests wait for a free slot; a cancelled task (a client that went away) frees its slot at the next iteration.

Slot choice, prompt reuse, prompt splitting and the sliding-window checkpoints (saved and restored with
``llama_state_seq_*_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)``) follow llama-server (:mod:`constrained.slot`),
with the same KV cache layout (``swa_full`` as given), so requests served one at a time get the real
llama-server's tokens for the same flags.

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

import numpy as np
from llama_cpp import llama_cpp as L

from sampler import Params, Sampler, token_probs
from sampler.stdalgo import sort_perm

from ..errors import ConstrainedError
from ..grammar import Grammar
from ..slot import Checkpoint, add_checkpoint, checkpoint_decision, common_prefix, next_batch_end, plan_reuse
from ..vocab import Vocabulary
from ..vocab.tokenizer import c_tokenize
from .errors import HttpError
from .prompt_cache import PromptCache
from .task import TaskParams

__all__ = ["Engine", "EngineConfig", "Final", "Partial", "Task", "TokenOut"]

STOP_NONE, STOP_EOS, STOP_WORD, STOP_LIMIT = "none", "eos", "word", "limit"


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


@dataclass
class TokenOut:
    """``completion_token_output``: a token, the text sent for it, and its probabilities (``n_probs``)."""

    tok: int
    text: bytes
    prob: float = 1.0
    probs: list[tuple[int, bytes, float]] = field(default_factory=list)


@dataclass
class Partial:
    """A streamed token (or, with ``begin``, the signal that the slot started on the prompt)."""

    task: Task
    out: TokenOut | None
    n_decoded: int
    n_prompt: int
    n_cached: int
    begin: bool = False
    timings: dict[str, Any] | None = None
    #: with ``return_progress``: ``result_prompt_progress`` (total, cache, processed, time_ms); ``out`` is None
    progress: dict[str, int] | None = None


@dataclass
class Final:
    """The end of one task: ``server_task_result_cmpl_final``'s fields."""

    task: Task
    id_slot: int
    content: bytes
    tokens: list[int]
    stop: str
    stopping_word: str
    n_decoded: int
    n_prompt: int
    n_cached_prompt: int
    n_tokens_cached: int
    has_new_line: bool
    truncated: bool
    probs: list[TokenOut]
    prompt_text: str
    timings: dict[str, Any]


class Task:
    """One completion: its prompt tokens, parameters and where its results go (``emit`` is called on the worker
    thread; it must be thread-safe)."""

    _ids = 0
    _lock = threading.Lock()

    def __init__(self, tokens: list[int], params: TaskParams, emit: Callable[[Any], None], *, index: int = 0,
                 children: list[Task] | None = None) -> None:
        with Task._lock:
            Task._ids += 1
            self.id = Task._ids
        self.tokens = tokens
        self.params = params
        self.emit = emit
        self.index = index
        self.children = children or []
        self.parent: Task | None = None
        for c in self.children:
            c.parent = self
        self.cancelled = False
        self.user_starts: list[int] = []      # message spans: where user messages start (checkpoint breaks)

    def cancel(self) -> None:
        self.cancelled = True
        for c in self.children:
            c.cancelled = True


class _Slot:
    def __init__(self, i: int, n_ctx: int) -> None:
        self.id = i
        self.n_ctx = n_ctx
        self.tokens: list[int] = []          # what the KV sequence holds (prompt.tokens)
        self.checkpoints: list[Checkpoint] = []
        self.t_last_used = -1
        self.task: Task | None = None
        self.task_prev: Task | None = None
        self.state = "idle"                  # idle | started | prompt | done_prompt | generating | wait_other

    def reset_gen(self) -> None:
        self.sampler: Sampler | None = None
        self.matcher: Any = None
        self.generated = bytearray()
        self.gen_tokens: list[int] = []
        self.n_sent = 0
        self.n_decoded = 0
        self.probs: list[TokenOut] = []
        self.stop = STOP_NONE
        self.stopping_word = ""
        self.has_new_line = False
        self.truncated = False
        self.sampled = -1
        self.i_batch = -1
        self.n_cached = 0
        self.n_processed = 0
        self.t_start = time.perf_counter()
        self.t_prompt_done = 0.0
        self.t_gen_last = 0.0


class Engine:
    """The model, its context and the slots; :meth:`submit` queues a task (with its ``n`` children)."""

    def __init__(self, cfg: EngineConfig, progress: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        say = progress or (lambda s: None)
        if not os.path.isfile(cfg.model_path):
            raise ConstrainedError(f"model file not found: {cfg.model_path}")
        from ..llama import _silence_llama_log

        _silence_llama_log()
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
        self.slots = [_Slot(i, self.n_ctx_slot) for i in range(n_par)]
        for s in self.slots:
            s.reset_gen()
        self._queue: queue.Queue[Task | None] = queue.Queue()
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
            if t is not None:
                self._deferred.append(t)
                while True:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is not None:
                        self._deferred.append(more)
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

    # ------------------------------------------------------------------ slots
    def _pick_slot(self, task: Task, taken: set[int]) -> _Slot | None:
        # get_available_slot: the requested id, else the best LCP similarity, else the least recently used; a
        # slot taken by LRU, or about to keep under half of its context, goes through the prompt cache
        ret = None
        update_cache = False
        if task.params.id_slot != -1:
            req = [s for s in self.slots if s.id == task.params.id_slot]
            if not req or req[0].state != "idle" or req[0].id in taken:
                return None
            ret = req[0]
        free = [s for s in self.slots if s.state == "idle" and s.id not in taken
                and (task.params.id_slot == -1 or s.id == task.params.id_slot)]
        if self.cfg.slot_prompt_similarity != 0.0:
            best = np.float32(0.0)
            sim_ret = None
            for s in free:
                if not s.tokens:
                    continue
                sim = np.float32(common_prefix(s.tokens, task.tokens)) / np.float32(max(1, len(task.tokens)))
                if sim > best and sim > np.float32(self.cfg.slot_prompt_similarity):
                    best = sim
                    sim_ret = s
            if sim_ret is not None:
                ret = sim_ret
                f_keep = best * np.float32(len(task.tokens)) / np.float32(len(ret.tokens))
                update_cache = bool(f_keep < np.float32(0.5))
        if ret is None:
            t_last = -1
            for s in free:
                if ret is None or s.t_last_used <= t_last:
                    t_last = s.t_last_used
                    ret = s
            update_cache = ret is not None
        if ret is not None and update_cache and self.prompt_cache is not None:
            self._prompt_save(ret)
            if not self._prompt_load(ret, task.tokens):
                self._prompt_clear(ret)
            self.prompt_cache.update()
        return ret

    def _prompt_save(self, s: _Slot) -> bool:
        # server_slot::prompt_save: the sequence's whole state (and its checkpoints) into the host cache
        assert self.prompt_cache is not None
        if not s.tokens:
            return False
        size = int(L.llama_state_seq_get_size_ext(self.ctx, s.id, 0))

        def read() -> bytes:
            buf = (ctypes.c_uint8 * size)()
            L.llama_state_seq_get_data_ext(self.ctx, buf, size, s.id, 0)
            return bytes(buf)
        return self.prompt_cache.alloc(s.tokens, s.checkpoints, size, read) is not None

    def _prompt_load(self, s: _Slot, tokens: list[int]) -> bool:
        # server_prompt_cache::load into the slot's sequence; False when the state does not restore
        assert self.prompt_cache is not None
        entry = self.prompt_cache.find(s.tokens, tokens)
        if entry is None:
            return True
        buf = (ctypes.c_uint8 * len(entry.data)).from_buffer_copy(entry.data)
        if L.llama_state_seq_set_data_ext(self.ctx, buf, len(entry.data), s.id, 0) != len(entry.data):
            return False
        self.prompt_cache.take(entry)
        s.tokens = list(entry.tokens)
        s.checkpoints = list(entry.checkpoints)
        return True

    def _launch_pending(self) -> None:
        still: list[Task] = []
        for task in self._deferred:
            if task.cancelled:
                continue
            group = [task, *task.children]
            parent = self._pick_slot(task, set())
            if parent is None:
                still.append(task)
                continue
            # get_free_slots: the children take the first free slots by id, the parent's excluded
            kids = [s for s in self.slots if s.state == "idle" and s.id != parent.id][: len(task.children)]
            if len(kids) < len(task.children):
                still.append(task)
                continue
            chosen = [parent, *kids]
            ok = all([self._launch(s, t) for t, s in zip(group, chosen, strict=True)])
            if ok and self.prompt_cache is not None and self.cfg.cache_idle_slots:
                for s in self.slots:                 # the idle slots saved (and cleared when unified)
                    if s.state == "idle":
                        if self._prompt_save(s):
                            self.prompt_cache.update()
                        if self.kv_unified:
                            self._prompt_clear(s)
        self._deferred = still
        self.metrics["requests_deferred"] = len(still)

    def _launch(self, slot: _Slot, task: Task) -> bool:
        # launch_slot_with_task: token ids checked, samplers (and grammar) built
        slot.reset_gen()
        p = task.params
        if any(not 0 <= t < self.n_vocab for t in task.tokens):
            self._error(task, HttpError("Prompt contains invalid tokens", "invalid_request_error"))
            return False
        try:
            slot.sampler = Sampler(p.sampling, self.vocab)
            if p.grammar:
                g = Grammar.from_gbnf(p.grammar)
                if p.grammar_lazy:
                    pats, toks = _trigger_args(p.grammar_triggers)
                    slot.matcher = g.matcher(self.vocab, trigger_patterns=pats, trigger_tokens=toks)
                else:
                    slot.matcher = g.matcher(self.vocab)
                    if p.generation_prompt and p.grammar_type in ("tool_calls", "output_format"):
                        self._prefill(slot.matcher, p.generation_prompt)
        except ConstrainedError:
            self._error(task, HttpError("Failed to initialize samplers: failed to parse grammar",
                                        "invalid_request_error"))
            return False
        except ValueError as e:
            self._error(task, HttpError(f"Failed to initialize samplers: {e}", "invalid_request_error"))
            return False
        slot.task = task
        slot.state = "wait_other" if task.parent is not None else "started"
        self.metrics["requests_processing"] = sum(s.task is not None for s in self.slots)
        return True

    def _prefill(self, matcher: Any, gen_prompt: str) -> None:
        """``common_sampler_init``: the generation prompt's tokens fed to the grammar (a leading space token the
        tokenizer adds before a special token is skipped)."""
        toks = self.tokenize(gen_prompt, False, True)
        for i, t in enumerate(toks):
            piece = self.piece(t, True)
            if i == 0 and piece[:1].isspace() and not gen_prompt[:1].isspace():
                continue
            if not matcher.accept_token(t):
                raise ValueError("grammar prefill failed for the generation prompt")

    def _release(self, slot: _Slot) -> None:
        if slot.task is not None:
            slot.task_prev = slot.task
            if slot.task.parent is not None:      # a child keeps no context: the parent's is enough
                slot.tokens = []
                slot.checkpoints = []
                L.llama_memory_seq_rm(self.mem, slot.id, -1, -1)
        slot.task = None
        slot.state = "idle"
        self._tick += 1
        slot.t_last_used = self._tick
        self.metrics["requests_processing"] = sum(s.task is not None for s in self.slots)

    def _prompt_clear(self, s: _Slot) -> None:
        L.llama_memory_seq_rm(self.mem, s.id, -1, -1)
        s.tokens = []
        s.checkpoints = []

    def _clear_idle_slot(self) -> bool:
        # try_clear_idle_slots: with a unified KV cache, the first idle slot holding a prompt is purged
        if not self.kv_unified:
            return False
        for s in self.slots:
            if s.state == "idle" and s.tokens:
                self._prompt_clear(s)
                return True
        return False

    def _error(self, task: Task, err: HttpError) -> None:
        task.emit(err)

    # ------------------------------------------------------------------ one iteration
    def _step(self) -> None:
        b = self.batch
        n = 0
        out_rows: list[tuple[_Slot, int]] = []
        for s in self.slots:
            if s.task is not None and s.task.cancelled:
                self._release(s)
        # 1. the last sampled token of every generating slot
        for s in self.slots:
            if s.state == "generating":
                n = self._add(n, s.sampled, len(s.tokens), s.id, True)
                s.tokens.append(s.sampled)
                s.i_batch = n - 1
                out_rows.append((s, n - 1))
        # 2. pending prompt tokens
        for s in self.slots:
            if s.state == "started":
                if not self._start_prompt(s):
                    continue
            if s.state != "prompt" or n >= self.n_batch:
                continue
            assert s.task is not None
            n_prompt = len(s.task.tokens)
            start = len(s.tokens)
            end = min(next_batch_end(start, n_prompt, n_batch=self.n_batch, n_ubatch=self.n_ubatch,
                                     checkpoints=self.checkpoints_on), start + self.n_batch - n)
            us = s.task.user_starts if self.checkpoints_on else []
            step = self.cfg.checkpoint_min_step
            for p_us in us:                   # break at the last user message, or one past min-step
                if start < p_us < end and (p_us == us[-1] or not s.checkpoints
                                           or p_us > s.checkpoints[-1].n_tokens + step):
                    end = p_us
                    break
            if self.checkpoints_on:
                pmin = int(L.llama_memory_seq_pos_min(self.mem, s.id))
                if (_checkpoint_with_spans(s.checkpoints, start, end, n_prompt, us, self.n_ubatch, pmin, step)
                        if us else
                        checkpoint_decision(s.checkpoints, start, end, n_prompt, n_ubatch=self.n_ubatch,
                                            pos_min=pmin, min_step=step)):
                    pmax = int(L.llama_memory_seq_pos_max(self.mem, s.id))
                    add_checkpoint(s.checkpoints, Checkpoint(start, pmin, pmax, s.task.id, self._state_get(s.id)),
                                   max_checkpoints=self.cfg.ctx_checkpoints, min_step=self.cfg.checkpoint_min_step)
            for i in range(start, end):
                n = self._add(n, s.task.tokens[i], i, s.id, False)
            s.tokens.extend(s.task.tokens[start:end])
            s.n_processed += end - start
            if end == n_prompt:
                b.logits[n - 1] = 1
                s.state = "done_prompt"
                s.i_batch = n - 1
        if n == 0:
            return
        b.n_tokens = n
        t0 = time.perf_counter()
        rc = L.llama_decode(self.ctx, b)
        while rc == 1 and self._clear_idle_slot():   # no room in the KV cache: purge an idle slot, retry
            rc = L.llama_decode(self.ctx, b)
        self.metrics["n_decode_total"] += 1
        if rc != 0:
            # server-context.cpp: every processing slot gets the error, is released and loses its prompt
            # (llama-server first halves the batch down to one token; a failed decode changes nothing here)
            err = ("Context size has been exceeded." if rc == 1 else "Invalid input batch." if rc == -1
                   else "Compute error." if rc < -1 else f"llama_decode failed ({rc})")
            for s in self.slots:
                if s.task is not None:
                    self._error(s.task, HttpError(err, "server_error"))
                    self._release(s)
                    self._prompt_clear(s)
            return
        t1 = time.perf_counter()
        for s in self.slots:                  # the prompt progress of every slot on its prompt (server-context.cpp)
            if (s.state in ("prompt", "done_prompt") and s.task is not None and s.task.params.stream
                    and s.task.params.return_progress):
                self._progress(s)
        # prompts done: init the samplers, hand the state to the n > 1 children
        for s in self.slots:
            if s.state == "done_prompt":
                assert s.task is not None
                s.t_prompt_done = t1
                self.metrics["prompt_tokens_total"] += s.n_processed
                self.metrics["prompt_seconds_total"] += t1 - s.t_start
                self._init_sampler(s)
                s.state = "generating"
                out_rows.append((s, s.i_batch))
                for c in s.task.children:
                    cs = next((x for x in self.slots if x.task is c), None)
                    if cs is None or cs.state != "wait_other":
                        continue
                    L.llama_memory_seq_rm(self.mem, cs.id, -1, -1)
                    L.llama_memory_seq_cp(self.mem, s.id, cs.id, -1, -1)
                    cs.tokens = list(s.tokens)
                    cs.checkpoints = [Checkpoint(cp.n_tokens, cp.pos_min, cp.pos_max, cp.task_id, cp.data)
                                      for cp in s.checkpoints]
                    cs.n_cached, cs.n_processed = s.n_cached, s.n_processed
                    cs.t_start, cs.t_prompt_done = s.t_start, t1
                    self._init_sampler(cs)
                    cs.state = "generating"
                    cs.i_batch = s.i_batch
                    out_rows.append((cs, s.i_batch))
        out_rows.sort(key=lambda r: r[0].id)
        for s, row in out_rows:
            if s.task is None or s.state != "generating":
                continue
            self._sample(s, row, t1 - t0)

    def _state_get(self, seq: int) -> bytes:
        """The sliding-window part of a sequence (``update_tgt`` with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``)."""
        flags = L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = L.llama_state_seq_get_size_ext(self.ctx, seq, flags)
        buf = (ctypes.c_uint8 * size)()
        n = L.llama_state_seq_get_data_ext(self.ctx, buf, size, seq, flags)
        if n != size:
            raise ConstrainedError(f"checkpoint size mismatch: expected {size}, got {n}")
        return bytes(buf)

    def _state_set(self, seq: int, data: bytes) -> None:
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        n = L.llama_state_seq_set_data_ext(self.ctx, buf, len(data), seq, L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
        if n != len(data):
            raise ConstrainedError(f"checkpoint restore failed: {n} of {len(data)} bytes")

    def _add(self, n: int, tok: int, pos: int, seq: int, logits: bool) -> int:
        b = self.batch
        b.token[n] = tok
        b.pos[n] = pos
        b.n_seq_id[n] = 1
        b.seq_id[n][0] = seq
        b.logits[n] = 1 if logits else 0
        return n + 1

    def _start_prompt(self, s: _Slot) -> bool:
        # SLOT_STATE_STARTED: the prompt length check, the reused prefix, the begin signal
        task = s.task
        assert task is not None
        n_prompt = len(task.tokens)
        if n_prompt == 0:
            self._finish(s)
            return False
        if n_prompt >= s.n_ctx:
            self._error(task, HttpError(
                f"request ({n_prompt} tokens) exceeds the available context size ({s.n_ctx} tokens), "
                "try increasing it", "exceed_context_size_error", n_prompt_tokens=n_prompt, n_ctx=s.n_ctx))
            self._release(s)
            return False
        n_swa = self.n_swa if self.checkpoints_on else 0
        n_past, restore = plan_reuse(s.tokens, task.tokens, s.checkpoints, cache_prompt=task.params.cache_prompt,
                                     n_swa=n_swa, pos_min=int(L.llama_memory_seq_pos_min(self.mem, s.id)))
        if restore is not None and restore.data is not None:
            self._state_set(s.id, restore.data)
        del s.tokens[n_past:]
        L.llama_memory_seq_rm(self.mem, s.id, n_past, -1)
        s.n_cached = n_past
        s.n_processed = 0
        self.metrics["prompt_tokens_cached_total"] += n_past
        s.state = "prompt"
        if task.params.stream:
            if task.params.return_progress:     # the initial 0% progress instead of the begin signal
                self._progress(s)
            else:
                task.emit(Partial(task, None, 0, n_prompt, n_past, begin=True))
        return True

    def _progress(self, s: _Slot) -> None:
        # send_partial_response(slot, {}, true): an empty token (id 0, no text) with the prompt's progress
        task = s.task
        assert task is not None
        prog = {"total": len(task.tokens), "cache": s.n_cached, "processed": len(s.tokens),
                "time_ms": int((time.perf_counter() - s.t_start) * 1000)}
        task.emit(Partial(task, TokenOut(0, b"", 0.0), s.n_decoded, len(task.tokens), s.n_cached,
                          timings=self._timings(s) if task.params.timings_per_token else None, progress=prog))

    def _init_sampler(self, s: _Slot) -> None:
        assert s.sampler is not None and s.task is not None
        s.sampler.reset()                     # init_sampler: common_sampler_reset, then the prompt tokens
        for t in s.task.tokens:
            s.sampler.accept(t)

    def _logits_row(self, row: int) -> np.ndarray:
        ptr = L.llama_get_logits_ith(self.ctx, row)
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                     shape=(self.n_vocab,)).copy()

    def _sample(self, s: _Slot, row: int, t_decode: float) -> None:
        task = s.task
        assert task is not None and s.sampler is not None
        p = task.params
        logits = self._logits_row(row)
        m = s.matcher
        if m is not None:
            tok, _ = s.sampler.sample_constrained(logits, m.allows, m.mask)
            if not self.vocab.is_eog(tok) and not m.accept_token(tok):
                raise ConstrainedError(f"the grammar rejected the sampled token {tok}")
        else:
            tok = s.sampler.sample(logits)
        s.sampler.accept(tok)
        s.n_decoded += 1
        now = time.perf_counter()
        if s.n_decoded == 1:
            s.t_prompt_done = now
        s.t_gen_last = now
        special = bool(p.preserved_tokens) and tok in p.preserved_tokens
        out = TokenOut(tok, self.piece(tok, special))
        n_probs = p.sampling.n_probs
        if n_probs > 0:
            self._token_probs(s, out, logits, n_probs, p.post_sampling_probs)
        s.sampled = tok
        if not self._process_token(s, out):
            self._finish(s)

    def _token_probs(self, s: _Slot, out: TokenOut, logits: np.ndarray, n_probs: int, post: bool) -> None:
        # populate_token_probs
        if post:
            c = s.sampler.candidates if s.sampler is not None else None
            if c is None:
                return
            ids = np.asarray(c.ids)[: c.size]
            pr = np.asarray(c.p)[: c.size]
            if not c.sorted:
                order = sort_perm(pr, descending=True)
                ids, pr = ids[order], pr[order]
            hit = np.flatnonzero(ids == out.tok)
            if hit.size:
                out.prob = float(pr[hit[0]])
            for i in range(min(len(ids), n_probs)):
                if pr[i] == 0.0:
                    break
                out.probs.append((int(ids[i]), self.piece(int(ids[i])), float(pr[i])))
        else:
            r = token_probs(logits, out.tok, n_probs)
            out.prob = float(r.prob)
            out.probs = [(int(t), self.piece(int(t)), float(q)) for t, q in zip(r.ids, r.probs, strict=True)]

    def _process_token(self, s: _Slot, out: TokenOut) -> bool:
        task = s.task
        assert task is not None
        p = task.params
        piece = out.text
        s.generated += piece
        if p.return_tokens:
            s.gen_tokens.append(out.tok)
        has_next = True
        incomplete = _valid_utf8_len(s.generated) < len(s.generated)
        is_eog = self.vocab.is_eog(out.tok)
        if not incomplete:
            pos = min(s.n_sent, len(s.generated))
            test = bytes(s.generated[pos:])
            send = True
            stop_pos = _find_stop(test, len(piece), p.stop, True, s)
            if stop_pos is not None:
                has_next = False
                del s.generated[pos + stop_pos:]
                pos = min(s.n_sent, len(s.generated))
            elif not is_eog:
                send = _find_stop(test, len(piece), p.stop, False, s) is None
            if send:
                out.text = bytes(s.generated[pos:])
                s.n_sent += len(out.text)
            else:
                out.text = b""
            s.probs.append(out)
            if p.stream:
                task.emit(Partial(task, out, s.n_decoded, len(task.tokens), s.n_cached,
                                  timings=self._timings(s) if p.timings_per_token else None))
        if len(s.tokens) + 1 >= s.n_ctx:
            s.truncated = True
            s.stop = STOP_LIMIT
            has_next = False
        if s.n_decoded > 0 and has_next and p.n_predict != -1 and p.n_predict - s.n_decoded <= 0:
            s.stop = STOP_LIMIT
            has_next = False
        if b"\n" in out.text:
            s.has_new_line = True
        if is_eog:
            s.stop = STOP_EOS
            has_next = False
        return has_next

    def _timings(self, s: _Slot) -> dict[str, Any]:
        t_prompt_ms = (s.t_prompt_done - s.t_start) * 1e3 if s.t_prompt_done else 0.0
        t_gen_ms = (s.t_gen_last - s.t_prompt_done) * 1e3 if s.n_decoded > 1 else 0.0
        npp, ngen = s.n_processed, s.n_decoded
        return {"cache_n": s.n_cached, "prompt_n": npp, "prompt_ms": t_prompt_ms,
                "prompt_per_token_ms": t_prompt_ms / npp if npp else 0.0,
                "prompt_per_second": 1e3 * npp / t_prompt_ms if t_prompt_ms > 0 else 0.0,
                "predicted_n": ngen, "predicted_ms": t_gen_ms,
                "predicted_per_token_ms": t_gen_ms / ngen if ngen else 0.0,
                "predicted_per_second": 1e3 * ngen / t_gen_ms if t_gen_ms > 0 else 0.0}

    def _finish(self, s: _Slot) -> None:
        task = s.task
        assert task is not None
        p = task.params
        probs = list(s.probs)
        if p.sampling.n_probs > 0 and not p.stream and s.stop == STOP_WORD and s.stopping_word:
            k = len(self.tokenize(s.stopping_word, False, False))
            probs = probs[: len(probs) - min(len(probs), k)]
        n_tokens_cached = len(s.tokens)
        self.metrics["tokens_predicted_total"] += s.n_decoded
        self.metrics["n_tokens_max"] = max(self.metrics["n_tokens_max"], n_tokens_cached + 1)
        if s.n_decoded > 1:
            self.metrics["tokens_predicted_seconds_total"] += s.t_gen_last - s.t_prompt_done
        fin = Final(task=task, id_slot=s.id, content=b"" if p.stream else bytes(s.generated),
                    tokens=[] if p.stream else list(s.gen_tokens), stop=s.stop, stopping_word=s.stopping_word,
                    n_decoded=s.n_decoded, n_prompt=len(task.tokens), n_cached_prompt=s.n_cached,
                    n_tokens_cached=n_tokens_cached, has_new_line=s.has_new_line, truncated=s.truncated,
                    probs=probs, prompt_text=self.detokenize(task.tokens, True).decode("utf-8", "replace"),
                    timings=self._timings(s))
        self._release(s)
        task.emit(fin)


def _checkpoint_with_spans(cps: list[Checkpoint], start: int, end: int, n_prompt: int, user_starts: list[int],
                           n_ubatch: int, pos_min: int, min_step: int) -> bool:
    """:func:`constrained.slot.checkpoint_decision` with message spans (server-context.cpp:3565-3612): a batch that
    starts a user message may be checkpointed mid-prompt, and the last user message always is."""
    near_end = n_prompt < end + n_ubatch
    is_user_start = start in user_starts
    if end != n_prompt and not is_user_start and not near_end:
        return False
    if pos_min < 0:
        return False
    return not cps or start == user_starts[-1] or near_end or start > cps[-1].n_tokens + min_step


def user_message_starts(tokens: list[int], delimiters: list[tuple[str, list[int]]]) -> list[int]:
    """``common_chat_msg_delimiters::split`` reduced to what the slot uses: the positions where a user message
    starts (the first delimiter matching at a position wins, in the order given)."""
    out: list[int] = []
    for i in range(len(tokens)):
        for role, d in delimiters:
            if d and tokens[i:i + len(d)] == d:
                if role == "user":
                    out.append(i)
                break
    return out


def _trigger_args(triggers: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """``common_sampler_init``'s trigger lists: words escaped, full patterns anchored, tokens apart."""
    from ..grammar.lazy_regex import regex_escape

    pats: list[str] = []
    toks: list[int] = []
    for t in triggers:
        kind, value = t["type"], t["value"]
        if kind == 0:
            toks.append(int(t["token"]))
        elif kind == 1:
            pats.append(regex_escape(value))
        elif kind == 2:
            pats.append(value)
        elif kind == 3:
            anchored = value
            if not anchored.startswith("^"):
                anchored = "^" + anchored
            if not anchored.endswith("$"):
                anchored += "$"
            pats.append(anchored)
    return pats, toks


class _ModelHolder:
    """What :meth:`Vocabulary.from_llama` reads: ``_model.vocab`` and ``model_path``."""

    def __init__(self, eng: Engine, path: str) -> None:
        class _M:
            vocab = eng.vocab_ptr
        self._model = _M()
        self.model_path = path
        self._engine = eng


def _valid_utf8_len(b: bytes | bytearray) -> int:
    # validate_utf8 (server-common.cpp:903): the length without a cut-off multi-byte character at the end
    n = len(b)
    for i in range(1, min(4, n) + 1):
        c = b[n - i]
        if (c & 0xE0) == 0xC0 and i < 2:
            return n - i
        if (c & 0xF0) == 0xE0 and i < 3:
            return n - i
        if (c & 0xF8) == 0xF0 and i < 4:
            return n - i
    return n


def _partial_stop(text: bytes, word: bytes) -> int | None:
    # string_find_partial_stop (common.h:862)
    if text and word:
        last = text[-1]
        for ln in range(min(len(text), len(word)), 0, -1):
            if word[ln - 1] == last and text.endswith(word[:ln]):
                return len(text) - ln
    return None


def _find_stop(text: bytes, last_size: int, words: list[str], full: bool, s: _Slot) -> int | None:
    # server_slot::find_stopping_strings
    stop_pos = None
    for w in words:
        wb = w.encode("utf-8")
        if full:
            tmp = len(wb) + last_size
            frm = len(text) - tmp if len(text) > tmp else 0
            pos = text.find(wb, frm)
            pos = None if pos < 0 else pos
        else:
            pos = _partial_stop(text, wb)
        if pos is not None and (stop_pos is None or pos < stop_pos):
            if full:
                s.stop = STOP_WORD
                s.stopping_word = w
            stop_pos = pos
    return stop_pos
