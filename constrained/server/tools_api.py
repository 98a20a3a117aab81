"""Tool calls on ``/v1/chat/completions``: the request's tools to the slot's grammar, and the reply to ``tool_calls``.

Three jobs, each as llama-server does it (``oaicompat_chat_params_parse``, server-common.cpp:1224-1450;
``task_result_state::update_chat_msg``, server-task.cpp:162-237; ``common_chat_msg_diff::compute_diffs``,
chat.cpp:267-338; ``server_chat_msg_diff_to_json_oaicompat``, server-chat.cpp:621-649):

- :func:`plan_tools`: ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` and the template give the tool setup of
  ``constrained.chat.tools`` (grammar, laziness, triggers, preserved tokens) and the tools as the template sees them;
  :meth:`ToolPlan.params` the ``/completion`` fields of the slot (``grammar_type: "tool_calls"``: an eager grammar is
  prefilled with the generation prompt, so it starts with it as llama-server's does).
- :class:`ToolCallParser`: the generated text so far to the message (``content``, ``reasoning_content``,
  ``tool_calls`` with ids cached per index) through llama.cpp's lenient PEG parse (:mod:`.tools_peg`), and the
  diffs of each update as llama-server's stream deltas.
- Where llama-server breaks, ours (CHANGELOG "Deviations"): a reply the format's parser rejects (llama-server: HTTP
  500, or an SSE error) is the whole text as content, ``"parse_error"`` set on the message; a call whose arguments
  do not validate against the tool's schema (or are cut off) carries ``"issues"``; a template that cannot render
  tools gets the generic format of ``constrained.chat.tools`` (llama-server drops the tools); a named
  ``tool_choice`` is honoured and ``required`` means a call (the setup's).

Example:
    >>> from constrained.chat import ChatTemplates
    >>> tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    >>> plan = plan_tools({"tools": tools, "tool_choice": "required"}, ChatTemplates(None))
    >>> plan.fmt, plan.params()["grammar_lazy"]
    ('generic', False)
    >>> prs = ToolCallParser(plan, "<|im_start|>assistant\\n")
    >>> _, diffs = prs.update('<tool_call>\\n{"name": "now", "arguments": {', True)
    >>> diffs[0]["tool_calls"][0]["function"]
    {'name': 'now', 'arguments': '{'}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..chat.tools import ToolCallSetup, ToolError, parse_reply, template_tools, tool_call_setup_for_template
from .errors import HttpError
from .tools_peg import ChatMessage, PegFail, json_native_parser, parse_message

__all__ = ["ToolCallParser", "ToolPlan", "compute_diffs", "diff_json", "plan_tools"]


@dataclass
class ToolPlan:
    """What one chat request with tools becomes: the setup, and the tools as the template is given them."""

    setup: ToolCallSetup
    fmt: str
    template_tools: list[dict[str, Any]] | None     # None: the template is not given tools (generic format)

    @property
    def active(self) -> bool:
        """A tool-call parser runs (llama-server: tools and ``tool_choice`` other than ``none``)."""
        return self.setup.tool_choice != "none" and bool(self.setup.tools)

    def messages(self, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation as the template renders it (generic format: tools in the system message; a
        tool-capable template: past calls' string arguments as objects, as llama-server hands them over)."""
        from ..chat import tools as ct

        normalize = getattr(ct, "template_messages", None)
        if normalize is not None:
            try:
                return list(normalize(msgs, self.setup))
            except ToolError as e:
                raise HttpError(str(e), "invalid_request_error") from None
        if self.template_tools is not None:
            return msgs
        return ct.generic_messages(msgs, self.setup)

    def params(self) -> dict[str, Any]:
        """The slot's grammar fields (llama-server's ``llama_params`` for a chat request with tools):
        ``grammar_type: "tool_calls"`` only for a grammar the slot prefills with the generation prompt (lazy ones
        never are; ours for ``required`` does not start with it)."""
        s = self.setup
        out: dict[str, Any] = {"grammar_lazy": False, "grammar_triggers": [],
                               "preserved_tokens": list(s.preserved_tokens)}
        if s.grammar and self.active:
            out["grammar"] = s.grammar
            out["grammar_lazy"] = bool(s.grammar_lazy)
            out["grammar_triggers"] = list(s.grammar_triggers)
            if s.grammar_lazy or s.prefill:
                out["grammar_type"] = "tool_calls"
        return out


