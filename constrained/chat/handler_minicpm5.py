"""llama-server's MiniCPM5 tool-call handler (common/parsers/minicpm5.cpp, ``common_chat_params_init_minicpm5``).

Template: openbmb MiniCPM5 1B (``Tool usage guidelines:``, ``<function name="``, ``<param name="``). A reply is an
optional ``<think>...</think>`` block, content, then one or more calls (one without ``parallel_tool_calls``)::

    <function name="get_weather"><param name="city">Paris</param><param name="days">3</param></function>

A parameter that may be a string is raw text up to ``</param>`` (or ``<![CDATA[...]]>``); any other is JSON.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now", "parameters": {
    ...     "type": "object", "properties": {"tz": {"type": "string"}}}}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True)
    >>> h.lazy, h.triggers
    (True, [(1, '<function')])
    >>> m = h.parse(GENERATION_PROMPT, '<think>hm</think>ok<function name="now"><param name="tz">UTC</param></function>')
    >>> m.reasoning_content, m.content, m.tool_calls
    ('hm', 'ok', [('now', '{"tz":"UTC"}', '')])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .autoparser_build import _P
from .peg_arena import ArenaSetup, _may_be_string
from .qwen3_coder import _params

__all__ = ["GENERATION_PROMPT", "PRESERVED_TOKENS", "build"]

WORD = 1
GENERATION_PROMPT = "<|im_start|>assistant\n"
PRESERVED_TOKENS = ["<function", "<param", "</function>", "</param>", "<think>", "</think>"]


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool) -> ArenaSetup:
    """The handler's arena for one request (``tool_choice`` ``auto`` / ``required`` / ``none``)."""
    p = _P()
    b = p.b
    gen = p.literal(GENERATION_PROMPT).var()
    reasoning = p.eps().var()
    if extract_reasoning:
        reasoning = _think(p)
    if not tools or tool_choice == "none":
        root = (gen + reasoning + p.content(p.rest()) + p.end()).ev()
        return ArenaSetup(None, False, [], b.parser(root))
    cdata = (p.literal("<![CDATA[") + p.ac(p.tool_arg_string_value(p.until("]]>")) + p.literal("]]>"), "]]>")
             + p.tool_arg_close(p.literal("</param>")))
    plain = (p._e(lambda: b.negate(b.literal("<![CDATA[")))
             + p.ac(p.tool_arg_string_value(p.until("</param>")) + p.tool_arg_close(p.literal("</param>")), "</param>"))
    string_value = p.choice(cdata, plain).var()
    choices = p.choice().var()
    for t in tools:
        arg_rules: list[int] = []
        for pname, node, _req in _params(t):
            value = p.eps().var()
            if _may_be_string(node):
                value = string_value
            else:
                value = (p.tool_arg_json_value(p.schema(f"tool-{t.name}-arg-{pname}-schema", node))
                         + p.tool_arg_close(p.literal("</param>"))).var()
            opened = p.tool_arg_open(p.literal('<param name="') + p.tool_arg_name(p.literal(pname)) + p.literal('">'))
            arg_rules.append(p.tool_arg(opened + value).ev())
        args = p.eps().var()
        if arg_rules:
            args = p.zero_or_more(p._e(lambda r=arg_rules: b.choice(*r)) + p.space()).var()
        tool_p = p.tool((p.tool_open(p.literal('<function name="') + p.tool_name(p.literal(t.name)) + p.literal('">'))
                         << p.tool_args(args)) << p.tool_close(p.literal("</function>"))).var()
        choices = (choices | p.rule("tool-" + t.name, tool_p)).var()
    calls = p.trigger_rule("tool-call", p.repeat(choices + p.space(), 1, -1 if parallel else 1)).var()
    content = p.content(p.until("<function")).var()
    root = (gen + reasoning + content + calls + p.end()).ev()
    lazy = tool_choice != "required"
    return ArenaSetup(b.grammar(root, lazy=lazy), lazy, [(WORD, "<function")], b.parser(root))


def _think(p: _P) -> Any:
    # ("<think>" << reasoning(until("</think>")) << "</think>") + space(): the space first (the right operand of +),
    # then the left of each << before its right (C++17), a string operand's literal before the space between
    b = p.b

    def f() -> int:
        sp = b.space()
        body = b.tag("reasoning", b.until("</think>"))
        left = b.seq(b.literal("<think>"), b.space(), body)
        close = b.literal("</think>")
        inner = b.seq(left, b.space(), close)
        return b.seq(inner, sp)
    return p._e(f).var()


def preserved(src: str | None) -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return list(PRESERVED_TOKENS)


def setup(src: str | None, tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          generation_prompt: str = "") -> ArenaSetup:
    """:func:`build` (the dispatch of :mod:`constrained.chat.handlers`)."""
    return build(tools, tool_choice=tool_choice, parallel=parallel, extract_reasoning=extract_reasoning)
