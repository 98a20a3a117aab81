"""``/v1/responses``, ``/responses`` and ``/v1/responses/input_tokens``: OpenAI's Responses API, as llama-server
serves it.

A request is converted to a ``/v1/chat/completions`` body (``server_chat_convert_responses_to_chatcmpl``,
tools/server/server-chat.cpp:6-310: ``instructions`` as a system message, the input items as messages, function
tools, ``max_output_tokens``; every other field kept) and read by the chat path; the results are written back as a
``response`` object (``to_json_oaicompat_resp``, server-task.cpp:532-605) or, streamed, as its typed events
(``response.created``, ``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``, ``response.reasoning_text.delta``, ``response.function_call_arguments.delta``, then
``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``,
``response.completed``; server-task.cpp:607-713, 1160-1318), each as ``event:`` + ``data:`` lines, no ``[DONE]``.

Deviations (ours better, the same on the three chat APIs where they apply): the stream events also carry
``sequence_number`` and, for an output item's events, ``output_index`` / ``content_index`` (llama-server's have
none, and the OpenAI SDK's ``responses.stream`` accumulator fails without them); ``text.format`` (``json_schema`` / ``json_object``)
constrains the answer as ``response_format`` does on the chat route (llama-server ignores ``text``); a named
``tool_choice`` (``{"type": "function", "name": N}``) forces that tool.

Example:
    >>> responses_to_chat({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 5})
    {'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}], 'max_tokens': 5}
"""

from __future__ import annotations

from typing import Any

from .anthropic_api import delta_parts, sse_event
from .errors import HttpError
from .jsonout import sse
from .results import gen_id
from .slots import Final, Partial

__all__ = ["ResponsesShape", "responses_to_chat"]


def _bad(msg: str) -> HttpError:
    return HttpError(msg, "invalid_request_error")


def _s(d: Any, key: str) -> bool:
    return isinstance(d, dict) and isinstance(d.get(key), str)


def _a(d: Any, key: str) -> bool:
    return isinstance(d, dict) and isinstance(d.get(key), list)


def _type(d: Any) -> str:
    return d["type"] if isinstance(d, dict) and isinstance(d.get("type"), str) else ""


