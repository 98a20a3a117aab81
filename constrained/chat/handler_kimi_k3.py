"""Kimi K3's XTML tool calls, as llama-server's specialised handler builds them (common/parsers/kimi-k3.cpp,
``common_chat_params_init_kimi_k3``).

Templates: those with ``<|open|>``, ``<|close|>`` and ``<|end_of_msg|>`` (Kimi K3). Sections are tags
``<|open|>name attrs<|sep|> ... <|close|>name<|sep|>``; the generation prompt opens the message and its think
section. A reply is reasoning, ``<|open|>response<|sep|>`` content, then one tools section::

    <|open|>tools<|sep|><|open|>call tool="get_weather" index="0"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>
    <|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>

An argument is a raw string when its schema's ``type`` is ``string`` (or absent), else its text is the JSON value;
the ``type`` / ``index`` attributes are skipped. Calls are not limited by ``parallel_tool_calls`` (as llama-server).
The arena is built in the order GCC evaluates the C++ (:mod:`constrained.chat.peg_arena`); the standard mapper reads
the reply.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now"}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True)
    >>> h.lazy, h.triggers
    (True, [(1, '<|open|>tools<|sep|>')])
    >>> m = h.parse(GENERATION_PROMPT, 'hm<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|>'
    ...             '<|open|>tools<|sep|><|open|>call tool="now" index="0"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>')
    >>> m.reasoning_content, m.content, m.tool_calls
    ('hm', 'ok', [('now', '{}', '')])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .peg_arena import ArenaSetup, Builder

__all__ = ["GENERATION_PROMPT", "build", "preserved_tokens"]

SEP = "<|sep|>"
MSG_START = '<|open|>message role="assistant"<|sep|>'
THINK_START, THINK_END = "<|open|>think<|sep|>", "<|close|>think<|sep|>"
RESP_START, RESP_END = "<|open|>response<|sep|>", "<|close|>response<|sep|>"
TOOLS_START, TOOLS_END = "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"
CALL_START, CALL_END = '<|open|>call tool="', "<|close|>call<|sep|>"
ARG_START, ARG_END = '<|open|>argument key="', "<|close|>argument<|sep|>"
MSG_END, EOM = "<|close|>message<|sep|>", "<|end_of_msg|>"
GENERATION_PROMPT = MSG_START + THINK_START
WORD = 1


def preserved_tokens(src: str = "") -> list[str]:
    """The markers only (tag names are ordinary words)."""
    return ["<|open|>", "<|close|>", SEP, EOM]


def _parameters(tool: Any) -> Any:
    # common_chat_tool_parameters
    p = tool.parameters
    return {"type": "object", "properties": {}} if p is None or p == {} else p


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool, src: str = "",
          generation_prompt: str = "", enable_thinking: bool = True) -> ArenaSetup:
    """The handler's grammar and parser for ``tools`` (:class:`~constrained.chat.tools.Tool`; ``tool_choice``
    ``auto`` / ``required`` / ``none``; ``parallel``, ``src`` and ``generation_prompt`` are not used)."""
    b = Builder()
    end = b.end()
    start = b.optional(b.literal(MSG_START))
    tag = "reasoning" if extract_reasoning else "content"
    think_body = b.tag(tag, b.until_one_of([THINK_END, RESP_START]))
    close_think = b.optional(b.literal(THINK_END))
    reasoning = b.optional(b.seq(b.seq(b.optional(b.literal(THINK_START)), think_body), close_think))
    close_resp = b.optional(b.literal(RESP_END))
    body = b.tag("content", b.until_one_of([RESP_END, TOOLS_START, MSG_END]))
    response = b.seq(b.seq(b.optional(b.literal(RESP_START)), body), close_resp)
    eom = b.optional(b.literal(EOM))
    trailer = b.seq(b.optional(b.literal(MSG_END)), eom)
    if not tools or tool_choice == "none":
        root = b.seq(b.seq(b.seq(b.seq(start, reasoning), response), trailer), end)
        return ArenaSetup(None, False, [], b.parser(root))
    choices = b.choice()
    for t in tools:
        schema = _parameters(t)
        args = b.eps()
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(props, dict) and props:
            arg_choices = b.choice()
            for key, prop in props.items():
                typ = prop["type"] if isinstance(prop, dict) and isinstance(prop.get("type"), str) else "string"
                value = b.tag("tool-arg-string-value" if typ == "string" else "tool-arg-value", b.until(ARG_END))
                close = b.atomic(b.tag("tool-arg-close", b.literal(ARG_END)))
                sep = b.literal(SEP)
                skip = b.until(SEP)
                quote = b.literal('"')
                name = b.atomic(b.tag("tool-arg-name", b.literal(key)))
                opened = b.atomic(b.tag("tool-arg-open", b.literal(ARG_START)))
                seq = b.seq(b.seq(b.seq(b.seq(b.seq(b.seq(opened, name), quote), skip), sep), value), close)
                arg_choices = b.choice(arg_choices, b.rule(f"kimi-k3-arg-{t.name}-{key}", b.tag("tool-arg", seq)))
            args = b.zero_or_more(arg_choices)
        close_t = b.atomic(b.tag("tool-close", b.literal(CALL_END)))
        args_t = b.tag("tool-args", args)
        sep = b.literal(SEP)
        skip = b.until(SEP)
        quote = b.literal('"')
        name = b.atomic(b.tag("tool-name", b.literal(t.name)))
        opened = b.seq(b.seq(b.seq(b.seq(b.literal(CALL_START), name), quote), skip), sep)
        tool_open = b.atomic(b.tag("tool-open", opened))
        call = b.tag("tool", b.seq(b.seq(tool_open, args_t), close_t))
        choices = b.choice(choices, b.rule(f"kimi-k3-tool-{t.name}", call))
    eom2 = b.optional(b.literal(EOM))
    msg_end = b.optional(b.literal(MSG_END))
    tools_end = b.literal(TOOLS_END)
    calls = b.repeat(choices, 1, -1)
    section = b.seq(b.seq(b.seq(b.seq(b.literal(TOOLS_START), calls), tools_end), msg_end), eom2)
    tools_section = b.trigger_rule("kimi-k3-tool-call", section)
    required = tool_choice == "required"
    tools_p = tools_section if required else b.optional(tools_section)
    root = b.seq(b.seq(b.seq(b.seq(b.seq(start, reasoning), response), tools_p), trailer), end)
    return ArenaSetup(b.grammar(root, lazy=not required), not required, [(WORD, TOOLS_START)], b.parser(root))
