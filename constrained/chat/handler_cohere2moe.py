"""llama-server's Cohere2 MoE ("North Code") tool-call handler (common/parsers/cohere2moe.cpp,
``common_chat_params_init_cohere2moe``).

The assistant turn is marker-wrapped: after ``<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>`` an optional
``<|START_THINKING|>...<|END_THINKING|>`` block (the generation prompt opens it), then *either* the content
``<|START_TEXT|>...<|END_TEXT|>`` *or* the calls::

    <|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]<|END_ACTION|>

(``standard_json_tools`` with the keys in that order, the id the model's). ``reasoning_format: none`` keeps the
thinking block, markers included, as content.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now"}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True)
    >>> h.lazy, h.triggers
    (True, [(1, '<|START_ACTION|>')])
    >>> m = h.parse(GENERATION_PROMPT, 'hm<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", '
    ...             '"tool_name": "now", "parameters": {}}]<|END_ACTION|>')
    >>> m.reasoning_content, m.tool_calls
    ('hm', [('now', '{}', '0')])
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from .autoparser_build import _P, _standard_json_tools
from .peg_arena import ArenaSetup

__all__ = ["GENERATION_PROMPT", "PRESERVED_TOKENS", "build"]

WORD = 1
TURN_START, TURN_END, CHATBOT = "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>"
THINK_START, THINK_END = "<|START_THINKING|>", "<|END_THINKING|>"
TEXT_START, TEXT_END = "<|START_TEXT|>", "<|END_TEXT|>"
ACTION_START, ACTION_END = "<|START_ACTION|>", "<|END_ACTION|>"
#: the parser's literal: the generation prompt's stable part before the (forced) thinking marker
GEN_PREFIX = TURN_START + CHATBOT
GENERATION_PROMPT = GEN_PREFIX + THINK_START
PRESERVED_TOKENS = [TURN_START, TURN_END, CHATBOT, "<|USER_TOKEN|>", "<|SYSTEM_TOKEN|>", THINK_START, THINK_END,
                    TEXT_START, TEXT_END, ACTION_START, ACTION_END, "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>"]

# standard_json_tools' layout for this format: flat keys, array-wrapped, the model's integer-like id
_LAYOUT = SimpleNamespace(fun_name_is_key=False, id_field="", gen_id_field="tool_call_id",
                          parameter_order=["tool_call_id", "tool_name", "parameters"], openai_wrapper_trigger=False,
                          tools_array_wrapped=True)


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool) -> ArenaSetup:
    """The handler's arena for one request (``tool_choice`` ``auto`` / ``required`` / ``none``)."""
    p = _P()
    gen = p.literal(GEN_PREFIX).var()
    end = p.end().var()
    reasoning = p.eps().var()
    ends = [THINK_END, TEXT_START, ACTION_START]
    until = p._e(lambda: p.b.until_one_of(ends))
    if extract_reasoning:
        reasoning = p.optional(p.literal(THINK_START) + p.reasoning(until) + p.optional(p.literal(THINK_END))).var()
    else:
        reasoning = p.optional(p.content(p.literal(THINK_START) + until + p.optional(p.literal(THINK_END)))).var()
    text = (p.literal(TEXT_START) + p.content(p.until(TEXT_END)) + p.optional(p.literal(TEXT_END))).var()
    if not tools or tool_choice == "none":
        root = (gen + reasoning + text + p.optional(p.literal(TURN_END)) + end).ev()
        return ArenaSetup(None, False, [], p.b.parser(root))
    calls = _standard_json_tools(p, ACTION_START, ACTION_END, tools, parallel, True, "tool_name", "parameters",
                                 _LAYOUT).var()
    body = calls if tool_choice == "required" else p.choice(calls, text).var()
    root = (gen + reasoning + body + p.optional(p.literal(TURN_END)) + end).ev()
    lazy = tool_choice == "auto"
    return ArenaSetup(p.b.grammar(root, lazy=lazy), lazy, [(WORD, ACTION_START)], p.b.parser(root))


def preserved(src: str | None) -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return list(PRESERVED_TOKENS)


def setup(src: str | None, tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
          generation_prompt: str = "") -> ArenaSetup:
    """:func:`build` (the dispatch of :mod:`constrained.chat.handlers`)."""
    return build(tools, tool_choice=tool_choice, parallel=parallel, extract_reasoning=extract_reasoning)
