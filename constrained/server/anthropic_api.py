"""``/v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API, as llama-server serves it.

A request is converted to a ``/v1/chat/completions`` body (``server_chat_convert_anthropic_to_oai``,
tools/server/server-chat.cpp:348-619) and then read by the chat path (:func:`.chat_api.chat_params`); the results
are written back as Anthropic messages (``to_json_anthropic``, ``to_json_anthropic_stream``, server-task.cpp:731-984,
1324-1458): the content blocks thinking (index 0), text, then one ``tool_use`` block per call; in a stream the
``message_start`` / ``content_block_*`` / ``message_delta`` / ``message_stop`` events, each written as
``event: <name>`` + ``data: <json>`` (``format_anthropic_sse``), no ``[DONE]``, an error as an ``error`` event.

Deviation (the same on the three chat APIs): ``tool_choice: {"type": "tool", "name": N}`` forces the tool ``N``
(llama-server turns it into ``required``, any tool).

Example:
    >>> b = anthropic_to_chat({"model": "m", "max_tokens": 8, "system": "Be brief.",
    ...                        "messages": [{"role": "user", "content": "Hi"}]})
    >>> b["messages"], b["max_tokens"]
    ([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}], 8)
"""

from __future__ import annotations

import json
from typing import Any

from .errors import HttpError
from .jsonout import dumps
from .slots import STOP_EOS, STOP_WORD, Final, Partial

__all__ = ["AnthropicShape", "anthropic_to_chat", "sse_event"]


def _jv(d: Any, key: str, default: Any, kind: type | tuple[type, ...]) -> Any:
    # json_value: the default when absent, null or of another type
    if not isinstance(d, dict) or d.get(key) is None:
        return default
    v = d[key]
    if kind is int and isinstance(v, bool):
        return default
    return v if isinstance(v, kind) else default


def _billing_header(text: str) -> str:
    # normalize_anthropic_billing_header (server-chat.cpp:326): the 5-character cch stamp becomes "fffff"
    head = "x-anthropic-billing-header:"
    if not text.startswith(head):
        return text
    i = text.find("cch=", len(head))
    if i < 0:
        return text
    j = i + 4
    if j + 5 < len(text) and text[j + 5] == ";":
        return text[:j] + "fffff" + text[j + 5:]
    return text


def _image_url(source: Any) -> str | None:
    st = _jv(source, "type", "", str)
    if st == "base64":
        return f"data:{_jv(source, 'media_type', 'image/jpeg', str)};base64,{_jv(source, 'data', '', str)}"
    if st == "url":
        return _jv(source, "url", "", str)
    return None


def _dump_cpp(v: Any) -> str:
    # nlohmann's dump(): compact, UTF-8 raw
    return dumps(v).decode("utf-8")


def anthropic_to_chat(body: Any) -> dict[str, Any]:
    """``server_chat_convert_anthropic_to_oai``: the chat-completions body an Anthropic request becomes.

    Raises:
        HttpError: ``'messages' is required`` (500, a ``runtime_error`` as in llama-server).
    """
    if not isinstance(body, dict):
        raise HttpError("[json.exception.type_error.306] cannot use value() with array", "server_error")
    msgs: list[Any] = []
    system = body.get("system")
    if system is not None:
        text = ""
        if isinstance(system, str):
            text = _billing_header(system)
        elif isinstance(system, list):
            for block in system:
                if _jv(block, "type", "", str) == "text":
                    text += _billing_header(_jv(block, "text", "", str))
        msgs.append({"role": "system", "content": text})
    if "messages" not in body:
        raise HttpError("'messages' is required", "server_error")
    messages = body["messages"]
    if isinstance(messages, list):
        for msg in messages:
            role = _jv(msg, "role", "", str)
            if not isinstance(msg, dict) or "content" not in msg:
                if role != "assistant":
                    msgs.append(msg)
                continue
            content = msg["content"]
            if not isinstance(content, list):
                msgs.append(msg)
                continue
            calls: list[dict[str, Any]] = []
            parts: list[Any] = []
            results: list[dict[str, Any]] = []
            reasoning = ""
            for block in content:
                t = _jv(block, "type", "", str)
                if t == "text":
                    parts.append(block)
                elif t == "thinking":
                    reasoning += _jv(block, "thinking", "", str)
                elif t == "image":
                    url = _image_url(_jv(block, "source", {}, dict))
                    if url is not None:
                        parts.append({"type": "image_url", "image_url": {"url": url}})
                elif t == "tool_use":
                    calls.append({"id": _jv(block, "id", "", str), "type": "function",
                                  "function": {"name": _jv(block, "name", "", str),
                                               "arguments": _dump_cpp(_jv(block, "input", {}, dict))}})
                elif t == "tool_result":
                    results.append(_tool_result(block))
            if parts or calls or reasoning:
                new: dict[str, Any] = {"role": role}
                if parts:
                    new["content"] = parts
                else:
                    new["content"] = ""
                if calls:
                    new["tool_calls"] = calls
                if reasoning:
                    new["reasoning_content"] = reasoning
                msgs.append(new)
            msgs.extend(results)
    out: dict[str, Any] = {"messages": msgs}
    tools = body.get("tools")
    if isinstance(tools, list):
        out["tools"] = [{"type": "function", "function": {
            "name": _jv(t, "name", "", str), "description": _jv(t, "description", "", str),
            "parameters": t["input_schema"] if isinstance(t, dict) and "input_schema" in t else {}}} for t in tools]
    tc = body.get("tool_choice")
    if isinstance(tc, dict):
        t = _jv(tc, "type", "", str)
        if t == "auto":
            out["tool_choice"] = "auto"
        elif t == "none":                 # ours: no tool (llama-server leaves the choice at auto)
            out["tool_choice"] = "none"
        elif t == "tool" and _jv(tc, "name", "", str):    # ours: the named tool (llama-server: required)
            out["tool_choice"] = {"type": "function", "function": {"name": tc["name"]}}
        elif t in ("any", "tool"):
            out["tool_choice"] = "required"
    if "stop_sequences" in body:
        out["stop"] = body["stop_sequences"]
    out["max_tokens"] = body["max_tokens"] if "max_tokens" in body else 4096
    for key in ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs"):
        if key in body:
            out[key] = body[key]
    if "thinking" in body:
        th = _jv(body, "thinking", {}, dict)
        if _jv(th, "type", "", str) == "enabled":
            out["thinking_budget_tokens"] = _jv(th, "budget_tokens", 10000, int)
    if "metadata" in body:
        uid = _jv(_jv(body, "metadata", {}, dict), "user_id", "", str)
        if uid:
            out["__metadata_user_id"] = uid
    return out