def plan_tools(body: dict[str, Any], templates: Any) -> ToolPlan | None:
    """The tool plan of a chat request whose ``tools`` is a non-empty array (``--jinja``); ``None`` where the
    request asks for llama-server's behaviour (``"llama_server_compat": true``, ours) and the template cannot render
    tools (llama-server then drops them silently).

    Raises:
        HttpError: 400 ``Invalid tool_choice: x`` (llama-server's) or ``Failed to parse tools: ...`` (llama-server
            answers that one with a 500), a named ``tool_choice`` that is not among the tools.
    """
    choice = body.get("tool_choice", "auto")
    if choice is None or not isinstance(choice, (str, dict)):
        choice = "auto"                        # json_value: a value of the wrong type is the default
    par = body.get("parallel_tool_calls")
    par = par if isinstance(par, bool) else None
    compat = body.get("llama_server_compat") is True
    try:
        setup = tool_call_setup_for_template(templates.source, body["tools"], choice, par,
                                             llama_server_compat=compat)
        shown = template_tools(body["tools"])
    except ToolError as e:
        msg = str(e)
        if "tool_choice" not in msg:
            msg = f"Failed to parse tools: {msg}"
        raise HttpError(msg, "invalid_request_error") from None
    if setup.fmt == "generic":
        if compat:
            return None
        return ToolPlan(setup, setup.fmt, None)
    return ToolPlan(setup, setup.fmt, shown)


# ---------------------------------------------------------------------------------------------------- parsing


def _peg_for(setup: ToolCallSetup) -> Any:
    """The format's PEG parser (every format of ``constrained.chat.tool_formats``; generic: Hermes blocks)."""
    names = [t.name for t in setup.tools if setup.named is None or t.name == setup.named]
    return json_native_parser(names, setup.format, parallel=setup.parallel,
                              required=setup.tool_choice == "required")


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


def _new_id() -> str:
    from .results import gen_id

    return gen_id("")                       # gen_tool_call_id: 32 random [0-9A-Za-z]


class ToolCallParser:
    """The chat output parser of a request with tools: ``update(added, is_partial)`` appends generated text and
    returns the message JSON and the stream deltas since the last update (``task_result_state::update_chat_msg``).
    """

    def __init__(self, plan: ToolPlan, generation_prompt: str) -> None:
        self.plan = plan
        self.gen_prompt = generation_prompt
        self.peg = _peg_for(plan.setup)
        self.text = ""
        self.msg = ChatMessage()
        self.ids: list[str] = []
        self.parse_error: str | None = None

    def _with_ids(self, m: ChatMessage) -> ChatMessage:
        calls = []
        for i, (name, args, cid) in enumerate(m.tool_calls):
            if len(self.ids) <= i:
                self.ids.append(cid or _new_id())
            calls.append((name, args, self.ids[i]))
        m.tool_calls = calls
        return m

    def update(self, added: str, is_partial: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.text += added
        try:
            new = parse_message(self.peg, self.gen_prompt, self.text, is_partial=is_partial,
                                reasoning_start=(self.plan.setup.format.reasoning or ("",))[0])
        except PegFail as e:
            if is_partial:                       # llama-server: an SSE error; ours: no delta until it parses
                return self.message_json(final=False), []
            new = self._fallback(str(e))
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
        r = parse_reply(self.text, self.plan.setup, ids=self.ids)
        self.parse_error = r.parse_error or why
        return ChatMessage(r.content, r.reasoning_content, [(c.name, c.arguments, c.id) for c in r.tool_calls])

    def message_json(self, *, final: bool = True) -> dict[str, Any]:
        """``common_chat_msg::to_json_oaicompat``, plus our flags: ``parse_error`` on the message, ``issues`` on a
        call whose arguments do not validate against its tool's schema (both only when there is something to say)."""
        m: dict[str, Any] = {"role": "assistant", "content": self.msg.content}
        if self.msg.reasoning_content:
            m["reasoning_content"] = self.msg.reasoning_content
        if self.msg.tool_calls:
            calls = []
            schemas = {t.name: t.schema for t in self.plan.setup.tools}
            for name, args, cid in self.msg.tool_calls:
                c: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
                if cid:
                    c["id"] = cid
                issues = _issues(args, schemas.get(name)) if final else []
                if issues:
                    c["issues"] = issues
                calls.append(c)
            m["tool_calls"] = calls
        if self.parse_error:
            m["parse_error"] = self.parse_error
        return m


def _issues(arguments: str, schema: Any) -> list[str]:
    from ..chat.tools import _validate

    try:
        value = json.loads(arguments)
    except ValueError:
        return ["arguments are not complete JSON (cut off by max_tokens?)"]
    return list(_validate(value, schema if schema is not None else {}))
