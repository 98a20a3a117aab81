"""llama-server's Muse Glimmer tool-call handler (common/parsers/muse-glimmer.cpp, ``common_chat_params_init_muse_glimmer``).

Template: muse-glimmer (``<atem:function_calls>``, ``<|eom|>``). An assistant turn is one or more messages
``<|start|>assistant to=<recipient><|message|>...`` ended by ``<|eom|>`` (more follow) or ``<|eot|>``: ``to=self``
is the reasoning, ``to=user`` (or no recipient) the answer, and a call goes to any other recipient::

    <|start|>assistant to=functions<|message|><atem:function_calls>
    <atem:invoke name="get_weather"><atem:parameter name="city">Paris</atem:parameter></atem:invoke>
    </atem:function_calls>

A parameter that may be a string is raw text; any other is JSON. The lazy grammar triggers on a pattern (a
recipient other than ``self`` / ``user``).

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now"}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True)
    >>> h.lazy, h.triggers[0][0]
    (True, 2)
    >>> m = h.parse(GENERATION_PROMPT, " to=self<|message|>hm<|eom|><|start|>assistant to=functions<|message|>"
    ...             '<atem:function_calls><atem:invoke name="now"></atem:invoke></atem:function_calls>')
    >>> m.reasoning_content, m.tool_calls
    ('hm', [('now', '{}', '')])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .autoparser_build import _P
from .peg_arena import ArenaSetup, _may_be_string
from .qwen3_coder import _params

__all__ = ["GENERATION_PROMPT", "PRESERVED_TOKENS", "TRIGGER", "build"]

PATTERN = 2
GENERATION_PROMPT = "<|start|>assistant"
PRESERVED_TOKENS = ["<|start|>", "<|message|>", "<|eom|>", "<|eot|>", "<atem:function_calls>", "<atem:invoke",
                    "<atem:parameter", "</atem:parameter>", "</atem:invoke>", "</atem:function_calls>"]
TRIGGER = "(?:^|<\\|start\\|>assistant)( to=(?!self<\\|message\\|>)(?!user<\\|message\\|>)[^<]*?<\\|message\\|>)"
_PARAM_END = "</atem:parameter>"


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool) -> ArenaSetup:
    """The handler's arena for one request (``tool_choice`` ``auto`` / ``required`` / ``none``)."""
    p = _P()
    b = p.b
    grammar = bool(tools) and tool_choice != "none"
    start = p.rule("start", p.literal(GENERATION_PROMPT)).var()
    if not extract_reasoning and not grammar:
        return ArenaSetup(None, False, [], b.parser((start + p.content(p.rest())).ev()))
    body = p.until("<|eom|>")
    p.rule("analysis", p.literal(" to=self<|message|>") + (p.reasoning(body) if extract_reasoning else p.content(body))
           + p.literal("<|eom|>")).ev()
    analysis = p._e(lambda: b.ref("analysis")).var()
    recipient = p.optional(p.literal(" to=user")).var()
    final_msg = p.rule("final", recipient + p.literal("<|message|>")
                       + p.content(p._e(lambda: b.until_one_of(["<|eot|>", "<|eom|>"])))).var()
    if not grammar:
        return ArenaSetup(None, False, [], b.parser((p.zero_or_more(start + analysis) + start + final_msg).ev()))
    string_value = p.ac(p.tool_arg_string_value(p.until(_PARAM_END)) + p.tool_arg_close(p.literal(_PARAM_END)),
                        _PARAM_END).var()
    choices = p.choice().var()
    for t in tools:
        arg_rules: list[int] = []
        for pname, node, _req in _params(t):
            value = p.eps().var()
            if _may_be_string(node):
                value = string_value
            else:
                value = (p.tool_arg_json_value(p.schema(f"tool-{t.name}-arg-{pname}-schema", node))
                         + p.tool_arg_close(p.literal(_PARAM_END))).var()
            opened = p.tool_arg_open(p.literal('<atem:parameter name="') + p.tool_arg_name(p.literal(pname))
                                     + p.literal('">'))
            arg_rules.append(p.tool_arg(opened + value).ev())
        args = p.eps().var()
        if arg_rules:
            args = p.zero_or_more(p._e(lambda r=arg_rules: b.choice(*r)) + p.space()).var()
        opened = p.tool_open(p.literal(" to=") + p.until("<|message|>") + p.literal("<|message|><atem:function_calls>")
                             + p.space() + p.literal('<atem:invoke name="') + p.tool_name(p.literal(t.name))
                             + p.literal('">') + p.space())
        closed = p.tool_close(p.literal("</atem:invoke>") + p.space() + p.literal("</atem:function_calls>"))
        tool_p = p.tool((opened << p.tool_args(args)) << closed).var()
        choices = (choices | p.rule("tool-" + t.name, tool_p)).var()
    if parallel:
        calls = p.trigger_rule("tool-call", choices + p.zero_or_more(p.literal("<|eom|>") + start + choices)).var()
    else:
        calls = p.trigger_rule("tool-call", choices).var()
    if tool_choice == "required":
        root = (p.zero_or_more(start + analysis) + start + calls).ev()
    else:
        trailing = p.optional(p.literal("<|eom|>") + start + calls).var()
        root = (p.zero_or_more(start + analysis) + start + (calls | (final_msg + trailing))).ev()
    lazy = tool_choice != "required"
    return ArenaSetup(b.grammar(root, lazy=lazy), lazy, [(PATTERN, TRIGGER)], b.parser(root))


def preserved(src: str | None) -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return list(PRESERVED_TOKENS)


def setup(src: str | None, tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          generation_prompt: str = "") -> ArenaSetup:
    """:func:`build` (the dispatch of :mod:`constrained.chat.handlers`)."""
    return build(tools, tool_choice=tool_choice, parallel=parallel, extract_reasoning=extract_reasoning)
