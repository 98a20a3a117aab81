"""llama-server's LFM2 / LFM2.5 tool-call handler (common/parsers/lfm2.cpp, ``common_chat_params_init_lfm2``).

Templates: LFM2 (``<|tool_list_start|>`` ... ``<|tool_list_end|>`` around the tool list: ``lfm2``) and LFM2.5
(``List of tools: [`` without those tokens: ``lfm2_5``). A reply is an optional ``<think>...</think>`` block (when
the template has ``<think>`` and reasoning is extracted), content, then the calls as a Python-style list::

    <|tool_call_start|>[get_weather(city="Paris", days=3), ping()]<|tool_call_end|>

String parameters are a quoted literal (``"..."`` or ``'...'``); others a Python or JSON value (``True`` /
``true``, ``None`` / ``null``, dicts and lists with either quote), turned into JSON by the reply parser.

The arena is built in llama.cpp's order (:mod:`constrained.chat.autoparser_build`'s lazy expressions), so the
grammar text and its ``until-<id>`` rules are llama-server's; the same arena parses the reply.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now", "parameters": {
    ...     "type": "object", "properties": {"tz": {"type": "string"}}}}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True, thinks=True)
    >>> h.lazy, h.triggers
    (True, [(1, '<|tool_call_start|>')])
    >>> h.parse(GENERATION_PROMPT, "<think>hm</think>ok<|tool_call_start|>[now(tz='UTC')]<|tool_call_end|>").tool_calls
    [('now', '{"tz":"UTC"}', '')]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .autoparser_build import _E, _P
from .peg_arena import ArenaSetup, Builder

__all__ = ["GENERATION_PROMPT", "build", "preserved_tokens"]

WORD = 1
GENERATION_PROMPT = "<|im_start|>assistant\n"
CALL_START, CALL_END = "<|tool_call_start|>", "<|tool_call_end|>"
LIST_START, LIST_END = "<|tool_list_start|>", "<|tool_list_end|>"
THINK_START, THINK_END = "<think>", "</think>"


def preserved_tokens(tool_list_tokens: bool) -> list[str]:
    """The handler's preserved tokens (LFM2 also keeps its tool-list markers)."""
    return [CALL_START, CALL_END, THINK_START, THINK_END] + ([LIST_START, LIST_END] if tool_list_tokens else [])


def _params(tool: Any) -> Any:
    # common_chat_tool_parameters: absent, null or {} is an object without properties
    p = tool.parameters
    return {"type": "object", "properties": {}} if p is None or p == {} else p


def _quoted(b: Builder, name: str, q: str) -> int:
    return b.rule_fn(name, lambda: b.seq(b.literal(q), b.string_content(q), b.literal(q)))


def python_string(b: Builder) -> int:
    """``python_string()``: a double- or single-quoted string (peg-parser.cpp)."""
    return b.rule_fn("python-string", lambda: b.choice(_quoted(b, "double-quoted-string", '"'),
                                                       _quoted(b, "single-quoted-string", "'")))


def python_or_json_value(b: Builder) -> int:
    """``common_chat_peg_builder::python_or_json_value``: Python values, the leaf also JSON's true/false/null."""
    def fn() -> int:
        ws = b.space()
        value = python_or_json_value(b)
        member = b.seq(python_string(b), ws, b.literal(":"), ws, value)
        members = b.seq(member, b.zero_or_more(b.seq(ws, b.literal(","), ws, member)))
        d = b.rule_fn("python-or-json-dict", lambda: b.seq(
            b.literal("{"), ws, b.choice(b.literal("}"), b.seq(members, ws, b.literal("}"))), ws))
        elements = b.seq(value, b.zero_or_more(b.seq(b.literal(","), ws, value)))
        a = b.rule_fn("python-or-json-array", lambda: b.seq(
            b.literal("["), ws, b.choice(b.literal("]"), b.seq(elements, ws, b.literal("]"))), ws))
        return b.choice(d, a, python_string(b), b.json_number(),
                        b.rule_fn("python-bool", lambda: b.choice(b.literal("True"), b.literal("False"))),
                        b.rule_fn("python-none", lambda: b.literal("None")), b.json_bool(), b.json_null())
    return b.rule_fn("python-or-json-value", fn)


