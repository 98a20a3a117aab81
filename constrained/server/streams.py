"""Resumable streams, as llama-server's ``server-stream.cpp``: a completion request that carries an
``X-Conversation-Id`` header tees its SSE bytes into a session buffer kept under that id, and its generation goes on
when the client goes away; ``GET /v1/stream?conv_id=ID&from=N`` replays the bytes from offset ``N`` and follows the
live ones until the generation ends, ``POST /v1/streams/lookup`` tells the state of the ids asked for (never
others), ``DELETE /v1/stream?conv_id=ID`` cancels the generation and drops the buffer.

One session per id (a new request with the same id cancels the previous one); a buffer keeps the last 4 MiB
(``from`` below what was dropped is refused); a finished session is dropped 300 s after it ended (llama-server's
collector runs every 60 s, so there it may live up to 60 s longer). A request that does not stream (or fails before
its first event) leaves no session.

Example:
    >>> m = StreamSessions()
    >>> s = m.create_or_replace("c1")
    >>> s.append(b"data: 1\\n\\n"); s.finalize()
    True
    >>> [x["conversation_id"] for x in m.lookup(["c1", "c2"])], s.total_size
    (['c1'], 9)
    >>> stoull("  12x"), stoull("-1") == 2**64 - 1
    (12, True)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["MAX_BYTES", "TTL_SECONDS", "StreamSession", "StreamSessions", "stoull"]

MAX_BYTES = 4 * 1024 * 1024
TTL_SECONDS = 300


class StreamSession:
    """One generation's SSE bytes (the last :data:`MAX_BYTES` of them), readable from any offset still held."""

    def __init__(self, conversation_id: str, cap: int = MAX_BYTES) -> None:
        self.conversation_id = conversation_id
        self.started_at = int(time.time())
        self.completed_at = 0
        self.done = False
        self.cancelled = False
        self.dropped = 0
        self._buf = bytearray()
        self._cap = cap
        self._changed = asyncio.Event()

    @property
    def total_size(self) -> int:
        """Bytes that ever entered the session."""
        return self.dropped + len(self._buf)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def append(self, data: bytes) -> bool:
        """Add bytes (the oldest dropped past the cap); False once the session is done."""
        if not data:
            return True
        if self.done:
            return False
        if len(data) >= self._cap:
            skip = len(data) - self._cap
            self.dropped += len(self._buf) + skip
            self._buf = bytearray(data[skip:])
        else:
            over = len(self._buf) + len(data) - self._cap
            if over > 0:
                del self._buf[:over]
                self.dropped += over
            self._buf += data
        self._wake()
        return True

    def finalize(self) -> None:
        """No more bytes: readers drain what is left and end."""
        if not self.done:
            self.done = True
            self.completed_at = int(time.time())
            self._wake()

    def cancel(self) -> None:
        """Ask the producer to stop (it also stops the generation)."""
        self.cancelled = True
        self._wake()

    async def read(self, offset: int, should_stop: Callable[[], bool] = lambda: False) -> AsyncIterator[bytes]:
        """The bytes from ``offset`` on, as they arrive, until the session is done (``read_from``)."""
        while True:
            if should_stop():
                return
            if offset < self.dropped:
                return
            end = self.dropped + len(self._buf)
            if offset < end:
                chunk = bytes(self._buf[offset - self.dropped:])
                offset += len(chunk)
                yield chunk
                continue
            if self.done:
                return
            ev = self._changed
            try:
                await asyncio.wait_for(ev.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    def info(self) -> dict[str, Any]:
        """The lookup entry of this session."""
        return {"conversation_id": self.conversation_id, "is_done": self.done, "total_bytes": self.total_size,
                "started_at": self.started_at, "completed_at": self.completed_at}


class StreamSessions:
    """The live sessions by conversation id (one each)."""

    def __init__(self) -> None:
        self._s: dict[str, StreamSession] = {}

    def _gc(self) -> None:
        cutoff = int(time.time()) - TTL_SECONDS
        for k in [k for k, s in self._s.items() if s.completed_at != 0 and s.completed_at <= cutoff]:
            self._s.pop(k).finalize()

    def create_or_replace(self, conversation_id: str) -> StreamSession:
        """A fresh session for the id; a previous one is cancelled and finalized."""
        self._gc()
        prev = self._s.get(conversation_id)
        fresh = StreamSession(conversation_id)
        self._s[conversation_id] = fresh
        if prev is not None:
            prev.cancel()
            prev.finalize()
        return fresh

    def get(self, conversation_id: str) -> StreamSession | None:
        self._gc()
        return self._s.get(conversation_id)

    def evict(self, conversation_id: str, session: StreamSession | None = None) -> None:
        """Drop the id's session (only ``session`` if given: a newer one under the same id stays)."""
        s = self._s.get(conversation_id)
        if s is None or (session is not None and s is not session):
            return
        del self._s[conversation_id]
        s.finalize()

    def evict_and_cancel(self, conversation_id: str) -> bool:
        """The explicit stop: cancel and drop; False when there was no such session."""
        s = self._s.pop(conversation_id, None)
        if s is None:
            return False
        s.cancel()
        s.finalize()
        return True

    def lookup(self, ids: list[str]) -> list[dict[str, Any]]:
        """The sessions of the ids asked for, in that order: each id matches itself and ``<id>::<model>``."""
        self._gc()
        out = []
        for rid in ids:
            for s in list(self._s.values()):
                if s.conversation_id == rid or s.conversation_id.startswith(rid + "::"):
                    out.append(s.info())
        return out

    def stop_all(self) -> None:
        for s in self._s.values():
            s.finalize()
        self._s.clear()


def stoull(text: str) -> int:
    """``std::stoull``: leading blanks, an optional sign (``-`` wraps modulo 2^64), the longest run of decimal
    digits; no digits or a value past 2^64 - 1 raises ``ValueError``."""
    i = 0
    while i < len(text) and text[i] in " \t\n\v\f\r":
        i += 1
    neg = False
    if i < len(text) and text[i] in "+-":
        neg = text[i] == "-"
        i += 1
    j = i
    while j < len(text) and "0" <= text[j] <= "9":
        j += 1
    if j == i:
        raise ValueError("stoull")
    v = int(text[i:j])
    if v > 2**64 - 1:
        raise ValueError("stoull")
    return (-v) % 2**64 if neg else v

