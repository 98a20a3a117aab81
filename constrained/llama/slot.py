"""What a llama-server slot reuses of its cache and how it cuts a prompt into batches (pure bookkeeping, no model).

llama-server's ``update_slots`` (tools/server/server-context.cpp at 0c1e57098) decides, for each new prompt:

1. ``n_past``, the cached tokens it keeps: the longest common prefix with what the slot holds
   (``cache_prompt``), cut back to a context checkpoint when the model has a sliding window whose cache no longer
   covers the prefix (:func:`plan_reuse`, server-context.cpp:3198-3390), and at least one token left to evaluate;
2. where each prompt batch ends: at most ``n_batch`` tokens, and for SWA models (``n_swa > 0``, i.e. not
   ``--swa-full``) with checkpoints on, a break ``4 + n_ubatch`` and ``4`` tokens before the end of the prompt
   (:func:`next_batch_end`, server-context.cpp:3511-3560);
3. before decoding a batch, whether to save a checkpoint of the sliding-window cache (:func:`checkpoint_decision`,
   server-context.cpp:3566-3616, ``create_checkpoint`` :2290).

``constrained.llama`` drives a llama.cpp context with these functions; the server (``constrained.server``) may use
them for its slots.

Example:
    >>> prompt_batches(20, 0, n_batch=2048, n_ubatch=512, checkpoints=True)
    [16, 4]
    >>> prompt_batches(1200, 0, n_batch=2048, n_ubatch=512, checkpoints=True)
    [684, 512, 4]
    >>> prompt_batches(3000, 0, n_batch=2048, n_ubatch=512, checkpoints=False)
    [2048, 952]
    >>> cps = [Checkpoint(n_tokens=16, pos_min=0, pos_max=15, task_id=1)]
    >>> plan_reuse(list(range(25)), list(range(20)) + [99], cps, cache_prompt=True, n_swa=512, pos_min=0)
    (15, Checkpoint(n_tokens=16, pos_min=0, pos_max=15, task_id=1))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Checkpoint", "add_checkpoint", "checkpoint_decision", "common_prefix", "next_batch_end", "plan_reuse",
           "prompt_batches"]


@dataclass
class Checkpoint:
    """``server_prompt_checkpoint``: the sliding-window cache saved before the batch starting at ``n_tokens``."""

    n_tokens: int
    pos_min: int
    pos_max: int
    task_id: int
    data: bytes | None = field(default=None, repr=False)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """``server_tokens::get_common_prefix`` for text tokens (either may be a numpy array: compared at once).

    Example:
        >>> common_prefix([1, 2, 3], [1, 2, 4, 5])
        2
    """
    n = min(len(a), len(b))
    if n and (hasattr(a, "dtype") or hasattr(b, "dtype")):
        import numpy as np

        diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
        return int(diff[0]) if len(diff) else n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan_reuse(cached: Sequence[int], prompt: Sequence[int], checkpoints: list[Checkpoint], *, cache_prompt: bool,
               n_swa: int, pos_min: int) -> tuple[int, Checkpoint | None]:
    """``(n_past, checkpoint to restore or None)`` for ``prompt`` on a slot holding ``cached``.

    ``pos_min`` is ``llama_memory_seq_pos_min`` of the slot's sequence before anything is removed (-1 if empty);
    ``n_swa`` is 0 for models without a sliding window and with ``--swa-full``. Checkpoints the new prompt
    invalidates are dropped from ``checkpoints`` in place (server-context.cpp:3370).
    """
    n_prompt = len(prompt)
    restore: Checkpoint | None = None
    n_past = common_prefix(cached, prompt) if cache_prompt else 0
    pos_next = n_past
    has_new = n_past < n_prompt
    thold = max(0, pos_next - n_swa - (0 if has_new else 1))     # the largest pos_min a checkpoint may have
    if 0 < n_past <= len(cached) and pos_min >= thold:
        for cp in reversed(checkpoints):
            if cp.pos_max > pos_next:                # [TAG_CHECKPOINTS_FIX_POS_MIN]
                continue
            if cp.pos_min < thold or cp.pos_min == 0:
                restore = cp
                break
        if restore is None:                          # no usable checkpoint: the whole prompt is evaluated again
            pos_next = n_past = 0
        else:
            pos_next = min(pos_next, max(restore.pos_min + 1, restore.pos_max))
            n_past = min(pos_next, restore.n_tokens)
    checkpoints[:] = [cp for cp in checkpoints if cp.pos_max <= pos_next]
    if n_past == n_prompt and n_past > 0:            # [TAG_PROMPT_LOGITS]: evaluate at least one token
        n_past -= 1
    return n_past, restore


def next_batch_end(n_done: int, n_prompt: int, *, n_batch: int, n_ubatch: int, checkpoints: bool) -> int:
    """The prompt index where the batch starting at ``n_done`` ends (``checkpoints``: the SWA checkpoint breaks)."""
    i = n_done
    while i < n_prompt and i - n_done < n_batch:
        i += 1
        if checkpoints and any(n_prompt == i + min(n_batch, off) for off in (4 + n_ubatch, 4)):
            break
    return i


def prompt_batches(n_prompt: int, n_past: int, *, n_batch: int, n_ubatch: int, checkpoints: bool) -> list[int]:
    """The sizes of the successive ``llama_decode`` calls for the prompt tokens ``[n_past, n_prompt)``."""
    out = []
    i = n_past
    while i < n_prompt:
        j = next_batch_end(i, n_prompt, n_batch=n_batch, n_ubatch=n_ubatch, checkpoints=checkpoints)
        out.append(j - i)
        i = j
    return out


def checkpoint_decision(checkpoints: Sequence[Checkpoint], n_start: int, n_end: int, n_prompt: int, *,
                        n_ubatch: int, pos_min: int, min_step: int) -> bool:
    """Whether llama-server saves a checkpoint before decoding the prompt batch ``[n_start, n_end)``.

    Call only when checkpoints are on (``--ctx-checkpoints`` > 0 and ``n_swa`` > 0). ``pos_min`` is the sequence's
    lowest cached position before this batch (-1: nothing cached yet, no checkpoint).
    """
    near_end = n_prompt < n_end + n_ubatch
    if n_end != n_prompt and not near_end:
        return False
    if pos_min < 0:
        return False
    return not checkpoints or near_end or n_start > checkpoints[-1].n_tokens + min_step


def add_checkpoint(checkpoints: list[Checkpoint], new: Checkpoint, *, max_checkpoints: int, min_step: int) -> None:
    """``create_checkpoint``'s bookkeeping: evictions, then ``new`` appended (in place)."""
    last = -1
    i = 0
    while len(checkpoints) + 1 >= max_checkpoints and i < len(checkpoints):   # the loop condition is re-read
        cp = checkpoints[i]
        if cp.task_id != new.task_id and last >= 0 and cp.n_tokens <= last + min_step:
            del checkpoints[i]
            continue
        last = cp.n_tokens
        i += 1
    while len(checkpoints) >= max_checkpoints:
        checkpoints.pop(0)
    checkpoints[:] = [cp for cp in checkpoints if cp.n_tokens != new.n_tokens]
    checkpoints.append(new)