def _tool_result(block: dict[str, Any]) -> dict[str, Any]:
    tid = _jv(block, "tool_use_id", "", str)
    rc = block.get("content")
    if isinstance(rc, str):
        return {"role": "tool", "tool_call_id": tid, "content": rc}
    if isinstance(rc, list):
        text, parts, images = "", [], False
        for c in rc:
            ct = _jv(c, "type", "", str)
            if ct == "text":
                s = _jv(c, "text", "", str)
                text += s
                parts.append({"type": "text", "text": s})
            elif ct == "image":
                images = True
                url = _image_url(_jv(c, "source", {}, dict))
                if url is not None:
                    parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": "tool", "tool_call_id": tid, "content": parts if images else text}
    return {"role": "tool", "tool_call_id": tid, "content": ""}


def sse_event(name: str, data: Any) -> bytes:
    """``event: <name>`` + ``data: <json>`` (``format_anthropic_sse``, ``format_oai_resp_sse``)."""
    return b"event: " + name.encode() + b"\ndata: " + dumps(data) + b"\n\n"


def delta_parts(d: dict[str, Any]) -> tuple[str, str, int | None, str, str, str]:
    """A stream delta (:func:`constrained.chat.stream_diff.diff_json`) back as ``common_chat_msg_diff``:
    (reasoning, content, tool-call index, name, arguments, id)."""
    calls = d.get("tool_calls") or [{}]
    tc = calls[0]
    fn = tc.get("function") or {}
    return (d.get("reasoning_content", ""), d.get("content", ""), tc.get("index"), fn.get("name", ""),
            fn.get("arguments", ""), tc.get("id", ""))


def _stop_reason(f: Final, msg: dict[str, Any]) -> str:
    if f.stop in (STOP_WORD, STOP_EOS):
        return "tool_use" if msg.get("tool_calls") else "end_turn"
    return "max_tokens"


def _input(tc: dict[str, Any]) -> Any:
    try:
        return json.loads(tc["function"]["arguments"])
    except (ValueError, KeyError, TypeError):
        return {}


