"""Gemma 4's tool calls, as llama-server's specialised handler builds them (common/parsers/gemma4.cpp,
``common_chat_params_init_gemma4``; the reply mapper ``common_chat_peg_gemma4_mapper``, chat-peg-parser.cpp).

Templates: every template that writes ``'<|tool_call>call:'`` (Gemma 4 31B it, and its interleaved variant). The
model thinks in ``<|channel>thought\\n...<channel|>`` blocks and calls a tool as::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

The arguments are Gemma's own notation (strings between ``<|"|>`` marks, bare keys, JSON numbers, booleans and
null, nested dicts and arrays), not JSON: the grammar is that notation for every tool (the tool's schema is not
used, as in llama-server) and the mapper turns it into JSON text, partial values included (an open string or dict
stays open). The arena is built in the order GCC evaluates the C++ (:mod:`constrained.chat.peg_arena`), so rule
names and arena ids (``until-28``) are llama-server's.

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now"}}])
    >>> h = build(tools, tool_choice="auto", parallel=True, extract_reasoning=True)
    >>> h.lazy, h.triggers
    (True, [(1, '<|tool_call>')])
    >>> m = h.parse(GENERATION_PROMPT, '<|channel>thought\\nhm<channel|>ok<|tool_call>call:now{tz:<|"|>UTC<|"|>}<tool_call|>')
    >>> m.reasoning_content, m.content, m.tool_calls
    ('hm', 'ok', [('now', '{"tz":"UTC"}', '')])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .peg import ChatMessage, _Node
from .peg_arena import ArenaSetup, Builder

__all__ = ["GENERATION_PROMPT", "PRESERVED_TOKENS", "build", "gemma4_to_json", "preserved_tokens"]

GENERATION_PROMPT = "<|turn>model\n"
PRESERVED_TOKENS = ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|turn>"]
WORD = 1
Q = '<|"|>'


def _escape_inner(s: str) -> str:
    # escape_json_string_inner: nlohmann's dump without the quotes
    return json.dumps(s, ensure_ascii=False)[1:-1]


def gemma4_to_json(node: _Node) -> str:
    """``gemma4_to_json``: a Gemma 4 value's AST (rule nodes) as JSON text; a partial string, array or dict stays
    open.

    Example:
        >>> from constrained.chat.peg import _Node
        >>> gemma4_to_json(_Node("", "1", [], rule="gemma4-number"))
        '1'
    """
    if not node.text:
        return ""
    r = node.rule
    if r in ("gemma4-number", "gemma4-bool", "gemma4-null"):
        return node.text
    if r == "gemma4-string-content":
        return _escape_inner(node.text)
    if r == "gemma4-string":
        out = '"'
        if node.children:
            out += gemma4_to_json(node.children[0])
            if not node.partial:
                out += '"'
        return out
    if r in ("gemma4-array", "gemma4-dict"):
        inner = ",".join(gemma4_to_json(c) for c in node.children)
        opener, closer = ("[", "]") if r == "gemma4-array" else ("{", "}")
        return opener + inner + ("" if node.partial else closer)
    if r == "gemma4-dict-key-name":
        return node.text
    if r == "gemma4-dict-key":
        out = '"'
        if node.children:
            out += _escape_inner(gemma4_to_json(node.children[0]))
        if not node.partial:
            out += '":'
        return out
    if r == "gemma4-dict-kv":
        return "".join(gemma4_to_json(c) for c in node.children)
    if r == "gemma4-value":
        return gemma4_to_json(node.children[0]) if node.children else ""
    return ""


def _find_by_tag(node: _Node, tag: str, depth: int = 3) -> _Node | None:
    # common_peg_ast_arena::find_by_tag (depth-first, max_depth 3)
    for c in node.children:
        if c.tag == tag:
            return c
        if depth > 1:
            f = _find_by_tag(c, tag, depth - 1)
            if f is not None:
                return f
    return None


def _visit(node: _Node, msg: ChatMessage) -> None:
    # common_chat_peg_gemma4_mapper::visit
    if node.tag == "reasoning":
        msg.reasoning_content += node.text
        return
    if node.tag == "content":
        msg.content += node.text
        return
    if node.tag == "tool":
        name, args = _find_by_tag(node, "tool-name"), _find_by_tag(node, "tool-args")
        if name is not None and args is not None and not name.partial:
            msg.tool_calls.append((name.text, gemma4_to_json(args.children[0]) if args.children else "", ""))
        return
    for c in node.children:
        _visit(c, msg)


class Gemma4Setup(ArenaSetup):
    """The arena's answer, read by Gemma 4's mapper (its arguments become JSON)."""

    FORMAT = "peg-gemma4"

    def map_nodes(self, nodes: list[Any]) -> ChatMessage:
        msg = ChatMessage()
        for n in nodes:
            _visit(n, msg)
        return msg


def preserved_tokens(src: str = "") -> list[str]:
    """The handler's preserved tokens (whatever the request)."""
    return list(PRESERVED_TOKENS)


