"""The message rewrite llama-server applies for outdated Gemma 4 templates (``workaround::convert_tool_responses_gemma4``,
common/parsers/gemma4.cpp:1-147): those templates read tool results from the assistant turn's ``tool_responses``
field, not from ``tool`` messages, so an assistant message with tool calls, the ``tool`` messages after it and a
final assistant answer become one assistant message with ``tool_calls``, ``tool_responses`` (``{"name",
"response"}``: the content parsed as JSON when it is JSON, the matching call's name or else the ``tool_call_id``),
the answer's ``content`` and the first message's ``reasoning_content``.

Applied when the template writes ``'<|tool_call>call:'`` but lacks the current templates' ``{#- OpenAI Chat
Completions:`` note (``common_chat_try_specialized_template``, chat.cpp:1193-1202).

Example:
    >>> msgs = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
    ...     "name": "now", "arguments": {}}}]}, {"role": "tool", "content": '{"t": 1}'},
    ...     {"role": "assistant", "content": "It is 1."}]
    >>> convert_tool_responses(msgs)
    [{'role': 'assistant', 'tool_calls': [{'type': 'function', 'function': {'name': 'now', 'arguments': {}}}], 'tool_responses': [{'name': 'now', 'response': {'t': 1}}], 'content': 'It is 1.'}]
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["applies_to", "convert_tool_responses"]


def applies_to(source: str) -> bool:
    """The template is an outdated Gemma 4 one (chat.cpp:1194-1195).

    >>> applies_to("{{ '<|tool_call>call:' }}"), applies_to("{#- OpenAI Chat Completions: #}{{ '<|tool_call>call:' }}")
    (True, False)
    """
    return "'<|tool_call>call:'" in source and "{#- OpenAI Chat Completions:" not in source


def _has_calls(m: dict[str, Any]) -> bool:
    return isinstance(m.get("tool_calls"), list) and bool(m["tool_calls"])


def _has_content(m: dict[str, Any]) -> bool:
    c = m.get("content")
    return (isinstance(c, str) and bool(c)) or (isinstance(c, list) and bool(c))


def _reject_constant(name: str) -> Any:
    raise ValueError(name)                 # nlohmann's parser has no NaN / Infinity


def _response(content: Any) -> Any:
    # collect_result: a string content parsed as JSON, else kept as it is
    if isinstance(content, str):
        try:
            return json.loads(content, parse_constant=_reject_constant)
        except ValueError:
            return content
    return content


def _turn(msgs: list[dict[str, Any]], pos: int) -> tuple[dict[str, Any], int]:
    # gemma4_model_turn_builder::collect / build
    first = msgs[pos]
    calls = list(first["tool_calls"])
    reasoning = first.get("reasoning_content") if isinstance(first.get("reasoning_content"), str) else None
    pos += 1
    responses: list[dict[str, Any]] = []
    while pos < len(msgs) and msgs[pos].get("role") == "tool":
        cur = msgs[pos]
        name = ""
        if len(responses) < len(calls) and isinstance(calls[len(responses)], dict):
            f = calls[len(responses)].get("function")
            name = f.get("name", "") if isinstance(f, dict) else ""
        if not name:
            name = cur.get("tool_call_id", "") or ""
        responses.append({"name": name, "response": _response(cur["content"]) if "content" in cur else None})
        pos += 1
    content = None
    if pos < len(msgs) and msgs[pos].get("role") == "assistant":
        nxt = msgs[pos]
        if not _has_calls(nxt) and _has_content(nxt):
            content = nxt["content"]
            pos += 1
    out: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
    if responses:
        out["tool_responses"] = responses
    if content is not None:
        out["content"] = content
    if reasoning is not None:
        out["reasoning_content"] = reasoning
    return out, pos


def convert_tool_responses(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``convert_tool_responses_gemma4``: each assistant message with tool calls merged with its results (and a final
    answer) into one assistant message; the other messages kept."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if m.get("role") != "assistant" or not _has_calls(m):
            out.append(m)
            i += 1
            continue
        turn, i = _turn(msgs, i)
        out.append(turn)
    return out
