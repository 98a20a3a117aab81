"""A chat template's capabilities as llama-server finds them: ``jinja::caps_get`` (common/jinja/caps.cpp), the
probe behind ``/props``' ``chat_template_caps`` and the message normalisation of ``common_chat_templates_apply``.

llama.cpp renders the template with probe conversations (a string content, a system message, a tool call with
object or string arguments, two parallel calls, reasoning in the history, a reasoning effort) while its engine
records which input values the template used (``value_t::stats``: ``used`` and the operations applied, such as
``test_is_string``, ``selectattr``, ``array_access``). Here the same probes run through jinja2 with the project's
llama.cpp-like environment (:mod:`constrained.chat.jinja_env`), the inputs tracked as llama.cpp's runtime marks
them (:mod:`constrained.chat.caps_env`), and the findings read as ``caps_get`` reads them.

Example:
    >>> from constrained.chat.template import CHATML_TEMPLATE
    >>> caps = template_caps(CHATML_TEMPLATE)
    >>> caps["supports_system_role"], caps["supports_tools"], caps["supports_typed_content"]
    (True, False, False)
    >>> list(caps)[:3]
    ['supports_object_arguments', 'supports_parallel_tool_calls', 'supports_preserve_reasoning']
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Any

from .caps_env import ProbeRun, probe_environment

__all__ = ["TemplateCaps", "probe_caps", "template_caps"]


@dataclass(frozen=True)
class TemplateCaps:
    """``jinja::caps`` with llama.cpp's defaults; :meth:`to_map` gives ``caps::to_map`` (keys sorted, as the
    ``std::map`` that ``/props`` serialises).

    >>> TemplateCaps().to_map()["supports_string_content"]
    True
    """

    supports_tools: bool = True
    supports_tool_calls: bool = True
    supports_system_role: bool = True
    supports_parallel_tool_calls: bool = True
    supports_preserve_reasoning: bool = False
    supports_reasoning_effort: bool = False
    supports_string_content: bool = True
    supports_typed_content: bool = False
    supports_object_arguments: bool = False

    def to_map(self) -> dict[str, bool]:
        """The ``chat_template_caps`` object of ``/props``."""
        return dict(sorted(asdict(self).items()))


# ----------------------------------------------------------------------------- the probes (caps_get)
_TOOLS = [{"name": "tool", "type": "function", "function": {
    "name": "tool1", "description": "Tool description", "parameters": {
        "type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
        "required": ["arg"]}}}]


def _tool_conversation(args: Any, calls: int = 1) -> list[dict[str, Any]]:
    tool_calls = [{"id": f"call0000{i + 1}", "type": "function", "function": {"name": "tool1", "arguments": args}}
                  for i in range(calls)]
    return [{"role": "user", "content": "User message"},
            {"role": "assistant", "content": "", "tool_calls": tool_calls},
            {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "The tool response was 'tool response'"},
            {"role": "user", "content": "User message"}]


@functools.lru_cache(maxsize=64)
def probe_caps(source: str) -> TemplateCaps:
    """``jinja::caps_get`` for a template source (a template jinja2 cannot parse keeps the defaults); cached by
    source (the result is frozen).

    >>> probe_caps("{{ messages[0].content }}").supports_tools
    False
    """
    import jinja2

    try:
        tmpl = probe_environment().from_string(source)
    except jinja2.TemplateError:
        return TemplateCaps()
    r: dict[str, bool] = asdict(TemplateCaps())

    # typed content
    run = ProbeRun(tmpl, [{"role": "user", "content": "STRING_MARKER"}])
    content = run.messages[0]["content"]
    checks_for_string = run.has_op(content, "test_is_string")
    as_array = run.has_op(content, "selectattr") or run.has_op(content, "array_access")
    if as_array:
        r["supports_typed_content"] = True
    if not run.success or (as_array and "STRING_MARKER" not in run.output):
        r["supports_string_content"] = False
    if checks_for_string:
        run = ProbeRun(tmpl, [{"role": "user", "content": []}])
        content = run.messages[0]["content"]
        if run.success and (run.has_op(content, "selectattr") or run.has_op(content, "array_access")):
            r["supports_typed_content"] = True

    # system role
    run = ProbeRun(tmpl, [{"role": "system", "content": "System message"}, {"role": "user", "content": "User message"}])
    if not run.used(run.messages[0]["content"]):
        r["supports_system_role"] = False

    # one call, object arguments
    run = ProbeRun(tmpl, _tool_conversation({"arg": "value"}), _TOOLS)
    if run.success:
        if not run.used(run.tools[0]["function"]["name"]):
            r["supports_tools"] = False
        calls = run.messages[1]["tool_calls"]
        if not run.used(calls):
            r["supports_tool_calls"] = False
        elif run.used(calls[0]["function"]["arguments"]["arg"]):
            r["supports_object_arguments"] = True

    # one call, string arguments
    if not r["supports_object_arguments"]:
        run = ProbeRun(tmpl, _tool_conversation('{"arg": "value"}'), _TOOLS)
        if not run.success:
            r["supports_tool_calls"] = r["supports_tools"] = False
        else:
            if not run.used(run.tools[0]["function"]["name"]):
                r["supports_tools"] = False
            if not run.used(run.messages[1]["tool_calls"]):
                r["supports_tool_calls"] = False

    # parallel calls
    args: Any = {"arg": "value"} if r["supports_object_arguments"] else '{"arg": "value"}'
    run = ProbeRun(tmpl, _tool_conversation(args, calls=2), _TOOLS)
    if not run.success or not run.used(run.messages[1]["tool_calls"][1]["function"]):
        r["supports_parallel_tool_calls"] = False

    # reasoning kept in the history
    placeholder = "<REASONING_CONTENT_PLACEHOLDER>"
    msgs = [{"role": "user", "content": "User message"},
            {"role": "assistant", "content": "Assistant message", "reasoning_content": placeholder},
            {"role": "user", "content": "User message"},
            {"role": "assistant", "content": "Assistant message", "reasoning_content": "Reasoning content"},
            {"role": "user", "content": "User message"}]
    run = ProbeRun(tmpl, msgs, extra={"enable_thinking": True, "preserve_thinking": True, "clear_thinking": False,
                                  "truncate_history_thinking": False, "drop_thinking": False})
    if placeholder in run.output:
        r["supports_preserve_reasoning"] = True

    # reasoning effort
    run = ProbeRun(tmpl, [{"role": "user", "content": "User message"}],
               extra={"enable_thinking": True, "reasoning_effort": "low"})
    r["supports_reasoning_effort"] = run.used(run.extra["reasoning_effort"])
    return TemplateCaps(**r)


def template_caps(source: str) -> dict[str, bool]:
    """``/props``' ``chat_template_caps`` for a template source: :func:`probe_caps` as a dict.

    >>> template_caps("{{ messages[0].content }}")["supports_system_role"]
    True
    """
    return probe_caps(source).to_map()
