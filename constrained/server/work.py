"""Per-request CPU work kept off the event loop: chat templating, prompt tokenization, grammar and schema
building, tool-call parsing of big replies run in a small, bounded pool of worker threads, so one heavy request
never stops ``/health`` or another client's stream.

Small jobs (a short body) still run inline: a thread hop costs more than they do, and queueing them behind a
heavy job would be the unfairness this module exists to avoid.

Example:
    >>> import asyncio
    >>> asyncio.run(offload(sum, [1, 2, 3]))
    6
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["HEAVY_BYTES", "WORKERS", "offload"]

T = TypeVar("T")

#: bodies (or prompts) at least this big are worked on in the pool
HEAVY_BYTES = 16 * 1024
#: worker threads: at most this many heavy jobs run at once (the rest wait in the pool's queue)
WORKERS = 2

_pools: dict[str, ThreadPoolExecutor] = {}


def _executor(pool: str) -> ThreadPoolExecutor:
    ex = _pools.get(pool)
    if ex is None:
        ex = _pools[pool] = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=f"constrained-{pool}")
    return ex


async def offload(fn: Callable[..., T], *args: Any, heavy: bool = True, pool: str = "setup", **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in the worker pool ``pool`` (inline when ``heavy`` is false); exceptions pass
    through. Request set-up uses ``"setup"``; streamed replies' parsing ``"parse"`` (so a stream's next token never
    waits behind another request's templating)."""
    if not heavy:
        return fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(pool), functools.partial(fn, *args, **kwargs))