def python_style_tool_calls(p: _P, tools: Sequence[Any], parallel: bool) -> _E:
    """``common_chat_peg_builder::python_style_tool_calls(tools, parallel, allow_json_literals=true)``:
    ``[name(arg=value, ...), ...]`` (statements built in turn, as the C++)."""
    if not tools:
        return p.eps()
    b = p.b
    tool_choices = p.choice().var()
    for t in tools:
        params = _params(t)
        args = p.eps().var()
        props = params.get("properties") if isinstance(params, dict) else None
        if props:
            arg_choice = p.choice().var()
            for prop, d in (props.items() if isinstance(props, dict) else ()):
                is_string = isinstance(d, dict) and d.get("type") == "string"
                name_p = p.literal(prop).var()
                value_p = p.eps().var()
                string_p = p.tool_arg_json_value(p.choice(p.literal('"') + p.string_content('"') + p.literal('"'),
                                                          p.literal("'") + p.string_content("'") + p.literal("'"))
                                                 ).var()
                if is_string:
                    value_p = string_p
                else:
                    value_p = p.tool_arg_json_value(p._e(lambda: python_or_json_value(b))).var()
                arg_rule = p.tool_arg(p.tool_arg_open(p.tool_arg_name(name_p) + p.literal("=")) + value_p
                                      + p.tool_arg_close(p.eps())).var()
                arg_choice = (arg_choice | arg_rule).var()
            args = (arg_choice + p.zero_or_more("," + p.space() + arg_choice)).var()
        tool_p = p.tool(p.tool_open(p.tool_name(p.literal(t.name)) + p.literal("(")) + p.space() + p.tool_args(args)
                        + p.space() + p.tool_close(p.literal(")"))).var()
        tool_choices = (tool_choices | p.rule("tool-" + t.name, tool_p)).var()
    if parallel:
        return ("[" + p.space() + tool_choices + p.zero_or_more("," + p.space() + tool_choices) + p.space()
                + "]").var()
    return ("[" + p.space() + tool_choices + p.space() + "]").var()


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          thinks: bool) -> ArenaSetup:
    """The handler's arena for one request (``tool_choice`` ``auto`` / ``required`` / ``none``; ``thinks``: the
    template has ``<think>``; reasoning is extracted only then)."""
    p = _P()
    gen = p.literal(GENERATION_PROMPT).var()
    end = p.end().var()
    reasoning = p.eps().var()
    if extract_reasoning and thinks:
        reasoning = p.optional(THINK_START + p.reasoning(p.until(THINK_END)) + THINK_END).var()
    if not tools or tool_choice == "none":
        root = (gen + reasoning + p.content(p.rest()) + end).ev()
        return ArenaSetup(None, False, [], p.b.parser(root))
    calls = p.rule("tool-calls", p.trigger_rule("tool-call", p.literal(CALL_START) + p._e(
        lambda: python_style_tool_calls(p, tools, parallel).ev()) + p.literal(CALL_END))).var()
    content = p.content(p.until(CALL_START)).var()
    root = (gen + reasoning + content + calls + end).ev()
    lazy = tool_choice != "required"
    return ArenaSetup(p.b.grammar(root, lazy=lazy), lazy, [(WORD, CALL_START)], p.b.parser(root))


def preserved(src: str | None) -> list[str]:
    """:func:`preserved_tokens` for a template source (LFM2's tool-list tokens when it has them)."""
    return preserved_tokens(LIST_START in (src or "") and LIST_END in (src or ""))


def setup(src: str | None, tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          generation_prompt: str = "") -> ArenaSetup:
    """:func:`build` for a template source (the dispatch of :mod:`constrained.chat.handlers`)."""
    return build(tools, tool_choice=tool_choice, parallel=parallel, extract_reasoning=extract_reasoning,
                 thinks=THINK_START in (src or ""))
