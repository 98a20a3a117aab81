"""Tool sets and comparisons for tool calls against the real llama-server over the sdist's chat templates
(``tests/chat/test_tools_server.py`` and ``scripts/tool_call_sweep.py``).

- ``TOOLSETS`` (3 tool sets, ``WEATHER`` first) x ``CHOICES`` (tool_choice auto / required / none / named);
- ``setup_differences(server, template_source, tools, cases)``: ``tool_call_setup_for_template(...,
  llama_server_compat=True)`` against llama-server's ``__verbose.generation_settings`` (grammar, laziness,
  triggers, generation prompt);
- ``prompt_differences(server, template_source, tools)``: ``ChatTemplates.apply`` against ``/apply-template`` for a
  one-message conversation and ``HISTORY`` (a past tool call and its result).

Example:
    >>> function_tool("ping")["function"]
    {'name': 'ping', 'description': 'd'}
"""

from __future__ import annotations

from constrained.chat import ChatTemplates
from constrained.chat.tools import template_messages, template_tools, tool_call_setup_for_template
from constrained.errors import ChatTemplateError
from constrained.grammar import Grammar
from oracle.llama_server import LlamaServer


def function_tool(name: str, params: dict | None = None, desc: str = "d") -> dict:
    """An OpenAI ``tools`` entry: ``{"type": "function", "function": {name, description[, parameters]}}``."""
    f = {"name": name, "description": desc}
    if params is not None:
        f["parameters"] = params
    return {"type": "function", "function": f}


WEATHER = function_tool("get_weather", {"type": "object", "properties": {"location": {"type": "string"}},
                              "required": ["location"]})
TOOLSETS = [
    [WEATHER],
    [function_tool("add", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
                 "required": ["a", "b"]}),
     function_tool("search", {"type": "object", "properties": {"q": {"type": "string", "maxLength": 20},
                                                      "tags": {"type": "array", "items": {"enum": ["x", "y"]}}}})],
    [function_tool("ping"), function_tool("z_last", {}), function_tool("Mixed.Case-name", {"type": "object", "properties": {
        "opt": {"type": "boolean"}, "nested": {"type": "object", "properties": {"k": {"type": "null"}}}}})],
]
CHOICES = ["auto", "required", "none", {"type": "function", "function": {"name": None}}]


def _choice(c: str | dict, tools: list) -> str | dict:
    if isinstance(c, dict):
        return {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}
    return c


def setup_differences(srv: LlamaServer, source: str, tools: list, cases: list) -> tuple[int, list]:
    """Compare ``tool_call_setup_for_template(..., llama_server_compat=True)`` with llama-server's ``__verbose``
    for each (tool_choice, parallel_tool_calls or None: absent): (cases compared, [(case, field)] that differ)."""
    n, diffs = 0, []
    for c, par in cases:
        choice = _choice(c, tools)
        body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice,
                "verbose": True, "max_tokens": 0}
        if par is not None:
            body["parallel_tool_calls"] = par
        gs = srv.post("/v1/chat/completions", body)["__verbose"]["generation_settings"]
        ours = tool_call_setup_for_template(source, tools, choice, par, llama_server_compat=True)
        mine = {"grammar": ours.grammar or "", "grammar_lazy": ours.grammar_lazy,
                "grammar_triggers": ours.grammar_triggers, "generation_prompt": ours.generation_prompt,
                # ids of single-token strings only: the default vocabulary has none of these markers
                "preserved_tokens": []}
        diffs += [((choice, par), k) for k, v in mine.items() if gs[k] != v]
        if ours.grammar:
            Grammar.from_gbnf(ours.grammar)
        n += 1
    return n, diffs


HISTORY = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"type": "function", "id": "call12345", "function": {"name": "get_weather",
                                                                   "arguments": '{"location": "Paris"}'}}]},
           {"role": "tool", "tool_call_id": "call12345", "content": "22 C, sunny"},
           {"role": "assistant", "content": "It is 22 C and sunny."}, {"role": "user", "content": "And tomorrow?"}]


def prompt_differences(srv: LlamaServer, source: str, tools: list) -> tuple[int, list]:
    """``/apply-template`` vs ``ChatTemplates.apply(template_messages(...), tools=template_tools(...))`` for a
    one-message conversation and HISTORY (a template that raises must raise in both): (cases, differing cases)."""
    t = ChatTemplates(source, bos_token="<bos>", eos_token="<eos>", add_bos=True, add_eos=False)
    setup = tool_call_setup_for_template(source, tools, "auto")
    n, diffs = 0, []
    for msgs in ([{"role": "user", "content": "hi"}], HISTORY):
        r = srv.post("/apply-template", {"messages": msgs, "tools": tools})
        try:
            if setup.handler is not None:              # a specialised handler renders as the server does
                from constrained.chat.autoparser_prompt import server_apply, supports_thinking

                got = server_apply(t, template_messages(msgs, setup), tools=template_tools(tools),
                                   chat_template_kwargs={"preserve_reasoning": True},
                                   enable_thinking=supports_thinking(t)).prompt
            else:
                got = t.apply(template_messages(msgs, setup), jinja=True, tools=template_tools(tools))
        except ChatTemplateError:
            got = None                                 # llama-server: HTTP 400
        n += 1
        if got != r.get("prompt"):
            diffs.append(len(msgs))
    return n, diffs
