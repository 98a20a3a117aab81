"""The stream deltas of a chat reply: the difference between two successive parsed messages, as llama-server sends it.

``common_chat_msg_diff::compute_diffs`` (common/chat.cpp:267-338) and ``server_chat_msg_diff_to_json_oaicompat``
(tools/server/server-chat.cpp:621-649): reasoning, content and the last tool call's arguments may only grow; a new
call is sent whole, with its index.

Example:
    >>> string_diff("Hel", "Hello")
    'lo'
"""

from __future__ import annotations

from typing import Any

from .peg import ChatMessage

__all__ = ["compute_diffs", "diff_json", "string_diff"]


def string_diff(last: str, current: str) -> str:
    """``string_diff`` (chat.cpp:57): the suffix ``current`` adds to ``last``.

    Raises:
        ValueError: ``current`` does not extend ``last`` (llama-server: ``Invalid diff``).
    """
    if not last:
        return current
    if not current.startswith(last):
        if last.startswith(current):
            return ""
        raise ValueError(f"Invalid diff: '{last}' not found at start of '{current}'")
    return current[len(last):]


def compute_diffs(prv: ChatMessage, new: ChatMessage) -> list[dict[str, Any]]:
    """``common_chat_msg_diff::compute_diffs`` as ``server_chat_msg_diff_to_json_oaicompat`` deltas.

    >>> compute_diffs(ChatMessage("Hi"), ChatMessage("Hi there", tool_calls=[("f", "{", "id1")]))
    [{'content': ' there'}, {'tool_calls': [{'index': 0, 'id': 'id1', 'type': 'function', 'function': {'name': 'f', 'arguments': '{'}}]}]
    """
    diffs: list[tuple[str, str, int | None, tuple[str, str, str]]] = []
    if prv.reasoning_content != new.reasoning_content:
        diffs.append((string_diff(prv.reasoning_content, new.reasoning_content), "", None, ("", "", "")))
    if prv.content != new.content:
        diffs.append(("", string_diff(prv.content, new.content), None, ("", "", "")))
    if len(new.tool_calls) < len(prv.tool_calls):
        raise ValueError("Invalid diff: now finding less tool calls!")
    if prv.tool_calls:
        i = len(prv.tool_calls) - 1
        (pn, pa, pid), (nn, na, nid) = prv.tool_calls[i], new.tool_calls[i]
        if pn != nn and pn and nn and not nn.startswith(pn):
            raise ValueError("Invalid diff: tool call mismatch!")
        args = string_diff(pa, na)
        if args or pid != nid or pn != nn:
            changed = pid != nid or pn != nn
            diffs.append(("", "", i, (nn if changed else "", args, nid if changed else "")))
    for i in range(len(prv.tool_calls), len(new.tool_calls)):
        diffs.append(("", "", i, new.tool_calls[i]))
    return [diff_json(*d) for d in diffs]


def diff_json(reasoning: str, content: str, index: int | None, call: tuple[str, str, str]) -> dict[str, Any]:
    """``server_chat_msg_diff_to_json_oaicompat``: one diff as a stream delta."""
    delta: dict[str, Any] = {}
    if reasoning:
        delta["reasoning_content"] = reasoning
    if content:
        delta["content"] = content
    if index is not None:
        name, args, cid = call
        tc: dict[str, Any] = {"index": index}
        if cid:
            tc["id"] = cid
            tc["type"] = "function"
        if name or args:
            fn: dict[str, Any] = {}
            if name:
                fn["name"] = name
            if args:
                fn["arguments"] = args
            tc["function"] = fn
        delta["tool_calls"] = [tc]
    return delta
