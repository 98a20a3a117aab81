"""What the worker and the HTTP layer exchange, and what a slot holds: llama-server's ``server_task``,
``completion_token_output``, its partial and final results, and ``server_slot``'s generation state.

:class:`Task` is queued by the HTTP layer (:meth:`.engine.Engine.submit`); the worker answers through
``task.emit`` with :class:`Partial` (streamed tokens, the begin signal, prompt progress), :class:`Final` or an
:class:`~.errors.HttpError`. :class:`Slot` is one KV sequence: its tokens and checkpoints (kept across tasks, for
prompt reuse) and the running generation (reset by :meth:`Slot.reset_gen`).

Example:
    >>> s = Slot(0, 512); s.reset_gen(); (s.state, s.stop, s.n_decoded)
    ('idle', 'none', 0)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sampler import Sampler

from ..llama.slot import Checkpoint
from .task import TaskParams

__all__ = ["STOP_EOS", "STOP_LIMIT", "STOP_NONE", "STOP_WORD", "Final", "Partial", "Slot", "Task", "TokenOut"]

STOP_NONE, STOP_EOS, STOP_WORD, STOP_LIMIT = "none", "eos", "word", "limit"


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
        self.cmpl_id = ""                     # the response's id (chatcmpl-...): /v1/chat/completions/control
        self.user_starts: list[int] = []      # message spans: where user messages start (checkpoint breaks)
        self.kind = "completion"              # or "embedding" / "rerank" (need_embd: no sampling, no cache reuse)
        self.embd_normalize = 2               # an embedding task's normalisation (common_embd_normalize)

    def cancel(self) -> None:
        self.cancelled = True
        for c in self.children:
            c.cancelled = True


class Slot:
    """``server_slot``: one KV sequence (slot i is sequence i) and the generation running on it."""

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
