"""The host-memory prompt cache's bookkeeping (``server_prompt_cache``, server-task.cpp:1691-1920) without a model.

The whole cache inside the server is compared with the real llama-server in ``tests/server/test_server_oracle.py`` (both at
the default ``--cache-ram 8192``); these cases pin the rules one at a time.
"""

from __future__ import annotations

from constrained.llama.slot import Checkpoint
from constrained.server.prompt_cache import PromptCache


def _alloc(c: PromptCache, toks: list[int], size: int) -> bool:
    return c.alloc(toks, [], size, lambda: b"s" * size) is not None


def test_contained_prompt_is_not_saved_and_obsolete_ones_are_dropped() -> None:
    c = PromptCache(limit_mib=1, limit_tokens=0)
    assert _alloc(c, [1, 2, 3], 10)
    assert not _alloc(c, [1, 2], 10)              # a prefix of a cached prompt: already there
    assert _alloc(c, [1, 2, 3, 4], 10)            # [1, 2, 3] is contained in it: removed
    assert [s.tokens for s in c.states] == [[1, 2, 3, 4]]


def test_size_limit_drops_the_oldest_and_refuses_oversized_entries() -> None:
    c = PromptCache(limit_mib=1, limit_tokens=0)
    mib = 1024 * 1024
    assert not _alloc(c, [9], mib + 1)            # larger than the whole cache: skipped
    assert _alloc(c, [1], mib // 2)
    assert _alloc(c, [2], mib // 2)
    assert _alloc(c, [3], mib // 2)               # makes room: [1] goes
    assert [s.tokens for s in c.states] == [[2], [3]]


def test_checkpoints_count_in_the_size() -> None:
    c = PromptCache(limit_mib=1, limit_tokens=0)
    ck = [Checkpoint(1, 0, 0, 0, b"c" * 100)]
    e = c.alloc([1, 2], ck, 10, lambda: b"s" * 10)
    assert e is not None and e.size() == 110 and c.size() == 110


def test_token_limit_is_raised_while_the_size_limit_allows() -> None:
    c = PromptCache(limit_mib=0, limit_tokens=4)   # no size limit: the token limit holds as given
    assert _alloc(c, [1, 2, 3], 1)
    assert _alloc(c, [4, 5, 6], 1)
    c.update()
    assert [s.tokens for s in c.states] == [[4, 5, 6]]
    d = PromptCache(limit_mib=1, limit_tokens=4)   # 1 MiB / 1 byte per token: the limit grows past 4
    assert _alloc(d, [1, 2, 3], 3)
    assert _alloc(d, [4, 5, 6], 3)
    d.update()
    assert len(d.states) == 2


def test_find_keeps_more_of_both_prompts_and_never_trashes_large_ones() -> None:
    c = PromptCache(limit_mib=1, limit_tokens=0)
    assert _alloc(c, [1, 2, 3, 4, 5, 6, 7, 8, 9], 1)  # would keep 2 of 9 (< 1/4) for [1, 2, 9]: skipped
    assert _alloc(c, [1, 2, 7], 1)
    best = c.find([], [1, 2, 9])
    assert best is not None and best.tokens == [1, 2, 7]
    assert c.find([1, 2, 5], [1, 2, 9]) is None    # the slot's own prompt keeps as much: no better entry
    c.take(best)
    assert [s.tokens for s in c.states] == [[1, 2, 3, 4, 5, 6, 7, 8, 9]]