class AnthropicShape:
    """The results of one ``/v1/messages`` request written as Anthropic messages (per task: the stream's block
    state, as ``task_result_state`` keeps it)."""

    done = b""

    def __init__(self) -> None:
        self.started: dict[int, list[bool]] = {}       # task index -> [thinking started, text started]

    def final(self, f: Final, msg: dict[str, Any], model: str, cmpl_id: str) -> dict[str, Any]:
        """``to_json_anthropic``."""
        blocks: list[dict[str, Any]] = []
        if msg.get("reasoning_content"):
            blocks.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
        if msg.get("content"):
            blocks.append({"type": "text", "text": msg["content"]})
        for tc in msg.get("tool_calls") or []:
            blocks.append({"type": "tool_use", "id": tc.get("id", ""), "name": tc["function"]["name"],
                           "input": _input(tc)})
        return {"id": cmpl_id, "type": "message", "role": "assistant", "content": blocks, "model": model,
                "stop_reason": _stop_reason(f, msg), "stop_sequence": f.stopping_word or None,
                "usage": {"cache_read_input_tokens": f.n_cached_prompt,
                          "input_tokens": f.n_prompt - f.n_cached_prompt, "output_tokens": f.n_decoded}}

    def partial(self, e: Partial, msg: dict[str, Any], diffs: list[dict[str, Any]], model: str,
                cmpl_id: str) -> bytes:
        """``server_task_result_cmpl_partial::to_json_anthropic``: ``message_start`` at the first token, then the
        blocks' starts and deltas (the text block is 1 once any reasoning was generated)."""
        st = self.started.setdefault(e.task.index, [False, False])
        out: list[bytes] = []
        if e.n_decoded == 1:
            out.append(sse_event("message_start", {"type": "message_start", "message": {
                "id": cmpl_id, "type": "message", "role": "assistant", "content": [], "model": model,
                "stop_reason": None, "stop_sequence": None,
                "usage": {"cache_read_input_tokens": e.n_cached, "input_tokens": e.n_prompt - e.n_cached,
                          "output_tokens": 0}}}))
        has_reasoning = bool(msg.get("reasoning_content"))
        thinking, text = st
        for d in diffs:
            r, c, i, name, args, cid = delta_parts(d)
            thinking, text = _text_deltas(out, r, c, 1 if has_reasoning else 0, thinking, text)
            if i is not None:
                bi = (1 if has_reasoning else 0) + (1 if text else 0) + i
                if name:
                    out.append(_block_start(bi, {"type": "tool_use", "id": cid, "name": name}))
                if args:
                    out.append(_block_delta(bi, {"type": "input_json_delta", "partial_json": args}))
        # the state after this chunk (update(): any diff's content starts its block)
        for d in diffs:
            r, c, *_ = delta_parts(d)
            st[0] = st[0] or bool(r)
            st[1] = st[1] or bool(c)
        return b"".join(out)

    def stream_final(self, f: Final, msg: dict[str, Any], diffs: list[dict[str, Any]], model: str,
                     cmpl_id: str) -> bytes:
        """``to_json_anthropic_stream``: the last diffs (block state counted from this result alone, as
        llama-server does), the blocks' stops, ``message_delta`` and ``message_stop``."""
        has_thinking = bool(msg.get("reasoning_content"))
        has_text = bool(msg.get("content"))
        calls = msg.get("tool_calls") or []
        ti = 1 if has_thinking else 0
        out: list[bytes] = []
        thinking = text = False
        started: set[int] = set()
        for d in diffs:
            r, c, i, _, args, _ = delta_parts(d)
            thinking, text = _text_deltas(out, r, c, ti, thinking, text)
            if i is not None:
                bi = ti + (1 if has_text else 0) + i
                if i not in started:
                    full = calls[i] if i < len(calls) else {"function": {"name": ""}}
                    out.append(_block_start(bi, {"type": "tool_use", "id": full.get("id", ""),
                                                 "name": full["function"]["name"]}))
                    started.add(i)
                if args:
                    out.append(_block_delta(bi, {"type": "input_json_delta", "partial_json": args}))
        if has_thinking:
            out.append(_block_delta(0, {"type": "signature_delta", "signature": ""}))
            out.append(_block_stop(0))
        if has_text:
            out.append(_block_stop(ti))
        for i in range(len(calls)):
            out.append(_block_stop(ti + (1 if has_text else 0) + i))
        out.append(sse_event("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": _stop_reason(f, msg), "stop_sequence": f.stopping_word or None},
            "usage": {"output_tokens": f.n_decoded}}))
        out.append(sse_event("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    def stream_error(self, err: HttpError) -> bytes:
        """An error after the first result: an ``error`` event with llama-server's error object."""
        return sse_event("error", err.body()["error"])


def _text_deltas(out: list[bytes], reasoning: str, content: str, text_index: int, thinking: bool,
                 text: bool) -> tuple[bool, bool]:
    """One diff's thinking (block 0) and text (block ``text_index``) deltas, each block opened on its first
    delta; returns whether the thinking and text blocks are open afterwards."""
    if reasoning:
        if not thinking:
            out.append(_block_start(0, {"type": "thinking", "thinking": ""}))
            thinking = True
        out.append(_block_delta(0, {"type": "thinking_delta", "thinking": reasoning}))
    if content:
        if not text:
            out.append(_block_start(text_index, {"type": "text", "text": ""}))
            text = True
        out.append(_block_delta(text_index, {"type": "text_delta", "text": content}))
    return thinking, text


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return sse_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _block_delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _block_stop(index: int) -> bytes:
    return sse_event("content_block_stop", {"type": "content_block_stop", "index": index})
