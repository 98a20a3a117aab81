"""One iteration of the worker, as llama-server's ``update_slots``: one ``llama_batch`` with the last sampled
token of every generating slot, then pending prompt tokens up to ``n_batch`` (split where llama-server splits
them: ``next_batch_end``, user-message starts, context checkpoints), decoded once; then every slot that finished its
prompt gets its sampler, its ``n > 1`` children a copy of its sequence, and every generating slot samples its row.

:class:`BatchStep` is a part of :class:`~.engine.Engine` (a mixin); sampling is :mod:`.sampling`, slot choice
:mod:`.scheduler`.

Example:
    >>> user_message_starts([1, 5, 6, 2, 5, 6, 3], [("user", [5, 6])])
    [1, 4]
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from llama_cpp import llama_cpp as L

from ..errors import ConstrainedError
from ..llama.slot import Checkpoint, add_checkpoint, checkpoint_decision, next_batch_end, plan_reuse
from .errors import HttpError
from .slots import Partial, Slot, TokenOut

__all__ = ["BatchStep", "user_message_starts"]


class BatchStep:
    """The batch built, decoded and sampled (methods of :class:`~.engine.Engine`)."""

    cfg: Any
    ctx: Any
    mem: Any
    batch: Any
    slots: list[Slot]
    n_batch: int
    n_ubatch: int
    n_swa: int
    checkpoints_on: bool
    ctx_shift: bool
    add_bos: bool
    metrics: dict[str, Any]

    def _step(self) -> None:
        b = self.batch
        n = 0
        out_rows: list[tuple[Slot, int]] = []
        for s in self.slots:
            if s.task is not None and s.task.cancelled:
                self._release(s)
        for s in self.slots:                  # pre_decode: a full slot shifts its context
            if s.state == "generating" and len(s.tokens) + 1 >= s.n_ctx:
                self._context_shift(s)
        # 1. the last sampled token of every generating slot
        for s in self.slots:
            if s.state == "generating":
                n = self._add(n, s.sampled, len(s.tokens), s.id, True)
                s.tokens.append(s.sampled)
                s.i_batch = n - 1
                out_rows.append((s, n - 1))
        # 2. pending prompt tokens (can_batch_with: embedding tasks and the others never share a batch)
        embd_batch: bool | None = False if n else None
        rows: dict[int, list[int]] = {}
        for s in self.slots:
            if s.state == "started":
                try:
                    if not self._start_prompt(s):
                        continue
                except Exception as e:  # noqa: BLE001 - iterate(): this slot alone fails
                    self._slot_failed(s, e)
                    continue
            if s.state != "prompt" or n >= self.n_batch:
                continue
            assert s.task is not None
            need_embd = s.task.kind != "completion"
            if embd_batch is None:
                embd_batch = need_embd
            elif need_embd != embd_batch:
                continue
            n_prompt = len(s.task.tokens)
            start = len(s.tokens)
            if need_embd and not self.embd_can_split and n + n_prompt - start > self.n_batch:
                continue                      # it does not fit in this batch: the next iteration
            ckpt = self.checkpoints_on and not need_embd      # checkpoints of completion tasks only
            end = min(next_batch_end(start, n_prompt, n_batch=self.n_batch, n_ubatch=self.n_ubatch,
                                     checkpoints=ckpt), start + self.n_batch - n)
            us = s.task.user_starts if ckpt else []
            step = self.cfg.checkpoint_min_step
            for p_us in us:                   # break at the last user message, or one past min-step
                if start < p_us < end and (p_us == us[-1] or not s.checkpoints
                                           or p_us > s.checkpoints[-1].n_tokens + step):
                    end = p_us
                    break
            if ckpt:
                pmin = int(L.llama_memory_seq_pos_min(self.mem, s.id))
                if (_checkpoint_with_spans(s.checkpoints, start, end, n_prompt, us, self.n_ubatch, pmin, step)
                        if us else
                        checkpoint_decision(s.checkpoints, start, end, n_prompt, n_ubatch=self.n_ubatch,
                                            pos_min=pmin, min_step=step)):
                    pmax = int(L.llama_memory_seq_pos_max(self.mem, s.id))
                    add_checkpoint(s.checkpoints, Checkpoint(start, pmin, pmax, s.task.id, self._state_get(s.id)),
                                   max_checkpoints=self.cfg.ctx_checkpoints, min_step=self.cfg.checkpoint_min_step)
            rows[s.id] = list(range(n, n + end - start))
            for i in range(start, end):       # an embedding needs every token as an output
                n = self._add(n, s.task.tokens[i], i, s.id, need_embd)
            s.tokens.extend(s.task.tokens[start:end])
            s.n_processed += end - start
            if end == n_prompt:
                b.logits[n - 1] = 1
                s.state = "done_prompt"
                s.i_batch = n - 1
        if n == 0:
            return
        b.n_tokens = n
        if self.cfg.embedding:
            L.llama_set_embeddings(self.ctx, bool(embd_batch))
        t0 = time.perf_counter()
        rc = L.llama_decode(self.ctx, b)
        while rc == 1 and self._clear_idle_slot():   # no room in the KV cache: purge an idle slot, retry
            rc = L.llama_decode(self.ctx, b)
        self.metrics["n_decode_total"] += 1
        # metrics_post_decode: busy slots, and the longest sequence any slot holds after the decode
        self.metrics["n_busy_slots_total"] = self.metrics.get("n_busy_slots_total", 0) + sum(
            s.task is not None for s in self.slots)
        self.metrics["n_tokens_max"] = max(self.metrics["n_tokens_max"], *(len(s.tokens) for s in self.slots))
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
        for s in self.slots:                  # set_prompt_last: a slot's prompt time runs to its latest batch
            if s.state in ("prompt", "done_prompt") and s.task is not None:
                s.t_prompt_done = t1
        for s in self.slots:                  # the prompt progress of every slot on its prompt (server-context.cpp)
            if (s.state in ("prompt", "done_prompt") and s.task is not None and s.task.params.stream
                    and s.task.params.return_progress):
                self._progress(s)
        # prompts done: init the samplers, hand the state to the n > 1 children
        for s in self.slots:
            if s.state == "done_prompt" and s.task is not None and s.task.kind != "completion":
                self._send_embd(s, rows.get(s.id, []))       # send_embedding / send_rerank, then release
                self._release(s)
        for s in self.slots:
            if s.state == "done_prompt":
                assert s.task is not None
                s.t_prompt_done = t1
                self.metrics["prompt_tokens_total"] += s.n_processed
                self.metrics["prompt_seconds_total"] += t1 - s.t_start
                try:
                    self._init_sampler(s)
                except Exception as e:  # noqa: BLE001 - iterate(): this slot (and its children) alone fail
                    for c in s.task.children:
                        cs = next((x for x in self.slots if x.task is c), None)
                        if cs is not None:
                            self._slot_failed(cs, e)
                    self._slot_failed(s, e)
                    continue
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
                    try:
                        self._init_sampler(cs)
                    except Exception as e:  # noqa: BLE001
                        self._slot_failed(cs, e)
                        continue
                    cs.state = "generating"
                    cs.i_batch = s.i_batch
                    out_rows.append((cs, s.i_batch))
        out_rows.sort(key=lambda r: r[0].id)
        for s, row in out_rows:
            if s.task is None or s.state != "generating":
                continue
            try:
                self._sample(s, row, t1 - t0)
            except Exception as e:  # noqa: BLE001 - iterate(): one slot's failure answers that slot alone
                self._slot_failed(s, e)

    def _context_shift(self, s: Slot) -> None:
        """``pre_decode``'s context shift: keep the first ``n_keep`` tokens (the prompt with ``-1``, one more for
        BOS, at most ``n_ctx - 4``), drop ``n_discard`` after them (0: half of the rest, at most all but one), move
        the rest down; the answer says ``truncated``. Refused for ``n > 1`` prompts, or when it is off."""
        task = s.task
        assert task is not None
        if not self.ctx_shift:                # unreachable: process_token stopped the slot before (as llama-server)
            self._error(task, HttpError("context shift is disabled", "server_error"))
            self._release(s)
            return
        if task.children or task.parent is not None:
            self._error(task, HttpError("context shift cannot be used for shared prompt", "server_error"))
            self._release(s)
            return
        p = task.params
        n_keep = len(task.tokens) if p.n_keep < 0 else p.n_keep
        if self.add_bos:
            n_keep += 1
        n_keep = min(s.n_ctx - 4, n_keep)
        n_tokens = len(s.tokens)
        n_left = n_tokens - n_keep
        n_discard = p.n_discard if p.n_discard else int(n_left / 2)    # C's division: toward zero
        n_discard = min(max(n_discard, 0), max(0, n_left - 1))
        L.llama_memory_seq_rm(self.mem, s.id, n_keep, n_keep + n_discard)
        L.llama_memory_seq_add(self.mem, s.id, n_keep + n_discard, n_tokens, -n_discard)
        del s.tokens[n_keep:n_keep + n_discard]
        s.truncated = True

    def _slot_failed(self, s: Slot, e: BaseException) -> None:
        """``iterate``'s catch: the slot's task answered ``500 got exception: <what>``, the slot released (a
        :class:`~.errors.HttpError` raised on the way keeps its own status)."""
        task = s.task
        if task is not None:
            err = e if isinstance(e, HttpError) else HttpError(f"got exception: {_what(e)}", "server_error")
            try:
                self._error(task, err)
            finally:
                self._release(s)
        else:
            s.state = "idle"

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

    def _start_prompt(self, s: Slot) -> bool:
        # SLOT_STATE_STARTED: the prompt length check, the reused prefix, the begin signal
        task = s.task
        assert task is not None
        n_prompt = len(task.tokens)
        if n_prompt == 0:
            self._finish(s)
            return False
        embd = task.kind != "completion"
        if embd and not self.embd_can_split:   # the whole prompt in one ubatch
            err = None
            if n_prompt > self.n_ubatch:
                err = HttpError(f"input ({n_prompt} tokens) is too large to process. increase the physical batch "
                                f"size (current batch size: {self.n_ubatch})", "server_error")
            elif n_prompt > s.n_ctx:
                err = HttpError(f"input ({n_prompt} tokens) is larger than the max context size ({s.n_ctx} "
                                "tokens). skipping", "exceed_context_size_error", n_prompt_tokens=n_prompt,
                                n_ctx=s.n_ctx)
            if err is not None:
                self._error(task, err)
                self._release(s)
                return False
        elif n_prompt >= s.n_ctx:
            self._error(task, HttpError(
                f"request ({n_prompt} tokens) exceeds the available context size ({s.n_ctx} tokens), "
                "try increasing it", "exceed_context_size_error", n_prompt_tokens=n_prompt, n_ctx=s.n_ctx))
            self._release(s)
            return False
        n_swa = self.n_swa if self.checkpoints_on else 0
        # an embedding or rerank task is stateless: nothing of the slot's cache is reused
        n_past, restore = plan_reuse(s.tokens, task.tokens, s.checkpoints,
                                     cache_prompt=task.params.cache_prompt and not embd,
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

    def _progress(self, s: Slot) -> None:
        # send_partial_response(slot, {}, true): an empty token (id 0, no text) with the prompt's progress
        task = s.task
        assert task is not None
        prog = {"total": len(task.tokens), "cache": s.n_cached, "processed": len(s.tokens),
                "time_ms": int((time.perf_counter() - s.t_start) * 1000)}
        task.emit(Partial(task, TokenOut(0, b"", 0.0), s.n_decoded, len(task.tokens), s.n_cached,
                          timings=self._timings(s) if task.params.timings_per_token else None, progress=prog))


def _what(e: BaseException) -> str:
    """An exception's text for an error body (Python's bare recursion message named as what it is)."""
    if isinstance(e, RecursionError):
        return "nested too deeply (recursion limit reached)"
    if isinstance(e, MemoryError):
        return "out of memory"
    return str(e) or type(e).__name__


def _checkpoint_with_spans(cps: list[Checkpoint], start: int, end: int, n_prompt: int, user_starts: list[int],
                           n_ubatch: int, pos_min: int, min_step: int) -> bool:
    """:func:`constrained.llama.slot.checkpoint_decision` with message spans (server-context.cpp:3565-3612): a batch that
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
