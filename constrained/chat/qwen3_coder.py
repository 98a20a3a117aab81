"""The Qwen3-Coder XML tool-call format, as llama-server's specialised handler builds it
(common/parsers/qwen3-coder.cpp, ``common_chat_params_init_qwen3_coder``).

Templates: Qwen3-Coder, Qwen 3.5 / 3.6, Nemotron 3 Nano, StepFun 3.5 Flash (every template with ``<tool_call>``,
``<function=`` and ``<parameter=`` that does not write ``'<tool_call><function=' ~ tool_call.name ~ '>'``). A call
is written as::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A string parameter's value is raw text up to ``\\n</parameter>\\n``; any other is JSON (a parameter that may be a
string or something else: JSON if it parses, else raw text). Required parameters in any order, then optional ones.
Thinking templates (``<think>`` in the source) get a reasoning block before the content; Qwen3-Coder (no
thinking) also triggers on a bare ``<function=name>`` and may omit the first ``<tool_call>``.

The PEG arena is built in llama.cpp's order (:mod:`constrained.chat.peg_arena`), so the grammar text, rule names
and arena ids (``ac-20``, ``until-211``) are llama-server's; the same arena parses the reply.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now", "parameters": {}}}])
    >>> h = build(tools, reasoning=True, extract_reasoning=True, tool_choice="auto", parallel=True, coder=False)
    >>> h.lazy, h.triggers
    (True, [(1, '<tool_call>')])
    >>> m = h.parse("<|im_start|>assistant\\n<think>\\n", "Hm.</think>\\n\\n<tool_call>\\n<function=now>\\n</function>\\n</tool_call>")
    >>> m.reasoning_content, m.content, m.tool_calls
    ('Hm.', '', [('now', '{}', '')])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .peg_arena import ArenaSetup, Builder, value_types

__all__ = ["GEN_PREFIX", "build", "is_qwen3_coder_template", "preserved_tokens", "supports_reasoning"]

GEN_PREFIX = "<|im_start|>assistant\n"

REASONING, CONTENT, TOOL, TOOL_OPEN, TOOL_CLOSE, TOOL_NAME, TOOL_ARGS = (
    "reasoning", "content", "tool", "tool-open", "tool-close", "tool-name", "tool-args")
TOOL_ARG, ARG_OPEN, ARG_CLOSE, ARG_NAME, ARG_VALUE, ARG_STRING = (
    "tool-arg", "tool-arg-open", "tool-arg-close", "tool-arg-name", "tool-arg-value", "tool-arg-string-value")


def is_qwen3_coder_template(src: str | None) -> bool:
    """The dispatch of ``common_chat_try_specialized_template`` (chat.cpp:1213) for this handler, after every
    handler tried before it."""
    from .autoparser_prompt import specialized_handler

    return bool(src) and specialized_handler(src or "") == "qwen3_coder"


def supports_reasoning(src: str | None) -> bool:
    """``tmpl.source().find("<think>")``: a thinking template (Qwen 3.5, Nemotron 3, StepFun), not Qwen3-Coder."""
    return "<think>" in (src or "")


def preserved_tokens(src: str | None) -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return ["<tool_call>", "</tool_call>"] + (["<think>", "</think>"] if supports_reasoning(src) else [])


def _params(tool: Any) -> list[tuple[str, Any, bool]]:
    """``foreach_parameter``: the parameters' (name, schema node, required), from ``common_chat_tool_parameters``
    (absent, null or ``{}``: an object without properties); none when the schema is not an object."""
    from ..json_schema import nodes as N
    from ..json_schema.json_text import load, u

    params = tool.parameters
    if params is None or params == {} or not isinstance(params, (dict, bool, list, str, int, float)):
        params = {"type": "object", "properties": {}}
    root = N.build_document(load(params)).root
    if root.kind != N.OBJECT:
        return []
    return [(u(name), node, req) for name, node, req in root.properties]


def build(tools: Sequence[Any], *, reasoning: bool, extract_reasoning: bool, tool_choice: str, parallel: bool,
          coder: bool, names: Sequence[str] | None = None) -> ArenaSetup:
    """The handler's parser and grammar for ``tools`` (:class:`~constrained.chat.tools.Tool`).

    ``reasoning``: the template thinks (``<think>`` in it); ``extract_reasoning``: ``reasoning_format`` is not
    ``none``; ``tool_choice``: ``auto`` (lazy grammar), ``required`` (eager, at least one call) or ``none``
    (content only, no grammar); ``coder``: Qwen3-Coder (no thinking; bare ``<function=name>`` triggers).
    ``names`` (ours, a named ``tool_choice``): only these tools in the grammar and parser.
    """
    b = Builder()
    gen = b.literal(GEN_PREFIX)
    think = b.eps()
    if reasoning and extract_reasoning:
        # optional("<think>" + space() + reasoning(until_one_of(...)) + (literal("</think>") | peek(literal(...))))
        # GCC builds the right operand of + and | first
        peek = b.peek(b.literal("<tool_call>"))
        end = b.choice(b.literal("</think>"), peek)
        body = b.tag(REASONING, b.until_one_of(["</think>", "<tool_call>"]))
        sp = b.space()
        opening = b.seq(b.literal("<think>"), sp)
        think = b.optional(b.seq(b.seq(opening, body), end))
    chosen = [t for t in tools if names is None or t.name in names]
    if not chosen or tool_choice == "none":
        content = b.tag(CONTENT, b.rest())
        root = b.seq(gen, b.seq(think, b.space(), content))
        return ArenaSetup(None, False, [], b.parser(root))

    starts = ["<tool_call>"] + ([f"<function={t.name}>" for t in chosen] if coder else [])
    arg_close = b.atomic(b.tag(ARG_CLOSE, b.literal("\n</parameter>\n")))
    s_value = b.tag(ARG_STRING, b.until("\n</parameter>\n"))
    arg_string = b.rule("xml-arg-string", b.ac(b.seq(s_value, arg_close), ["\n</parameter>\n"]))
    choice = b.choice()
    for t in chosen:
        required, optional = [], []
        for pname, node, req in _params(t):
            rule_name = f"tool-{t.name}-arg-{pname}"
            arg_name = b.atomic(b.tag(ARG_NAME, b.literal(pname)))
            opened = b.seq(b.seq(b.literal("<parameter="), arg_name), b.literal(">\n"))
            arg_open = b.atomic(b.tag(ARG_OPEN, opened))
            types = value_types(node)
            value = b.eps()
            if "string" not in types:
                schema = b.schema(b.json(), rule_name + "-schema", node)
                value = b.seq(b.tag(ARG_VALUE, schema), arg_close)
            elif types == {"string"}:
                value = arg_string
            else:
                jv = b.choice()
                if "object" in types:
                    jv = b.choice(jv, b.json_object())
                if "array" in types:
                    jv = b.choice(jv, b.json_array())
                if "number" in types or "integer" in types:
                    jv = b.choice(jv, b.json_number())
                if "boolean" in types:
                    jv = b.choice(jv, b.json_bool())
                if "null" in types:
                    jv = b.choice(jv, b.json_null())
                typed = b.atomic(b.seq(b.tag(ARG_VALUE, jv), arg_close))
                value = b.gbnf(b.choice(typed, arg_string), "xml-arg-string")
            arg_rule = b.rule(rule_name, b.tag(TOOL_ARG, b.seq(arg_open, value)))
            (required if req else optional).append(arg_rule)
        args = b.permute(f"tool-{t.name}-args", required)
        if optional:
            args = b.seq(args, b.zero_or_more(b.choice(*optional)))
        close = b.atomic(b.tag(TOOL_CLOSE, b.literal("</function>\n")))
        args_tag = b.tag(TOOL_ARGS, args)
        name = b.atomic(b.tag(TOOL_NAME, b.literal(t.name)))
        opened = b.seq(b.seq(b.literal("<function="), name), b.literal(">\n"))
        tool_open = b.atomic(b.tag(TOOL_OPEN, opened))
        func = b.tag(TOOL, b.seq(b.seq(tool_open, args_tag), close))
        choice = b.choice(choice, b.rule(f"tool-{t.name}", func))
    min_calls = 1 if tool_choice == "required" else 0
    sp = b.space()
    body = b.seq(b.seq(choice, b.literal("</tool_call>")), sp)
    call = b.rule("tool-call", b.seq(b.literal("<tool_call>\n"), body))
    first = b.rule("tool-call-first", b.seq(b.optional(b.literal("<tool_call>\n")), body)) if coder else call
    calls = b.seq(first, b.zero_or_more(call)) if parallel else first
    tool_calls = b.trigger_rule("tool-call-root", b.repeat(calls, min_calls, 1))
    content = b.tag(CONTENT, b.until_one_of(starts))
    root = b.seq(gen, b.seq(b.seq(think, b.space(), content), b.space(), tool_calls))
    lazy = tool_choice == "auto"
    return ArenaSetup(b.grammar(root, lazy=lazy), lazy, [(1, w) for w in starts] if lazy else [], b.parser(root))
