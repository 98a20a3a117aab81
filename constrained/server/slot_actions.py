"""Slot persistence, as llama-server's ``POST /slots/{id}?action=save|restore|erase`` (``--slot-save-path``): a
slot's KV sequence and prompt tokens written to a file (``llama_state_seq_save_file``, the same file llama-server
writes: the tokens packed as ``server_tokens::serialize`` packs them), read back into a slot
(``llama_state_seq_load_file``), or erased. The action runs on the model thread between two iterations; a busy slot
defers it until the slot is released, as any task that needs a busy slot.

Example:
    >>> valid_filename("agent.bin"), valid_filename("../x"), valid_filename("a/b"), valid_filename("x.")
    (True, False, False, False)
    >>> parse_slot_id(" 2x"), parse_slot_id("abc"), parse_slot_id("99999999999")
    (2, None, None)
    >>> unpack_tokens(pack_tokens([5, 6]))
    [5, 6]
"""

from __future__ import annotations

import ctypes
import re
import time
from collections.abc import Callable
from typing import Any

from llama_cpp import llama_cpp as L

from .errors import HttpError
from .slots import Slot

__all__ = ["SlotAction", "SlotActions", "pack_tokens", "parse_slot_id", "unpack_tokens", "valid_filename"]

_TOKEN_NULL = -1             # LLAMA_TOKEN_NULL: the marker of the packed format
_STATE_VERSION = 1           # SERVER_TOKENS_STATE_VERSION
_INT_RE = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def parse_slot_id(text: str) -> int | None:
    """``std::stoi`` of the path's id: leading whitespace, a sign, digits, anything after ignored; None where
    stoi throws (no digits, outside an int)."""
    m = _INT_RE.match(text)
    if m is None:
        return None
    v = int(m.group(1))
    return v if -(1 << 31) <= v < (1 << 31) else None


def valid_filename(name: str) -> bool:
    """``fs_validate_filename(name)`` (no sub-directories): 1-255 bytes of UTF-8 without control characters,
    ``/ \\ : * ? " < > |`` or their look-alikes, surrogates, U+FFFD, a BOM; no leading or trailing space, no
    trailing dot, no ``..``, not ``.``."""
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError:         # a lone surrogate
        return False
    if not 0 < len(b) <= 255:
        return False
    for ch in name:
        c = ord(ch)
        if (c <= 0x1F or c == 0x7F or 0x80 <= c <= 0x9F or c in (0xFF0E, 0x2215, 0x2216, 0xFFFD, 0xFEFF)
                or 0xD800 <= c <= 0xDFFF or ch in ':*?"<>|/\\'):
            return False
    if name[0] == " " or name[-1] in " .":
        return False
    return ".." not in name and name != "."


def pack_tokens(tokens: list[int]) -> list[int]:
    """``server_tokens::serialize`` for text tokens: the marker, the version, the tokens with their count, no
    media."""
    return [_TOKEN_NULL, _STATE_VERSION, len(tokens), *tokens, 0]


def unpack_tokens(packed: list[int]) -> list[int]:
    """``server_tokens::deserialize`` without a projector: a plain token list (older files), or the packed format;
    raises ``ValueError`` with llama-server's text."""
    if not packed or packed[0] != _TOKEN_NULL:
        return list(packed)
    pos = 1

    def read() -> int:
        nonlocal pos
        if pos >= len(packed):
            raise ValueError("Unexpected end of server tokens state")
        pos += 1
        return packed[pos - 1] & 0xFFFFFFFF

    if read() != _STATE_VERSION:
        raise ValueError("Unsupported server tokens state version")
    n = read()
    if n > len(packed) - pos:
        raise ValueError("Unexpected end of server tokens state")
    tokens = [t if t < (1 << 31) else t - (1 << 32) for t in packed[pos:pos + n]]
    pos += n
    if read() != 0:                      # media start indices: a file with images needs an mmproj
        raise ValueError("Cannot restore media tokens without an mmproj")
    if len(packed) - pos >= 1:
        raise ValueError("Trailing data in server tokens state")
    return tokens


class _NoSlotParams:
    id_slot = -1                         # pop_deferred_task compares task.id_slot: never set for slot actions


class SlotAction:
    """``SERVER_TASK_TYPE_SLOT_SAVE`` / ``_RESTORE`` / ``_ERASE``: ``emit`` gets the result JSON or an
    :class:`~.errors.HttpError`."""

    params = _NoSlotParams()

    def __init__(self, kind: str, id_slot: int, emit: Callable[[Any], None], filename: str = "",
                 filepath: str = "") -> None:
        self.kind = kind
        self.id_slot = id_slot
        self.filename = filename
        self.filepath = filepath
        self.emit = emit
        self.children: list[Any] = []
        self.parent = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SlotActions:
    """The actions run on the model thread (methods of :class:`~.engine.Engine`)."""

    ctx: Any
    mem: Any
    slots: list[Slot]
    n_vocab: int
    _prompt_clear: Callable[[Slot], None]      # the scheduler's: the sequence and its tokens dropped

    def _slot_action(self, a: SlotAction) -> bool:
        """One action; False when its slot is busy (the action is deferred)."""
        # get_slot_by_id: id_slot % slots.size(), the int converted to size_t (the scheduler's slot_by_id)
        slot = self.slots[(a.id_slot % (1 << 64)) % len(self.slots)]
        if slot.state != "idle":
            return False
        t0 = time.perf_counter_ns() // 1000
        if a.kind == "erase":
            n = len(slot.tokens)
            self._prompt_clear(slot)
            a.emit({"id_slot": a.id_slot, "n_erased": n})
            return True
        if a.kind == "save":
            packed = pack_tokens(slot.tokens)
            arr = (L.llama_token * len(packed))(*packed)
            nwrite = int(L.llama_state_seq_save_file(self.ctx, a.filepath.encode(), slot.id, arr, len(packed)))
            if nwrite == 0:
                a.emit(HttpError("Unable to save slot", "server_error"))
                return True
            ms = (time.perf_counter_ns() // 1000 - t0) / 1000.0
            a.emit({"id_slot": a.id_slot, "filename": a.filename, "n_saved": len(slot.tokens), "n_written": nwrite,
                    "timings": {"save_ms": ms}})
            return True
        try:
            path = a.filepath.encode()
            n_packed = ctypes.c_size_t(0)
            nread = int(L.llama_state_seq_load_file(self.ctx, path, slot.id, None, 0, ctypes.byref(n_packed)))
            packed: list[int] = []
            if nread != 0:
                buf = (L.llama_token * max(1, n_packed.value))()
                nread = int(L.llama_state_seq_load_file(self.ctx, path, slot.id, buf, len(buf),
                                                        ctypes.byref(n_packed)))
                packed = list(buf[:n_packed.value])
            if nread == 0:
                raise ValueError("No available space in KV cache or invalid slot save file")
            tokens = unpack_tokens(packed)
            if len(tokens) > slot.n_ctx:
                raise ValueError("Restored prompt does not fit in the slot context")
            if any(not 0 <= t < self.n_vocab for t in tokens):
                raise ValueError("Invalid tokens in slot save file")
            slot.tokens = tokens
            slot.checkpoints = []
        except ValueError as e:
            self._prompt_clear(slot)
            a.emit(HttpError(f"Unable to restore slot: {e}", "invalid_request_error"))
            return True
        ms = (time.perf_counter_ns() // 1000 - t0) / 1000.0
        a.emit({"id_slot": a.id_slot, "filename": a.filename, "n_restored": len(slot.tokens), "n_read": nread,
                "timings": {"restore_ms": ms}})
        return True
