"""Tool calls on ``/v1/chat/completions``: the request's tools to the slot's grammar, and the reply to ``tool_calls``.

Planning, as llama-server does it (``oaicompat_chat_params_parse``, server-common.cpp:1224-1450;
``task_result_state::update_chat_msg``, server-task.cpp:162-237; ``common_chat_msg_diff::compute_diffs``,
chat.cpp:267-338; ``server_chat_msg_diff_to_json_oaicompat``, server-chat.cpp:621-649):

- :func:`plan_tools`: ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` and the template give the tool setup of
  ``constrained.chat.tools`` (grammar, laziness, triggers, preserved tokens) and the tools as the template sees them;
  :meth:`ToolPlan.params` the ``/completion`` fields of the slot (``grammar_type: "tool_calls"``: an eager grammar is
  prefilled with the generation prompt, so it starts with it as llama-server's does).
- the reply is parsed by :class:`constrained.chat.tool_stream.ToolCallParser` (the chat layer).
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..chat.tools import ToolCallSetup, ToolError, template_tools, tool_call_setup_for_template
from .errors import HttpError

__all__ = ["ToolPlan", "plan_tools"]


@dataclass
class ToolPlan:
    """What one chat request with tools becomes: the setup, and the tools as the template is given them."""

    setup: ToolCallSetup
    fmt: str
    template_tools: list[dict[str, Any]] | None     # None: the template is not given tools (generic format)
    enable_thinking: bool = True                     # what the handler's parser was built for

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

    def for_generation_prompt(self, body: dict[str, Any], templates: Any, reasoning_format: str,
                              generation_prompt: str) -> None:
        """Rebuild a handler's setup for the request's generation prompt when it is not the one-message
        conversation's it was built with (``common_chat_templates_apply`` builds the parser from the request's:
        Ling 3's grammar differs with thinking off)."""
        if self.setup.handler is None or self.setup.generation_prompt == generation_prompt:
            return
        self.setup = _setup(body, templates, reasoning_format, generation_prompt,
                            enable_thinking=self.enable_thinking)

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


def plan_tools(body: dict[str, Any], templates: Any, reasoning_format: str = "deepseek", *,
               enable_thinking: bool = True) -> ToolPlan | None:
    """The tool plan of a chat request whose ``tools`` is a non-empty array (``--jinja``; ``reasoning_format``
    the request's or the server's: a handler's parser extracts reasoning unless it is ``none``); ``None`` where the
    request asks for llama-server's behaviour (``"llama_server_compat": true``, ours) and the template cannot render
    tools (llama-server then drops them silently).

    Raises:
        HttpError: 400 ``Invalid tool_choice: x`` (llama-server's) or ``Failed to parse tools: ...`` (llama-server
            answers that one with a 500), a named ``tool_choice`` that is not among the tools.
    """
    compat = body.get("llama_server_compat") is True
    setup = _setup(body, templates, reasoning_format, enable_thinking=enable_thinking)
    try:
        shown = template_tools(body["tools"])
    except ToolError as e:
        raise HttpError(f"Failed to parse tools: {e}", "invalid_request_error") from None
    if setup.fmt == "generic":
        if compat:
            return None
        return ToolPlan(setup, setup.fmt, None, enable_thinking)
    return ToolPlan(setup, setup.fmt, shown, enable_thinking)


def _setup(body: dict[str, Any], templates: Any, reasoning_format: str, generation_prompt: str | None = None, *,
           enable_thinking: bool = True) -> ToolCallSetup:
    choice = body.get("tool_choice", "auto")
    if choice is None or not isinstance(choice, (str, dict)):
        choice = "auto"                        # json_value: a value of the wrong type is the default
    par = body.get("parallel_tool_calls")
    par = par if isinstance(par, bool) else None
    try:
        return tool_call_setup_for_template(templates.source, body["tools"], choice, par,
                                            llama_server_compat=body.get("llama_server_compat") is True,
                                            extract_reasoning=reasoning_format != "none",
                                            enable_thinking=enable_thinking, generation_prompt=generation_prompt)
    except ToolError as e:
        msg = str(e)
        if "tool_choice" not in msg:
            msg = f"Failed to parse tools: {msg}"
        raise HttpError(msg, "invalid_request_error") from None
