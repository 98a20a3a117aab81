"""The streaming parser of a chat reply with tools: the text so far to the message and llama-server's stream deltas.

``task_result_state::update_chat_msg`` (tools/server/server-task.cpp:162-237) over llama.cpp's lenient PEG parse
(:mod:`.peg`): ``content``, ``reasoning_content`` and ``tool_calls`` (ids kept per index); the deltas are
:func:`.stream_diff.compute_diffs` of successive messages. Where llama-server answers 500 (a reply its parser rejects)
ours keeps the setup's own parse and sets ``parse_error``; a call whose arguments do not validate carries ``issues``.

Example:
    >>> from constrained.chat.tools import tool_call_setup_for_template
    >>> tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    >>> p = ToolCallParser(tool_call_setup_for_template(None, tools, "auto", None), "")
    >>> p.update('<tool_call>\\n{"name": "now", "arguments": {}}\\n</tool_call>', False)[0]["tool_calls"][0]["function"]
    {'name': 'now', 'arguments': '{}'}
"""

from __future__ import annotations

import json
from typing import Any

from .peg import ChatMessage, MessageStream, PegFail, json_native_parser
from .stream_diff import compute_diffs
from .tools import (
    NESTED_TOO_DEEPLY,
    ParsedReply,
    ToolCallSetup,
    new_tool_call_id,
    parse_reply,
    validate_arguments,
)

__all__ = ["ToolCallParser"]


def _peg_for(setup: ToolCallSetup) -> Any:
    """The format's PEG parser (every format of ``constrained.chat.tool_formats``; generic: Hermes blocks; a
    specialised handler parses with its own arena, ``setup.handler``)."""
    if setup.handler is not None:
        return None
    names = [t.name for t in setup.tools if setup.named is None or t.name == setup.named]
    return json_native_parser(names, setup.format, parallel=setup.parallel,
                              required=setup.tool_choice == "required")


class ToolCallParser:
    """The chat output parser of a request with tools: ``update(added, is_partial)`` appends generated text and
    returns the message JSON and the stream deltas since the last update (``task_result_state::update_chat_msg``).
    The parse is incremental (:class:`~constrained.chat.peg.MessageStream`): one stream's parse work is linear in
    its reply (``steps``), the messages those of a full parse per update.
    """

    def __init__(self, setup: ToolCallSetup, generation_prompt: str) -> None:
        self.setup = setup
        self.gen_prompt = generation_prompt
        self.peg = _peg_for(setup)
        # the reply is parsed incrementally: each update resumes from the previous parse's checkpoints
        self.stream = None if self.peg is None else MessageStream(
            self.peg, generation_prompt, reasoning_start=(setup.format.reasoning or ("",))[0])
        self.text = ""
        self.msg = ChatMessage()
        self.ids: list[str] = []
        self.parse_error: str | None = None
        self._src: list[tuple[str, str, str]] = []       # the last calls given ids, and the result
        self._out: list[tuple[str, str, str]] = []
        self._dicts: tuple[list[Any], list[dict[str, Any]]] = ([], [])   # the last partial message's call objects

    @property
    def steps(self) -> int:
        """The parse work so far (parser calls plus characters scanned)."""
        return self.stream.steps if self.stream is not None else 0

    def _with_ids(self, m: ChatMessage) -> ChatMessage:
        src, calls = m.tool_calls, []
        k = _same_head(src, self._src)        # the calls before the last one seen are usually the same
        if k:
            calls = self._out[:k]
        for i in range(k, len(src)):
            name, args, cid = src[i]
            if len(self.ids) <= i:
                self.ids.append(cid or new_tool_call_id())
            calls.append((name, args, self.ids[i]))
        self._src, self._out = src, calls
        m.tool_calls = calls
        return m

    def update(self, added: str, is_partial: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.text += added
        try:
            if self.stream is None:                      # a specialised handler's arena (qwen3_coder, ...)
                new = self.setup.handler.parse(self.gen_prompt, self.text, is_partial=is_partial)
            else:
                new = self.stream.update(added, is_partial)
        except (PegFail, RecursionError) as e:
            if is_partial:                       # llama-server: an SSE error; ours: no delta until it parses
                return self.message_json(final=False), []
            new = self._fallback(str(e) if isinstance(e, PegFail) else NESTED_TOO_DEEPLY)
        diffs: list[dict[str, Any]] = []
        if not new.empty():
            new = self._with_ids(new)
            try:
                diffs = compute_diffs(self.msg, new)
            except ValueError:
                diffs = []                       # llama-server: an error event; ours: the final message says it
            self.msg = new
        return self.message_json(final=not is_partial), diffs

    def _fallback(self, why: str) -> ChatMessage:
        """Ours where llama-server answers 500: the setup's own parse (complete calls kept, else all content)."""
        try:
            r = parse_reply(self.text, self.setup, ids=self.ids)
        except RecursionError:
            r = ParsedReply(self.text, parse_error=NESTED_TOO_DEEPLY)
        self.parse_error = r.parse_error or why
        return ChatMessage(r.content, r.reasoning_content, [(c.name, c.arguments, c.id) for c in r.tool_calls])

    def message_json(self, *, final: bool = True) -> dict[str, Any]:
        """``common_chat_msg::to_json_oaicompat``, plus our flags: ``parse_error`` on the message, ``issues`` on a
        call whose arguments do not validate against its tool's schema (both only when there is something to say)."""
        m: dict[str, Any] = {"role": "assistant", "content": self.msg.content}
        if self.msg.reasoning_content:
            m["reasoning_content"] = self.msg.reasoning_content
        if self.msg.tool_calls:
            src, calls = self.msg.tool_calls, []
            k = 0 if final else _same_head(src, self._dicts[0])
            if k:                            # a partial message's call objects are read, never changed
                calls = self._dicts[1][:k]
            schemas = {t.name: t.schema for t in self.setup.tools}
            for name, args, cid in src[k:]:
                c: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
                if cid:
                    c["id"] = cid
                issues = _issues(args, schemas.get(name)) if final else []
                if issues:
                    c["issues"] = issues
                calls.append(c)
            if not final:
                self._dicts = (src, calls[:])
            m["tool_calls"] = calls
        if self.parse_error:
            m["parse_error"] = self.parse_error
        return m


def _same_head(new: list[Any], old: list[Any]) -> int:
    """How many leading items ``new`` shares with ``old``, checked for all but ``old``'s last (``0`` when they
    differ there): the list comparison runs at C speed, the same objects compare at once."""
    k = len(old) - 1
    return k if k > 0 and len(new) > k and new[:k] == old[:k] else 0


def _issues(arguments: str, schema: Any) -> list[str]:
    try:
        value = json.loads(arguments)
    except RecursionError:
        return [NESTED_TOO_DEEPLY]
    except ValueError:
        return ["arguments are not complete JSON (cut off by max_tokens?)"]
    try:
        return list(validate_arguments(value, schema if schema is not None else {}))
    except RecursionError:
        return [NESTED_TOO_DEEPLY]
