"""Slot management, as llama-server's ``server_context`` does it: which slot a task gets
(``get_available_slot``: the requested id, the best prompt similarity, else the least recently used), the
host-memory prompt cache around that choice (``prompt_save`` / ``prompt_load``, :mod:`.prompt_cache`), launching a
task and its ``n > 1`` children (``launch_slot_with_task``: samplers and grammar built), and releasing slots.

:class:`SlotScheduler` is a part of :class:`~.engine.Engine` (a mixin: it uses the engine's context, slots and
queue); the batch it feeds is :mod:`.batch`.

Example:
    >>> _trigger_args([{"type": 1, "value": "<tool_call>"}, {"type": 0, "value": "", "token": 7}])
    (['<tool_call>'], [7])
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from llama_cpp import llama_cpp as L

from sampler import Sampler
from sampler.reasoning_budget import INT_MAX, ReasoningBudget

from ..errors import ConstrainedError, TriggerPatternBudgetError
from ..grammar import Grammar
from ..llama.slot import common_prefix
from .errors import HttpError
from .slot_actions import SlotAction
from .slots import Slot, Task

__all__ = ["SlotScheduler"]


class SlotScheduler:
    """Picking, launching and releasing slots (methods of :class:`~.engine.Engine`)."""

    cfg: Any
    ctx: Any
    mem: Any
    slots: list[Slot]
    prompt_cache: Any
    kv_unified: bool
    n_vocab: int
    vocab: Any
    metrics: dict[str, Any]
    _pending: list[Task]
    _deferred: list[Task]
    _tick: int
    _slot_action: Any
    _debug: Any

    def _pick_slot(self, task: Task, taken: set[int]) -> Slot | None:
        # get_available_slot: the requested id, else the best LCP similarity, else the least recently used; a
        # slot taken by LRU, or about to keep under half of its context, goes through the prompt cache
        ret = None
        update_cache = False
        want = task.params.id_slot
        if want != -1:
            # get_slot_by_id: out-of-range ids wrap around (``id_slot % slots.size()``, the int converted to
            # size_t, so a negative id wraps from 2^64); the similarity pass below still compares the raw id
            req = [s for s in self.slots if s.id == slot_by_id(want, len(self.slots))]
            if not req or req[0].state != "idle" or req[0].id in taken:
                return None
            ret = req[0]
        free = [s for s in self.slots if s.state == "idle" and s.id not in taken
                and (want == -1 or s.id == want)]
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
            self._debug("updating prompt cache")
            self._prompt_save(ret)
            if not self._prompt_load(ret, task.tokens):
                self._prompt_clear(ret)
            self.prompt_cache.update()
        return ret

    def _prompt_save(self, s: Slot) -> bool:
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

    def _prompt_load(self, s: Slot, tokens: list[int]) -> bool:
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
        """``process_new_tasks``: every pending task offered to the slots in order (a slot released meanwhile
        puts a deferred task at the front, which is offered in this same pass); one that finds no slot is
        deferred, and offered again only when a slot is released (:meth:`_release`)."""
        while self._pending:
            task = self._pending.pop(0)
            if task.cancelled:
                continue
            try:
                done = self._slot_action(task) if isinstance(task, SlotAction) else self._launch_task(task)
                if not done:
                    self._deferred.append(task)
            except Exception as e:  # noqa: BLE001 - one task's failure (slot choice, prompt cache) is its own
                for t in (task, *task.children):
                    for s in self.slots:
                        if s.task is t:
                            self._release(s)
                    self._error(t, HttpError(f"got exception: {str(e) or type(e).__name__}", "server_error"))
        self._deferred = [t for t in self._deferred if not t.cancelled]
        self.metrics["requests_deferred"] = len(self._deferred)

    def _launch_task(self, task: Task) -> bool:
        """One task (and its children) onto slots (``process_single_task``); False when it must wait."""
        parent = self._pick_slot(task, set())
        if parent is None:
            return False
        if task.children:
            # get_free_slots: the children take the first free slots by id, the parent's excluded
            kids = [s for s in self.slots if s.state == "idle" and s.id != parent.id][: len(task.children)]
            if len(kids) < len(task.children):
                return False
            # launch_slots_with_parent_task: the children first, then the parent; a failure releases the slots
            # this group already took, and the task is dropped (its error already sent)
            launched: list[Slot] = []
            for s, t in [*zip(kids, task.children, strict=True), (parent, task)]:
                if not self._launch_guarded(s, t):
                    for x in launched:
                        if x.task is not None:
                            self._release(x)
                    return True
                launched.append(s)
        elif not self._launch_guarded(parent, task):
            return True
        if self.prompt_cache is not None and self.cfg.cache_idle_slots:
            for s in self.slots:                 # the idle slots saved (and cleared when unified)
                if s.state == "idle":
                    if self._prompt_save(s):
                        self._debug(f"slot {s.id}: __TEST_TAG_CACHE_IDLE_SLOT__")
                        self.prompt_cache.update()
                    if self.kv_unified:
                        self._prompt_clear(s)
        return True

    def _launch_guarded(self, slot: Slot, task: Task) -> bool:
        """:meth:`_launch`, with any failure left (a bug, or a failure outside the sampler's set-up) answering
        this task alone with a 500 and leaving its slot idle."""
        try:
            return self._launch(slot, task)
        except Exception as e:  # noqa: BLE001
            if slot.task is task:
                self._release(slot)
            else:
                slot.state = "idle"
            self._error(task, HttpError(f"got exception: {str(e) or type(e).__name__}", "server_error"))
            return False

    def _launch(self, slot: Slot, task: Task) -> bool:
        # launch_slot_with_task: token ids checked, samplers (and grammar) built
        slot.reset_gen()
        p = task.params
        if _invalid_tokens(task.tokens, self.n_vocab):
            self._error(task, HttpError("Prompt contains invalid tokens", "invalid_request_error"))
            return False
        if task.kind != "completion":          # an embedding or rerank task samples nothing
            slot.task = task
            slot.state = "started"
            self.metrics["requests_processing"] = sum(s.task is not None for s in self.slots)
            return True
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
            slot.sampler.rbudget = self._reasoning_budget(p)
        except TriggerPatternBudgetError as e:   # ours (llama-server takes it and may backtrack for minutes)
            self._error(task, HttpError(f"Failed to initialize samplers: {e}", "invalid_request_error"))
            return False
        except ConstrainedError:
            self._error(task, HttpError("Failed to initialize samplers: failed to parse grammar",
                                        "invalid_request_error"))
            return False
        except ValueError as e:
            self._error(task, HttpError(f"Failed to initialize samplers: {e}", "invalid_request_error"))
            return False
        except Exception as e:  # noqa: BLE001 - common_sampler_init's catch: any failure answers this task alone
            what = ("nested too deeply (recursion limit reached)" if isinstance(e, RecursionError) else
                    "out of memory" if isinstance(e, MemoryError) else str(e) or type(e).__name__)
            self._error(task, HttpError(f"Failed to initialize samplers: {what}", "server_error"))
            return False
        slot.task = task
        slot.state = "wait_other" if task.parent is not None else "started"
        self.metrics["requests_processing"] = sum(s.task is not None for s in self.slots)
        return True

    def _prefill_tokens(self, gen_prompt: str) -> list[int]:
        """``common_sampler_init``'s prefill tokens: the generation prompt tokenized with specials, a leading space
        token the tokenizer adds before a special token skipped."""
        out = []
        for i, t in enumerate(self.tokenize(gen_prompt, False, True) if gen_prompt else []):
            piece = self.piece(t, True)
            if i == 0 and piece[:1].isspace() and not gen_prompt[:1].isspace():
                continue
            out.append(t)
        return out

    def _prefill(self, matcher: Any, gen_prompt: str) -> None:
        """``common_sampler_init``: the generation prompt's tokens fed to the grammar."""
        for t in self._prefill_tokens(gen_prompt):
            if not matcher.accept_token(t):
                raise ValueError("grammar prefill failed for the generation prompt")

    def _reasoning_budget(self, p: Any) -> Any:
        """``common_sampler_init``'s reasoning-budget sampler: built when the start and end tags are known and the
        grammar is lazy, a budget is set or ``reasoning_control`` is on (INT_MAX for an unlimited budget), then
        fed the generation prompt's tokens (a prompt that opens the thinking block starts it counting)."""
        if not (p.reasoning_budget_start and p.reasoning_budget_end
                and (p.grammar_lazy or p.reasoning_budget_tokens >= 0 or p.reasoning_control)):
            return None
        budget = INT_MAX if p.reasoning_budget_tokens < 0 else p.reasoning_budget_tokens
        rb = ReasoningBudget([p.reasoning_budget_start], p.reasoning_budget_end, p.reasoning_budget_forced, budget,
                             piece=lambda t: self.piece(t, False))
        for t in self._prefill_tokens(p.generation_prompt):
            rb.accept(t)
        return rb

    def _release(self, slot: Slot) -> None:
        """``server_slot::release``: a processing slot stamped as just used (the LRU order of the next choice),
        a child's context dropped, and one deferred task offered again (``pop_deferred_task``)."""
        if slot.task is None and slot.state == "idle":
            return
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
        self._pop_deferred(slot.id)

    def _pop_deferred(self, id_slot: int) -> None:
        """``server_queue::pop_deferred_task``: the first deferred task that asked for this slot (its raw
        ``id_slot``), else the oldest one, put at the front of the pending tasks."""
        waiting = [t for t in self._deferred if not t.cancelled]
        if len(waiting) != len(self._deferred):
            self._deferred = waiting
        if not self._deferred:
            return
        i = next((k for k, t in enumerate(self._deferred) if t.params.id_slot == id_slot), 0)
        self._pending.insert(0, self._deferred.pop(i))

    def _prompt_clear(self, s: Slot) -> None:
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


def _invalid_tokens(tokens: Any, n_vocab: int) -> bool:
    """``validate``: a token id outside the vocabulary (a numpy prompt checked at once)."""
    if isinstance(tokens, np.ndarray):
        return bool(len(tokens)) and bool((tokens < 0).any() or (tokens >= n_vocab).any())
    return any(not 0 <= t < n_vocab for t in tokens)


def slot_by_id(id_slot: int, n_slots: int) -> int:
    """``get_slot_by_id``'s index: ``id_slot % slots.size()`` with the int converted to ``size_t`` first.

    Example:
        >>> slot_by_id(99, 4), slot_by_id(-5, 4), slot_by_id(-5, 3), slot_by_id(2, 4)
        (3, 3, 2, 2)
    """
    return (id_slot % (1 << 64)) % n_slots


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
