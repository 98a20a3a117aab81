"""llama-server's GigaChat 3 tool-call handler (common/parsers/gigachat-v3.cpp, ``common_chat_params_init_gigachat_v3``).

Template: GigaChat3 10B-A1.8B (``<|role_sep|>`` and ``<|message_sep|>``, no ``<|function_call|>``; GigaChat 3.1
goes to the autoparser). No reasoning; content, then at most one call (parallel calls are not supported)::

    <|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": "get_weather", "arguments": {"city": "Paris"}}

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now"}}])
    >>> h = build(tools, tool_choice="auto")
    >>> h.lazy, h.triggers
    (True, [(1, '<|message_sep|>\\n\\nfunction call<|role_sep|>\\n')])
    >>> h.parse(GENERATION_PROMPT, 'ok<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": "now", '
    ...         '"arguments": {}}').tool_calls
    [('now', '{}', '')]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .autoparser_build import _E, _P, _schema_node
from .peg_arena import ArenaSetup

__all__ = ["GENERATION_PROMPT", "PRESERVED_TOKENS", "build"]

WORD = 1
GENERATION_PROMPT = "assistant<|role_sep|>\n"
CALL_PREFIX = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
PRESERVED_TOKENS = ["<|message_sep|>\n\n", "<|role_sep|>\n"]


def _member(p: _P, key: str, child: _E) -> _E:
    # common_peg_parser_builder::json_member: the value (an argument) first, then space, key, ":"
    def f() -> int:
        v = child.ev()
        ws = p.b.space()
        return p.b.seq(p.b.literal('"' + key + '"'), ws, p.b.literal(":"), ws, v)
    return p._e(f)


def _then(p: _P, left: _E, s: str) -> _E:
    # parser << "str": the parser, the literal, then the space between
    def f() -> int:
        a = left.ev()
        lit = p.b.literal(s)
        return p.b.seq(a, p.b.space(), lit)
    return p._e(f)


def build(tools: Sequence[Any], *, tool_choice: str) -> ArenaSetup:
    """The handler's arena for one request (``tool_choice`` ``auto`` / ``required`` / ``none``)."""
    p = _P()
    ret = p.eps().var()
    active = bool(tools) and tool_choice != "none"
    if active:
        choices = p.choice().var()
        for t in tools:
            name = _member(p, "name", '"' + p.tool_name(p.literal(t.name)) + '"').var()
            args = _member(p, "arguments", p.tool_args(p.schema("tool-" + t.name + "-schema", _schema_node(t)))).var()
            opened = p.tool_open(p.literal("{") << name).var()
            choices = (choices | p.rule("tool-" + t.name, _then(p, _then(p, opened, ",") << args, "}"))).var()
        call = p.rule("tool-call", p.literal(CALL_PREFIX) + choices).var()
        calls = p.trigger_rule("tool-call-root", p.repeat(call, 1 if tool_choice == "required" else 0, 1)).var()
        ret = (p.content(p.until("<|message_sep|>\n\n")) << calls).var()
    else:
        ret = p.content(p.rest()).var()
    root = (p.literal(GENERATION_PROMPT) + ret).ev()
    if not active:
        return ArenaSetup(None, False, [], p.b.parser(root))
    lazy = tool_choice == "auto"
    return ArenaSetup(p.b.grammar(root, lazy=lazy), lazy, [(WORD, CALL_PREFIX)], p.b.parser(root))


def preserved(src: str | None) -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return list(PRESERVED_TOKENS)


def setup(src: str | None, tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          generation_prompt: str = "") -> ArenaSetup:
    """:func:`build` (the dispatch of :mod:`constrained.chat.handlers`; one call at most, no reasoning)."""
    return build(tools, tool_choice=tool_choice)
