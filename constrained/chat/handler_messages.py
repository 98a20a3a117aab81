"""The message rewrites llama-server's specialised handlers apply before rendering (common/parsers/*.cpp), for the
templates they are detected on (``common_chat_try_specialized_template``, chat.cpp:1160-1202).

- Outdated Gemma 4 templates (``workaround::convert_tool_responses_gemma4``, gemma4.cpp:1-147): they read tool results
  from the assistant turn's ``tool_responses`` field, not from ``tool`` messages, so an assistant message with tool
  calls, the ``tool`` messages after it and a final assistant answer become one assistant message with
  ``tool_calls``, ``tool_responses`` (``{"name", "response"}``: the content parsed as JSON when it is JSON, the
  matching call's name or else the ``tool_call_id``), the answer's ``content`` and the first message's
  ``reasoning_content``. Detected by ``'<|tool_call>call:'`` without the current templates' ``{#- OpenAI Chat
  Completions:`` note.
- DeepSeek V4 (``deepseek_v4_sort_tool_results``, deepseek.cpp:1-66): a run of user / tool messages renders as one
  user block, its tool results ordered by the preceding assistant message's call order (matched by id).

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

__all__ = ["adjust", "convert_tool_responses", "sort_tool_results"]


def _outdated_gemma4(source: str) -> bool:
    # chat.cpp:1194-1195
    return "'<|tool_call>call:'" in source and "{#- OpenAI Chat Completions:" not in source


def _deepseek_v4(source: str) -> bool:
    # chat.cpp:1185-1188 (DeepSeek V3.2 / V4), V4 names its block tool_calls (deepseek.cpp:76)
    return "dsml_token" in source and "DSML" in source and "tool_calls" in source and "function_calls" not in source


def adjust(source: str, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rewrite of the handler ``source`` is detected as (the messages unchanged for the others).

    >>> adjust("{{ '<|tool_call>call:' }}", [{"role": "user", "content": "Hi"}])
    [{'role': 'user', 'content': 'Hi'}]
    """
    if _deepseek_v4(source):
        return sort_tool_results(msgs)
    if _outdated_gemma4(source):
        return convert_tool_responses(msgs)
    return msgs


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


def sort_tool_results(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``deepseek_v4_sort_tool_results``: in each run of user / tool messages, the tool results (when more than one)
    stably sorted by the position of their ``tool_call_id`` among the last assistant calls (0 when not found).

    >>> sort_tool_results([{"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
    ...                    {"role": "tool", "tool_call_id": "b", "content": "B"},
    ...                    {"role": "tool", "tool_call_id": "a", "content": "A"}])[1:]
    [{'role': 'tool', 'tool_call_id': 'a', 'content': 'A'}, {'role': 'tool', 'tool_call_id': 'b', 'content': 'B'}]
    """
    out = list(msgs)
    order: dict[str, int] = {}
    i = 0
    while i < len(out):
        role = out[i].get("role", "")
        if role == "assistant" and _has_calls(out[i]):
            order = {}
            for idx, c in enumerate(out[i]["tool_calls"]):
                cid = c.get("id", "") if isinstance(c, dict) else ""
                if isinstance(cid, str) and cid:
                    order[cid] = idx
            i += 1
            continue
        if role not in ("user", "tool"):
            i += 1
            continue
        end = i
        tools: list[int] = []
        while end < len(out):
            r = out[end].get("role", "")
            if r == "tool":
                tools.append(end)
            elif r != "user":
                break
            end += 1
        if len(tools) > 1 and order:
            results = sorted((out[p] for p in tools), key=lambda m: order.get(m.get("tool_call_id", ""), 0))
            for p, m in zip(tools, results, strict=True):
                out[p] = m
        i = end
    return out