def responses_to_chat(body: Any) -> dict[str, Any]:
    """``server_chat_convert_responses_to_chatcmpl``: the chat-completions body a Responses request becomes.

    Raises:
        HttpError: llama-server's 400s (``'input' is required``, ``Cannot determine type of 'item'``, ...).
    """
    if not isinstance(body, dict):
        raise HttpError("[json.exception.type_error.306] cannot use value() with array", "server_error")
    if "input" not in body:
        raise _bad("'input' is required")
    prev = body.get("previous_response_id")
    if isinstance(prev, str) and prev:
        raise _bad("llama.cpp does not support 'previous_response_id'.")
    inp = body["input"]
    out = {k: v for k, v in body.items() if k not in ("input", "instructions")}
    msgs: list[dict[str, Any]] = []
    if "instructions" in body:
        ins = body["instructions"]
        msgs.append({"role": "system", "content": ins if isinstance(ins, str) else ""})
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        for raw_item in inp:
            _item(raw_item, msgs)
    else:
        raise _bad("'input' must be a string or array of objects")
    out["messages"] = msgs
    if "tools" in body:
        tools = body["tools"]
        if not isinstance(tools, list):
            raise _bad("'tools' must be an array of objects")
        conv = []
        for t in tools:
            if _type(t) != "function":
                continue                  # non-function tools have no chat equivalent (skipped with a warning)
            fn = {k: v for k, v in t.items() if k != "type"}
            fn.setdefault("strict", True)
            conv.append({"type": "function", "function": fn})
        del out["tools"]
        if conv:
            out["tools"] = conv
    if "max_output_tokens" in body:
        del out["max_output_tokens"]
        out["max_tokens"] = body["max_output_tokens"]
    if "reasoning" in body:
        r = body["reasoning"]
        if isinstance(r, dict) and "effort" in r:
            out["reasoning_effort"] = r["effort"]
        del out["reasoning"]
    # ours: text.format as response_format, a named tool_choice as the chat route's
    fmt = body.get("text", {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict) and "response_format" not in body:
        ft = _type(fmt)
        if ft == "json_schema":
            js = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
            out["response_format"] = {"type": "json_schema", "json_schema": js}
        elif ft == "json_object":
            out["response_format"] = {"type": "json_object"}
    tc = body.get("tool_choice")
    if isinstance(tc, dict) and _type(tc) == "function" and _s(tc, "name"):
        out["tool_choice"] = {"type": "function", "function": {"name": tc["name"]}}
    return out


def _item(raw: Any, msgs: list[dict[str, Any]]) -> None:
    item = dict(raw) if isinstance(raw, dict) else raw
    merge_prev = bool(msgs) and msgs[-1].get("role") == "assistant"
    if _s(item, "content"):
        item["content"] = [{"text": item["content"], "type": "input_text"}]
    if _a(item, "content") and _s(item, "role") and item["role"] in ("user", "system", "developer"):
        parts = []
        for p in item["content"]:
            t = _type(p)
            if t == "input_text":
                if "text" not in p:
                    raise _bad("'Input text' requires 'text'")
                parts.append({"text": p["text"], "type": "text"})
            elif t == "input_image":
                if "image_url" not in p:
                    raise _bad("'image_url' is required")
                parts.append({"image_url": {"url": p["image_url"]}, "type": "image_url"})
            elif t == "input_file":
                raise _bad("'input_file' is not supported by llamacpp at this moment")
            else:
                raise _bad("'type' must be one of 'input_text', 'input_image', or 'input_file'")
        item.pop("type", None)
        item.pop("status", None)
        item["content"] = parts
        msgs.append(item)
    elif _s(item, "role") and item["role"] == "assistant" and _type(item) == "message":
        parts = []
        if _s(item, "content"):
            parts.append({"text": item["content"], "type": "text"})
        elif _a(item, "content"):
            for p in item["content"]:
                t = _type(p)
                if t in ("output_text", "input_text"):
                    if not _s(p, "text"):
                        raise _bad("'Output text' requires 'text'")
                    parts.append({"text": p["text"], "type": "text"})
                elif t == "refusal":
                    if not _s(p, "refusal"):
                        raise _bad("'Refusal' requires 'refusal'")
                    parts.append({"refusal": p["refusal"], "type": "refusal"})
                else:
                    raise _bad("'type' must be one of 'output_text' or 'refusal'")
        if merge_prev:
            prev = msgs[-1]
            if not isinstance(prev.get("content"), list):
                prev["content"] = []
            prev["content"].extend(parts)
        else:
            item.pop("status", None)
            item.pop("type", None)
            item["content"] = parts
            msgs.append(item)
    elif (_s(item, "arguments") and _s(item, "call_id") and _s(item, "name")
          and _type(item) == "function_call"):
        call = {"function": {"arguments": item["arguments"], "name": item["name"]}, "id": item["call_id"],
                "type": "function"}
        if merge_prev:
            prev = msgs[-1]
            if not isinstance(prev.get("tool_calls"), list):
                prev["tool_calls"] = []
            prev["tool_calls"].append(call)
        else:
            msgs.append({"role": "assistant", "tool_calls": [call]})
    elif (_s(item, "call_id") and (_s(item, "output") or _a(item, "output"))
          and _type(item) == "function_call_output"):
        if isinstance(item["output"], str):
            msgs.append({"content": item["output"], "role": "tool", "tool_call_id": item["call_id"]})
        else:
            outs = []
            for o in item["output"]:
                if not isinstance(o, dict) or "type" not in o:
                    raise _bad("Output of tool call missing 'type' field")
                o = dict(o)
                if o["type"] not in ("input_text", "input_image"):
                    raise _bad("Output of tool call should be 'Input text' or 'Input image'")
                if o["type"] == "input_text":
                    o["type"] = "text"
                else:
                    if "image_url" not in o:
                        raise _bad("'image_url' is required")
                    o["type"] = "image_url"
                    o["image_url"] = {"url": o["image_url"]}
                outs.append(o)
            msgs.append({"content": outs, "role": "tool", "tool_call_id": item["call_id"]})
    elif _a(item, "summary") and _type(item) == "reasoning":
        if not _a(item, "content"):
            raise _bad("item['content'] is not an array")
        if not item["content"]:
            raise _bad("item['content'] is empty")
        if not _s(item["content"][0], "text"):
            raise _bad("item['content']['text'] is not a string")
        text = item["content"][0]["text"]
        if merge_prev:
            msgs[-1]["reasoning_content"] = text
        else:
            msgs.append({"role": "assistant", "content": [], "reasoning_content": text})
    else:
        raise _bad("Cannot determine type of 'item'")


def _usage(f: Final) -> dict[str, Any]:
    return {"input_tokens": f.n_prompt, "output_tokens": f.n_decoded, "total_tokens": f.n_decoded + f.n_prompt,
            "input_tokens_details": {"cached_tokens": f.n_cached_prompt}}


def _call_item(tc: dict[str, Any]) -> dict[str, Any]:
    cid = tc.get("id", "")
    return {"id": "fc_" + cid, "type": "function_call", "status": "completed",
            "arguments": tc["function"]["arguments"], "call_id": "call_" + cid, "name": tc["function"]["name"]}


class _State:
    def __init__(self) -> None:
        self.resp_id = "resp_" + gen_id("")
        self.reasoning_id = "rs_" + gen_id("")
        self.message_id = "msg_" + gen_id("")
        self.created = False
        self.thinking = False
        self.text = False
        self.fc_id = ""
        # ours: the SDK stream accumulator's positions (output_index per item, content_index, sequence_number)
        self.seq = 0
        self.n_items = 0
        self.index: dict[str, int] = {}

    def item_index(self, key: str) -> int:
        if key not in self.index:
            self.index[key] = self.n_items
            self.n_items += 1
        return self.index[key]

    def events(self, ev: list[tuple[str, dict[str, Any]]], keys: list[str | None]) -> bytes:
        """The SSE bytes of ``ev``, each event with its ``sequence_number`` and, where it concerns an output item
        (``keys``), ``output_index`` (and ``content_index`` 0 for text events)."""
        out = []
        for (name, data), key in zip(ev, keys, strict=True):
            data = dict(data)
            if key is not None:
                data["output_index"] = self.item_index(key)
                if name.startswith(("response.output_text.", "response.content_part.", "response.reasoning_text.")):
                    data["content_index"] = 0
            data["sequence_number"] = self.seq
            self.seq += 1
            out.append(sse_event(name, data))
        return b"".join(out)


class ResponsesShape:
    """The results of one ``/v1/responses`` request written as Responses objects and events (per task: the
    ids and the output items' state, as ``task_result_state`` keeps them)."""

    done = b""

    def __init__(self) -> None:
        self.states: dict[int, _State] = {}

    def _st(self, index: int) -> _State:
        return self.states.setdefault(index, _State())

    def final(self, f: Final, msg: dict[str, Any], model: str, cmpl_id: str) -> dict[str, Any]:
        """``to_json_oaicompat_resp``."""
        st = self._st(f.task.index)
        output: list[dict[str, Any]] = []
        if msg.get("reasoning_content"):
            output.append({"id": "rs_" + gen_id(""), "summary": [], "type": "reasoning",
                           "content": [{"text": msg["reasoning_content"], "type": "reasoning_text"}],
                           "encrypted_content": "", "status": "completed"})
        if msg.get("content"):
            output.append({"content": [{"type": "output_text", "annotations": [], "logprobs": [],
                                        "text": msg["content"]}],
                           "id": "msg_" + gen_id(""), "role": "assistant", "status": "completed", "type": "message"})
        for tc in msg.get("tool_calls") or []:
            output.append(_call_item(tc))
        t = _now()
        return {"completed_at": t, "created_at": t, "id": st.resp_id, "model": model, "object": "response",
                "output": output, "status": "completed", "usage": _usage(f)}

    def partial(self, e: Partial, msg: dict[str, Any], diffs: list[dict[str, Any]], model: str,
                cmpl_id: str) -> bytes:
        """``server_task_result_cmpl_partial::to_json_oaicompat_resp``."""
        st = self._st(e.task.index)
        ev: list[tuple[str, dict[str, Any]]] = []
        progress = e.progress is not None
        head = {"id": st.resp_id, "object": "response", "status": "in_progress"}
        if not st.created:
            ev.append(("response.created", {"type": "response.created", "response": dict(head)}))
            ev.append(("response.in_progress", {"type": "response.in_progress", "response": dict(head)}))
        elif progress:
            ev.append(("response.in_progress", {"type": "response.in_progress", "response": dict(head)}))
        thinking, text = st.thinking, st.text
        keys: list[str | None] = [None] * len(ev)
        for d in diffs:
            r, c, _, name, args, cid = delta_parts(d)
            if r:
                if not thinking:
                    ev.append(("response.output_item.added", {"type": "response.output_item.added", "item": {
                        "id": st.reasoning_id, "summary": [], "type": "reasoning", "content": [],
                        "encrypted_content": "", "status": "in_progress"}}))
                    thinking = True
                ev.append(("response.reasoning_text.delta", {"type": "response.reasoning_text.delta", "delta": r,
                                                             "item_id": st.reasoning_id}))
                keys += ["reasoning"] * (len(ev) - len(keys))
            if c:
                if not text:
                    ev.append(("response.output_item.added", {"type": "response.output_item.added", "item": {
                        "content": [], "id": st.message_id, "role": "assistant", "status": "in_progress",
                        "type": "message"}}))
                    ev.append(("response.content_part.added", {"type": "response.content_part.added",
                                                               "item_id": st.message_id,
                                                               "part": {"type": "output_text", "text": ""}}))
                    text = True
                ev.append(("response.output_text.delta", {"type": "response.output_text.delta",
                                                          "item_id": st.message_id, "delta": c}))
                keys += ["message"] * (len(ev) - len(keys))
            if name:
                ev.append(("response.output_item.added", {"type": "response.output_item.added", "item": {
                    "id": "fc_" + cid, "arguments": "", "call_id": "call_" + cid, "name": name,
                    "type": "function_call", "status": "in_progress"}}))
                st.fc_id = cid
                keys.append("fc_" + cid)
            if args:
                ev.append(("response.function_call_arguments.delta", {
                    "type": "response.function_call_arguments.delta", "delta": args, "item_id": "fc_" + st.fc_id}))
                keys.append("fc_" + st.fc_id)
        if ev:
            if e.timings is not None:
                ev[-1][1]["timings"] = e.timings
            if progress:
                ev[-1][1]["prompt_progress"] = e.progress
        # update(): the state after this chunk
        if not st.created and (progress or e.n_decoded == 1):
            st.created = True
        for d in diffs:
            r, c, *_ = delta_parts(d)
            st.thinking = st.thinking or bool(r)
            st.text = st.text or bool(c)
        return st.events(ev, keys)

    def stream_final(self, f: Final, msg: dict[str, Any], diffs: list[dict[str, Any]], model: str,
                     cmpl_id: str) -> bytes:
        """``to_json_oaicompat_resp_stream``: the items' ``done`` events and ``response.completed``."""
        st = self._st(f.task.index)
        ev: list[tuple[str, dict[str, Any]]] = []
        keys: list[str | None] = []
        output: list[dict[str, Any]] = []
        if msg.get("reasoning_content"):
            keys.append("reasoning")
            item = {"id": st.reasoning_id, "summary": [], "type": "reasoning",
                    "content": [{"text": msg["reasoning_content"], "type": "reasoning_text"}], "encrypted_content": ""}
            ev.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
            output.append(item)
        if msg.get("content"):
            keys += ["message"] * 3
            ev.append(("response.output_text.done", {"type": "response.output_text.done", "item_id": st.message_id,
                                                     "text": msg["content"]}))
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": msg["content"]}
            ev.append(("response.content_part.done", {"type": "response.content_part.done",
                                                      "item_id": st.message_id, "part": part}))
            item = {"type": "message", "status": "completed", "id": st.message_id, "content": [part],
                    "role": "assistant"}
            ev.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
            output.append(item)
        for tc in msg.get("tool_calls") or []:
            item = _call_item(tc)
            keys.append(item["id"])
            ev.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
            output.append(item)
        keys.append(None)
        ev.append(("response.completed", {"type": "response.completed", "response": {
            "id": st.resp_id, "object": "response", "created_at": _now(), "status": "completed", "model": model,
            "output": output, "usage": _usage(f)}}))
        ev[-1][1]["timings"] = f.timings
        return st.events(ev, keys)

    def stream_error(self, err: HttpError) -> bytes:
        """An error after the first result: ``data: {"error": ...}`` (``format_oai_sse``)."""
        return sse({"error": err.body()["error"]})


def _now() -> int:
    import time

    return int(time.time())