def build(tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool, src: str = "",
          generation_prompt: str = "", enable_thinking: bool = True) -> Gemma4Setup:
    """The handler's grammar and parser for ``tools`` (:class:`~constrained.chat.tools.Tool`; ``tool_choice``
    ``auto`` / ``required`` / ``none``; ``src`` and ``generation_prompt`` are not used by this handler). The C++ is
    followed expression by expression, right operands of ``+`` and ``|`` first."""
    b = Builder()
    start = b.rule("start", b.optional(b.literal("<|turn>model\n")))
    if extract_reasoning:
        close = b.literal("<channel|>")
        body = b.tag("reasoning", b.until("<channel|>"))
        sp = b.space()
        b.rule("thought", b.seq(b.seq(b.seq(b.literal("<|channel>thought"), sp), body), close))
    else:
        close = b.literal("<channel|>")
        body = b.until("<channel|>")
        sp = b.space()
        b.rule("thought", b.tag("content", b.seq(b.seq(b.seq(b.literal("<|channel>thought"), sp), body), close)))
    not_thought = b.negate(b.literal("thought"))
    consume_empty = b.gbnf(b.zero_or_more(b.seq(b.literal("<|channel>"), not_thought)), "")
    no_channel = b.negate(b.literal("<|channel>"))
    ref_thought = b.ref("thought")
    thought = b.choice(b.seq(b.seq(b.peek(b.literal("<|channel>")), consume_empty), ref_thought), no_channel)

    active = bool(tools) and tool_choice != "none"
    if not active:
        content = b.rule("content", b.tag("content", b.until_one_of(["<|channel>", "<channel|>"])))
        message = b.rule("message", b.seq(thought, content))
        root = b.seq(start, b.repeat(message, 1, -1))
        return Gemma4Setup(None, False, [], b.parser(root))

    b.rule("gemma4-string-content", b.until(Q))
    close_q = b.literal(Q)
    content_ref = b.ref("gemma4-string-content")
    b.rule("gemma4-string", b.seq(b.seq(b.literal(Q), content_ref), close_q))
    b.rule("gemma4-bool", b.json_bool())
    b.rule("gemma4-null", b.json_null())
    b.rule("gemma4-number", b.json_number())
    colon = b.literal(":")
    b.rule("gemma4-dict-key", b.seq(b.rule("gemma4-dict-key-name", b.chars("[^:}]", 1, -1)), colon))
    value_ref = b.ref("gemma4-value")
    sp = b.space()
    b.rule("gemma4-dict-kv", b.seq(b.seq(b.ref("gemma4-dict-key"), sp), value_ref))

    def container(member_rule: str, opener: str, closer: str) -> int:
        ws = b.space()
        member = b.ref(member_rule)
        members = b.seq(member, b.zero_or_more(b.seq(b.literal(","), ws, member)))
        o = b.literal(opener)
        empty = b.literal(closer)
        return b.seq(o, ws, b.choice(empty, b.seq(members, ws, b.literal(closer))))

    b.rule_fn("gemma4-dict", lambda: container("gemma4-dict-kv", "{", "}"))
    b.rule_fn("gemma4-array", lambda: container("gemma4-value", "[", "]"))
    b.rule_fn("gemma4-value", lambda: b.choice(*[b.ref(n) for n in (
        "gemma4-string", "gemma4-dict", "gemma4-array", "gemma4-number", "gemma4-bool", "gemma4-null")]))

    choice = b.choice()
    for t in tools:
        peek = b.peek(b.literal("{"))
        name = b.atomic(b.tag("tool-name", b.literal(t.name)))
        opened = b.atomic(b.tag("tool-open", b.seq(name, peek)))
        args = b.tag("tool-args", b.ref("gemma4-dict"))
        choice = b.choice(choice, b.rule(f"tool-{t.name}", b.tag("tool", b.seq(opened, args))))
    call = b.seq(b.seq(b.literal("<|tool_call>call:"), choice), b.literal("<tool_call|>"))
    lo, hi = (1 if tool_choice == "required" else 0), (-1 if parallel else 1)
    tool_call = b.trigger_rule("tool-call", b.repeat(call, lo, hi))
    if tool_choice == "required":
        root = b.seq(b.seq(start, thought), tool_call)
    else:
        scan = b.rule("scan-to-toolcall", b.until("<|tool_call>"))
        content = b.rule("content", b.tag("content", b.until_one_of(["<|channel>", "<channel|>", "<|tool_call>"])))
        message = b.rule("message", b.seq(thought, content))
        root = b.seq(b.seq(b.seq(start, b.zero_or_more(message)), scan), tool_call)
    lazy = tool_choice != "required"
    return Gemma4Setup(b.grammar(root, lazy=lazy), lazy, [(WORD, "<|tool_call>")], b.parser(root))
