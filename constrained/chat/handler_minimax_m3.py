"""MiniMax M3's namespaced XML tool calls, as llama-server's specialised handler builds them
(common/parsers/minimax-m3.cpp, ``common_chat_params_init_minimax_m3``; the reply mapper
``common_chat_peg_minimax_m3_mapper``, chat-peg-parser.cpp).

Templates: those with ``]<]minimax[>[``, ``<tool_call>`` and ``<invoke name=`` (MiniMax M3). Every tool tag carries
the namespace token ``]<]minimax[>[``; a parameter is an element named after it, objects and arrays are expanded
into nested elements (``<item>`` per array element)::

    <mm:think>reasoning</mm:think>content]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="get_weather">
    ]<]minimax[>[<city>Paris]<]minimax[>[</city>
    ]<]minimax[>[<days>3]<]minimax[>[</days>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

A value whose schema may be a string is raw text, an object with properties or an array is nested elements, any
other JSON under its schema; required members in schema order, then optional ones in any order. The mapper
rebuilds the JSON arguments from the nested elements (partial ones left open). The arena is built in the order GCC
evaluates the C++ (:mod:`constrained.chat.peg_arena`), so rule names and arena ids are llama-server's.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now", "parameters": {"type": "object",
    ...     "properties": {"tz": {"type": "string"}}}}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True, generation_prompt="]~b]ai\\n")
    >>> h.lazy, h.triggers
    (True, [(1, ']<]minimax[>[<tool_call>')])
    >>> m = h.parse("]~b]ai\\n", '<mm:think>hm</mm:think>ok]<]minimax[>[<tool_call>]<]minimax[>[<invoke name="now">'
    ...             ']<]minimax[>[<tz>UTC]<]minimax[>[</tz>]<]minimax[>[</invoke>]<]minimax[>[</tool_call>')
    >>> m.reasoning_content, m.content, m.tool_calls
    ('hm', 'ok', [('now', '{"tz":"UTC"}', '')])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .peg import ChatMessage, _Node
from .peg_arena import ArenaSetup, Builder, _may_be_string

__all__ = ["GENERATION_PROMPT", "NS", "build", "preserved_tokens"]

NS = "]<]minimax[>["
THINK_START, THINK_END = "<mm:think>", "</mm:think>"
FC_START, FC_END, INVOKE_END = NS + "<tool_call>", NS + "</tool_call>", NS + "</invoke>"
GENERATION_PROMPT = "]~b]ai\n"
ARG, ARG_NAME, ARG_VALUE, ARG_STRING = "tool-arg", "tool-arg-name", "tool-arg-value", "tool-arg-string-value"
ARG_OBJECT, ARG_ARRAY, ARG_ITEM = "tool-arg-object", "tool-arg-array", "tool-arg-item"
WORD = 1


def preserved_tokens(src: str = "") -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return [NS, "<tool_call>", "</tool_call>", THINK_START, THINK_END]


# ---- the mapper (chat-peg-parser.cpp: minimax_m3_*) ----------------------------------------------------------------
def _find_by_tag(node: _Node, tag: str, depth: int = 3) -> _Node | None:
    for c in node.children:
        if c.tag == tag:
            return c
        if depth > 1:
            f = _find_by_tag(c, tag, depth - 1)
            if f is not None:
                return f
    return None


def _collect(node: _Node, tag: str, out: list[_Node]) -> None:
    for c in node.children:
        if c.tag == tag:
            out.append(c)
        else:
            _collect(c, tag, out)


def _value_of(node: _Node) -> _Node | None:
    for c in node.children:
        if c.tag in (ARG_VALUE, ARG_STRING, ARG_OBJECT, ARG_ARRAY):
            return c
    return None


def _value_to_json(node: _Node | None, closed: bool) -> str:
    if node is None:
        return ""
    if node.tag == ARG_OBJECT:
        return _container(node, True, closed)
    if node.tag == ARG_ARRAY:
        return _container(node, False, closed)
    if node.tag == ARG_STRING:
        return '"' + json.dumps(node.text, ensure_ascii=False)[1:-1] + ('"' if closed else "")
    return node.text


def _member_to_json(node: _Node) -> str:
    name = _find_by_tag(node, ARG_NAME)
    if name is None:
        return ""
    return json.dumps(name.text, ensure_ascii=False) + ":" + _value_to_json(_value_of(node), not node.partial)


def _container(node: _Node, is_object: bool, closed: bool) -> str:
    entries: list[_Node] = []
    _collect(node, ARG if is_object else ARG_ITEM, entries)
    parts = []
    for e in entries:
        text = _member_to_json(e) if is_object else _value_to_json(_value_of(e), not e.partial)
        if text:
            parts.append(text)
    return ("{" if is_object else "[") + ",".join(parts) + (("}" if is_object else "]") if closed else "")


def _visit(node: _Node, msg: ChatMessage) -> None:
    if node.tag == "reasoning":
        msg.reasoning_content += node.text
        return
    if node.tag == "content":
        msg.content += node.text
        return
    if node.tag == "tool":
        name = _find_by_tag(node, "tool-name")
        if name is not None:
            msg.tool_calls.append((name.text, _container(node, True, not node.partial), ""))
        return
    for c in node.children:
        _visit(c, msg)


class MinimaxM3Setup(ArenaSetup):
    """The arena's answer, read by MiniMax M3's mapper (nested elements become JSON arguments)."""

    FORMAT = "peg-minimax-m3"

    def map_nodes(self, nodes: list[Any]) -> ChatMessage:
        msg = ChatMessage()
        for n in nodes:
            _visit(n, msg)
        return msg


# ---- the arena (minimax-m3.cpp) --------------------------------------------------------------------------------
def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool, src: str = "",
          generation_prompt: str = GENERATION_PROMPT, enable_thinking: bool = True) -> MinimaxM3Setup:
    """The handler's grammar and parser for ``tools`` (:class:`~constrained.chat.tools.Tool`; ``tool_choice``
    ``auto`` / ``required`` / ``none``; ``generation_prompt`` the request's, its part before ``<mm:think>`` starts
    the parser; ``enable_thinking`` the request's)."""
    from ..json_schema import nodes as N
    from ..json_schema.json_text import load, u

    b = Builder()
    if not generation_prompt:
        gen = b.eps()
    else:
        i = generation_prompt.find(THINK_START)
        gen = b.literal(generation_prompt if i < 0 else generation_prompt[:i])
    end = b.end()
    reasoning = b.eps()
    if extract_reasoning:
        if enable_thinking:
            close = b.literal(THINK_END)
            body = b.ac(b.seq(b.tag("reasoning", b.until(THINK_END)), close), [THINK_END])
            sp = b.space()
            block = b.seq(b.seq(b.literal(THINK_START), sp), body)
        else:
            close = b.literal(THINK_END)
            body = b.ac(b.seq(b.until(THINK_END), close), [THINK_END])
            block = b.seq(b.literal(THINK_START), body)
        reasoning = b.optional(b.choice(block, b.literal(THINK_END)))
    if not tools or tool_choice == "none":
        content = b.tag("content", b.rest())
        root = b.seq(b.seq(b.seq(gen, reasoning), content), end)
        return MinimaxM3Setup(None, False, [], b.parser(root))

    choice = b.choice()
    for t in tools:
        params = t.parameters
        if params is None or params == {}:
            params = {"type": "object", "properties": {}}
        doc = N.build_document(load(params))

        def element_of(tag: str, schema: Any, rule_name: str) -> int:
            close = NS + "</" + tag + ">"
            value = value_of(schema, rule_name, close)
            gt = b.literal(">")
            name = b.atomic(b.tag(ARG_NAME, b.literal(tag)))
            opened = b.atomic(b.tag("tool-arg-open", b.seq(b.seq(b.literal(NS + "<"), name), gt)))
            return b.rule(rule_name, b.tag(ARG, b.seq(opened, value)))

        def value_of(schema: Any, rule_name: str, close: str) -> int:
            close_tag = b.atomic(b.tag("tool-arg-close", b.literal(close)))
            if _may_be_string(schema):
                return b.ac(b.seq(b.tag(ARG_STRING, b.until(close)), close_tag), [close])
            if schema.kind == N.ANY_OF:
                alts = [value_of(a, f"{rule_name}-{i}", close) for i, a in enumerate(schema.children)]
                return b.choice(*alts)
            if schema.kind == N.OBJECT and schema.properties:
                sp = b.space()
                return b.seq(b.seq(b.tag(ARG_OBJECT, members_of(schema, rule_name)), sp), close_tag)
            if schema.kind == N.ARRAY:
                item_close = NS + "</item>"
                v = value_of(schema.items, rule_name + "-item", item_close)
                item = b.rule(rule_name + "-item", b.tag(ARG_ITEM, b.seq(b.literal(NS + "<item>"), v)))
                sp = b.space()
                arr = b.tag(ARG_ARRAY, b.repeat(b.seq(b.space(), item), 0, -1))
                return b.seq(b.seq(arr, sp), close_tag)
            return b.seq(b.tag(ARG_VALUE, b.schema(b.json(), rule_name + "-schema", schema)), close_tag)

        def members_of(obj: Any, prefix: str) -> int:
            required, optional = [], []
            for pname, node, req in obj.properties:
                name = u(pname)
                (required if req else optional).append(element_of(name, node, f"{prefix}-{name}"))
            members = b.eps()
            for i, r in enumerate(required):
                if i > 0:
                    members = b.seq(members, b.space())
                members = b.seq(members, r)
            if optional:
                any_opt = b.choice()
                for o in optional:
                    any_opt = b.choice(any_opt, o)
                members = b.seq(members, b.repeat(b.seq(b.space(), any_opt), 0, -1))
            return members

        body = b.eps()
        if doc.root.kind == N.OBJECT:
            body = members_of(doc.root, f"tool-{t.name}-arg")
        close_t = b.atomic(b.tag("tool-close", b.literal(INVOKE_END)))
        sp2 = b.space()
        sp1 = b.space()
        q = b.literal('">')
        name = b.atomic(b.tag("tool-name", b.literal(t.name)))
        tool_open = b.atomic(b.tag("tool-open", b.seq(b.seq(b.literal(NS + '<invoke name="'), name), q)))
        func = b.tag("tool", b.seq(b.seq(b.seq(b.seq(tool_open, sp1), body), sp2), close_t))
        choice = b.choice(choice, b.rule(f"tool-{t.name}", func))

    required = tool_choice == "required"
    b.eps()                                   # tool_calls = p.eps()
    l2 = b.literal(FC_END)
    s2 = b.space()
    if parallel:
        more = b.zero_or_more(b.seq(b.space(), choice))
        s1 = b.space()
        calls = b.seq(b.seq(b.seq(b.seq(b.seq(b.literal(FC_START), s1), choice), more), s2), l2)
    else:
        s1 = b.space()
        calls = b.seq(b.seq(b.seq(b.seq(b.literal(FC_START), s1), choice), s2), l2)
    tool_calls = b.trigger_rule("tool-call", calls)
    if not required:
        tool_calls = b.optional(tool_calls)
    content = b.tag("content", b.until(FC_START))
    root = b.seq(b.seq(b.seq(b.seq(gen, reasoning), content), tool_calls), end)
    return MinimaxM3Setup(b.grammar(root, lazy=not required), not required, [(WORD, FC_START)], b.parser(root))
