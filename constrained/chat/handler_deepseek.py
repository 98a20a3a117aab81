"""DeepSeek V3.2 / V4's DSML tool calls, as llama-server's specialised handler builds them (common/parsers/deepseek.cpp,
``common_chat_params_init_deepseek_v3_2``).

Templates: those that define ``dsml_token`` (DeepSeek V3.2, V4, V4 Flash). V3.2 names the call block
``function_calls``, V4 ``tool_calls``. A reply is ``<think>`` reasoning (the generation prompt opens it), content,
then::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

A parameter whose schema may be a string is raw text (``string="true"``), any other JSON under its schema; required
parameters in schema order, then optional ones in any order. With thinking on, the calls may come straight out of
the reasoning (the call block ends it). The arena is built in the order GCC evaluates the C++
(:mod:`constrained.chat.peg_arena`), so rule names and arena ids are llama-server's; the standard mapper reads the
reply.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now"}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True, src="function_calls")
    >>> h.lazy, h.triggers
    (True, [(1, '<｜DSML｜function_calls>')])
    >>> m = h.parse("<｜Assistant｜><think>", 'hm</think>ok\\n\\n<｜DSML｜function_calls>\\n<｜DSML｜invoke name="now">\\n'
    ...             '</｜DSML｜invoke>\\n</｜DSML｜function_calls>')
    >>> m.reasoning_content, m.content, m.tool_calls
    ('hm', 'ok', [('now', '{}', '')])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .peg_arena import ArenaSetup, Builder, _may_be_string
from .qwen3_coder import _params

__all__ = ["GENERATION_PROMPT", "build", "is_v4", "preserved_tokens"]

GENERATION_PROMPT = "<｜Assistant｜>"
DSML = "｜DSML｜"
THINK_START, THINK_END = "<think>", "</think>"
WORD = 1


def is_v4(src: str) -> bool:
    """V4 names its call block ``tool_calls`` (no ``function_calls`` in the source)."""
    return "function_calls" not in src


def preserved_tokens(src: str = "") -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return [DSML, THINK_START, THINK_END]


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool, src: str = "",
          generation_prompt: str = "", enable_thinking: bool = True) -> ArenaSetup:
    """The handler's grammar and parser for ``tools`` (:class:`~constrained.chat.tools.Tool`; ``tool_choice``
    ``auto`` / ``required`` / ``none``; ``src`` the template, which tells V4 from V3.2; ``enable_thinking`` the
    request's; ``generation_prompt`` not used)."""
    v4 = is_v4(src)
    block = "tool_calls" if v4 else "function_calls"
    fc_start, fc_end = f"<{DSML}{block}>", f"</{DSML}{block}>"
    invoke_start, invoke_end = f"<{DSML}invoke", f"</{DSML}invoke>"
    param_start, param_end = f"<{DSML}parameter", f"</{DSML}parameter>"
    require = tool_choice == "required"
    has_calls = bool(tools) and tool_choice != "none"

    b = Builder()
    gen = b.literal(GENERATION_PROMPT)
    end = b.end()
    choice = b.choice()
    if has_calls:
        for t in tools:
            required, optional = [], []
            for pname, node, req in _params(t):
                close = b.atomic(b.tag("tool-arg-close", b.literal(param_end)))
                if _may_be_string(node):
                    value = b.tag("tool-arg-string-value", b.until(param_end))
                    is_string = "true"
                else:
                    value = b.tag("tool-arg-value", b.schema(b.json(), f"tool-{t.name}-arg-{pname}-schema", node))
                    is_string = "false"
                attr = b.literal(f'" string="{is_string}">')
                arg_name = b.atomic(b.tag("tool-arg-name", b.literal(pname)))
                opened = b.seq(b.seq(b.literal(f'{param_start} name="'), arg_name), attr)
                arg_open = b.atomic(b.tag("tool-arg-open", opened))
                arg = b.tag("tool-arg", b.seq(b.seq(arg_open, value), close))
                (required if req else optional).append(b.rule(f"tool-{t.name}-arg-{pname}", arg))
            args = b.eps()
            for i, r in enumerate(required):
                if i > 0:
                    args = b.seq(args, b.space())
                args = b.seq(args, r)
            if optional:
                any_opt = b.choice()
                for o in optional:
                    any_opt = b.choice(any_opt, o)
                args = b.seq(args, b.repeat(b.seq(b.space(), any_opt), 0, -1))
            close_t = b.atomic(b.tag("tool-close", b.literal(invoke_end)))
            sp = b.space()
            nl = b.literal('">\n')
            name = b.atomic(b.tag("tool-name", b.literal(t.name)))
            opened = b.seq(b.seq(b.literal(f'{invoke_start} name="'), name), nl)
            tool_open = b.atomic(b.tag("tool-open", opened))
            func = b.tag("tool", b.seq(b.seq(b.seq(tool_open, args), sp), close_t))
            choice = b.choice(choice, b.rule(f"tool-{t.name}", func))

    b.eps()                                   # tool_calls = p.eps()
    if parallel:
        l2 = b.literal(fc_end)
        s2 = b.space()
        more = b.zero_or_more(b.seq(b.space(), choice))
        s1 = b.space()
        body = b.seq(b.seq(b.seq(b.seq(b.seq(b.literal(fc_start), s1), choice), more), s2), l2)
    else:
        l2 = b.literal(fc_end)
        s2 = b.space()
        s1 = b.space()
        body = b.seq(b.seq(b.seq(b.seq(b.literal(fc_start), s1), choice), s2), l2)
    tool_calls = b.trigger_rule("tool-call", body)
    reasoning = b.eps()
    reasoning_with_tc = b.eps()
    obligatory = tool_calls
    allow = False
    if not require:
        tool_calls = b.optional(tool_calls)
    if extract_reasoning and enable_thinking:
        r = b.tag("reasoning", b.until(THINK_END))
        reasoning = b.optional(b.seq(b.seq(b.literal(THINK_START), r), b.literal(THINK_END)))
        sp = b.space()
        r = b.tag("reasoning", b.until_one_of(["\n\n" + fc_start, fc_start, THINK_END]))
        reasoning_with_tc = b.seq(b.seq(b.seq(b.literal(THINK_START), r), sp), obligatory)
        allow = True
    elif extract_reasoning:
        if v4:
            reasoning = b.optional(b.literal(THINK_END))
        else:
            l2 = b.literal(THINK_END)
            u = b.until(THINK_END)
            reasoning = b.optional(b.seq(b.seq(b.literal(THINK_START), u), l2))
    if not has_calls:
        content = b.tag("content", b.rest())
        root = b.seq(b.seq(b.seq(gen, reasoning), content), end)
        return ArenaSetup(None, False, [], b.parser(root))
    sp = b.space()
    content = b.tag("content", b.until_one_of(["\n\n" + fc_start, fc_start]))
    cbt = b.seq(b.seq(b.negate(b.literal(THINK_START)), content), sp)
    if allow:
        alt = b.seq(b.seq(reasoning, cbt), tool_calls)
        root = b.seq(b.seq(gen, b.choice(reasoning_with_tc, alt)), end)
    else:
        root = b.seq(b.seq(b.seq(b.seq(gen, reasoning), cbt), tool_calls), end)
    lazy = not require
    return ArenaSetup(b.grammar(root, lazy=lazy), lazy, [(WORD, fc_start)], b.parser(root))
