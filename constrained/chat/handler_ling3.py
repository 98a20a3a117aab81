"""llama-server's Ling 3.0 / Bailing V3 tool-call handler (common/parsers/ling3.cpp, ``common_chat_params_init_ling3``).

Template: inclusionAI Ling 3.0 flash (``<role>ASSISTANT</role>`` sections, ``<arg_key>`` / ``<arg_value>`` tagged
arguments). The generation prompt ends with ``<role>ASSISTANT</role>\\n<think>`` when thinking is on, so the
reasoning runs until ``</think>`` or a call's ``<tool_call>``; then content, then the calls::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

A string parameter's value is raw text; any other is JSON (a value that may be either: JSON if it parses). Required
parameters in any order, optional ones after; text after the calls and a trailing ``<|role_end|>`` are read too.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now", "parameters": {
    ...     "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True, think_open=True)
    >>> h.lazy, h.triggers
    (True, [(1, '<tool_call>')])
    >>> m = h.parse(GENERATION_PROMPT, "hm</think><tool_call>now\\n<arg_key>tz</arg_key>\\n<arg_value>UTC</arg_value>\\n"
    ...             "</tool_call>")
    >>> m.reasoning_content, m.tool_calls
    ('hm', [('now', '{"tz":"UTC"}', '')])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .autoparser_build import _E, _P
from .peg_arena import ArenaSetup, value_types
from .qwen3_coder import _params

__all__ = ["GENERATION_PROMPT", "PRESERVED_TOKENS", "STOPS", "build", "think_open"]

WORD = 1
ROLE, ROLE_END = "<role>ASSISTANT</role>", "<|role_end|>"
THINK_START, THINK_END = "<think>", "</think>"
CALL_START, CALL_END = "<tool_call>", "</tool_call>"
ARG_KEY, ARG_KEY_END, ARG_VAL, ARG_VAL_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
GENERATION_PROMPT = ROLE + "\n" + THINK_START
PRESERVED_TOKENS = [THINK_START, THINK_END, CALL_START, CALL_END, ARG_KEY, ARG_KEY_END, ARG_VAL, ARG_VAL_END, ROLE_END]
#: ``additional_stops``: the model may spell the end-of-turn token out as text
STOPS = [ROLE_END]


def think_open(generation_prompt: str) -> bool:
    """Whether the generation prompt leaves a think block open (its last ``<think>`` after its last ``</think>``)."""
    o, c = generation_prompt.rfind(THINK_START), generation_prompt.rfind(THINK_END)
    return o >= 0 and (c < 0 or o > c)


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          think_open: bool) -> ArenaSetup:
    """The handler's arena for one request (``tool_choice`` ``auto`` / ``required`` / ``none``; ``think_open``:
    the generation prompt opened the think block, :func:`think_open`)."""
    p = _P()
    b = p.b
    end = p.end().var()
    opener = p.optional(p.literal(ROLE) + p.optional(p.space())).var()
    ends = [THINK_END, CALL_START] if think_open else [THINK_END]
    body_end = p._e(lambda: b.until_one_of(ends)).var()
    think_body = (p.reasoning(body_end) if extract_reasoning else p.content(body_end)).var()
    reasoning = p.optional(p.optional(p.literal(THINK_START)) + think_body + p.optional(p.literal(THINK_END))).var()
    content = p.optional(p.content(p._e(lambda: b.until_one_of([CALL_START])))).var()
    tail = (p.optional(p.content(p.until(ROLE_END))) + p.optional(p.literal(ROLE_END))).var()
    if not tools or tool_choice == "none":
        root = (opener + reasoning + tail + end).ev()
        return ArenaSetup(None, False, [], b.parser(root))
    choices = p.choice().var()
    arg_close = p.tool_arg_close(p.literal(ARG_VAL_END)).var()
    arg_string = p.rule("ling3-arg-string", p.tool_arg_string_value(p.until(ARG_VAL_END)) + arg_close).var()
    for t in tools:
        required: list[int] = []
        optional: list[int] = []
        for pname, node, req in _params(t):
            rule_name = f"ling3-arg-{t.name}-{pname}"
            types = value_types(node)
            value: _E = p.eps().var()
            if "string" not in types:
                value = (p.tool_arg_json_value(p.schema(rule_name + "-schema", node)) + arg_close).var()
            elif types == {"string"}:
                value = arg_string
            else:
                alt = p.atomic(p.tool_arg_json_value(p.schema(rule_name + "-schema", node)) + arg_close) | arg_string
                value = p._e(lambda alt=alt: b.gbnf(alt.ev(), "ling3-arg-string")).var()
            opened = p.tool_arg_open(p.literal(ARG_KEY) + p.tool_arg_name(p.literal(pname)) + p.literal(ARG_KEY_END))
            arg = p.rule(rule_name, p.optional(p.space()) + p.tool_arg(opened + p.optional(p.space())
                                                                       + p.literal(ARG_VAL) + value)).ev()
            (required if req else optional).append(arg)
        args = p._e(lambda t=t, required=required: b.permute(f"ling3-{t.name}-args", required)).var()
        if optional:
            args = (args + p.zero_or_more(p._e(lambda optional=optional: b.choice(*optional)))).var()
        call = p.tool(p.tool_open(p.literal(CALL_START) + p.tool_name(p.literal(t.name)) + p.optional(p.space()))
                      + p.tool_args(args) + p.tool_close(p.optional(p.space()) + p.literal(CALL_END))).var()
        choices = (choices | p.rule("ling3-tool-" + t.name, call)).var()
    calls = (choices + p.zero_or_more(p.space() + choices)).var() if parallel else choices
    section = p.trigger_rule("ling3-tool-call", calls + p.space() + p.optional(p.content(p.until(ROLE_END)))
                             + p.optional(p.literal(ROLE_END))).var()
    tools_p = section if tool_choice == "required" else p.optional(section).var()
    root = (opener + reasoning + content + tools_p + tail + end).ev()
    lazy = tool_choice != "required"
    return ArenaSetup(b.grammar(root, lazy=lazy), lazy, [(WORD, CALL_START)], b.parser(root))


def preserved(src: str | None) -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return list(PRESERVED_TOKENS)


def setup(src: str | None, tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          generation_prompt: str = "") -> ArenaSetup:
    """:func:`build` for the request's generation prompt (the dispatch of :mod:`constrained.chat.handlers`)."""
    return build(tools, tool_choice=tool_choice, parallel=parallel, extract_reasoning=extract_reasoning,
                 think_open=think_open(generation_prompt or GENERATION_PROMPT))
