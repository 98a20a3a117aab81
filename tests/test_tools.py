"""Tool-call setup and reply parsing (the llama-server comparisons are in test_tools_server.py)."""

from __future__ import annotations

import json

import pytest

from constrained.chat.tools import ToolError, detect_format, parse_reply, tool_call_setup
from constrained.errors import ConstrainedError
from constrained.grammar import Grammar
from constrained.grammar.lazy import LazyMatcher
from constrained.vocab import Vocabulary

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "now"}}]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


def test_parse_content_and_calls() -> None:
    s = tool_call_setup(TOOLS, "auto")
    r = parse_reply("\n Let me add. " + CALL + "\n" + CALL.replace("1", "5") + "\n", s)
    assert r.parse_error is None and r.content == "Let me add. "
    assert [c.arguments for c in r.tool_calls] == ['{"a": 1, "b": 2}', '{"a": 5, "b": 2}']
    assert all(len(c.id) == 32 and c.id.isalnum() and not c.issues for c in r.tool_calls)
    m = r.message()
    assert m["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    assert parse_reply("just text", s).message() == {"role": "assistant", "content": "just text"}


def test_unparsable_reply_is_content_with_a_flag() -> None:
    s = tool_call_setup(TOOLS, "auto")
    for bad in ['<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
                "<tool_call>\n{not json", '<tool_call>\n{"name": "add", "arguments": {"a": 1}}']:
        r = parse_reply(bad, s)
        assert r.parse_error and r.content == bad and not r.tool_calls
    # complete calls before the failure are kept (a second call cut off by max_tokens)
    for tail in [" trailing words", "\n<tool_call>\n{\"name\": \"add\", \"argu"]:
        r = parse_reply("ok " + CALL + tail, s)
        assert r.parse_error and r.content == "ok " and len(r.tool_calls) == 1


def test_arguments_are_validated() -> None:
    s = tool_call_setup(TOOLS, "auto")
    r = parse_reply('<tool_call>\n{"name": "add", "arguments": {"a": "x"}}\n</tool_call>', s)
    assert r.tool_calls and r.tool_calls[0].issues


def test_choices() -> None:
    assert tool_call_setup(TOOLS, "none").grammar is None
    req = tool_call_setup(TOOLS, "required", False)
    assert not req.grammar_lazy and "root ::= tool-call space" in req.grammar
    named = tool_call_setup(TOOLS, {"type": "function", "function": {"name": "now"}})
    assert "tool-add" not in named.grammar and "tool-now" in named.grammar and not named.grammar_lazy
    with pytest.raises(ToolError) as e:
        tool_call_setup(TOOLS, "sometimes")
    assert str(e.value) == "Invalid tool_choice: sometimes" and isinstance(e.value, ConstrainedError)
    with pytest.raises(ToolError):
        tool_call_setup(TOOLS, {"type": "function", "function": {"name": "missing"}})
    with pytest.raises(ToolError):
        tool_call_setup([{"type": "function", "function": {}}])


def test_required_grammar_is_a_call_from_the_first_byte() -> None:
    g = Grammar.from_gbnf(tool_call_setup(TOOLS, "required").grammar)
    pieces = [bytes([c]) for c in range(32, 127)] + [b"\n", b"</s>"]
    v = Vocabulary(pieces, eog_ids=[len(pieces) - 1])
    m = g.matcher(v)
    allowed = {pieces[i] for i in range(len(pieces)) if m.mask()[i]}
    assert allowed == {b"<"}
    for ch in CALL.encode():
        assert m.accept_token(pieces.index(bytes([ch])))
    assert m.can_end()


def test_generic_format_and_lazy_grammar() -> None:
    assert detect_format(None) == "generic"
    s = tool_call_setup(TOOLS, "auto", fmt="generic")
    assert "<tool_call>" in s.system_prompt and '"name": "add"' in s.system_prompt
    pieces = [bytes([c]) for c in range(32, 127)] + [b"\n", b"</s>"]
    v = Vocabulary(pieces, eog_ids=[len(pieces) - 1])
    m = s.lazy_grammar(v).matcher(v)
    assert isinstance(m, LazyMatcher)
    text = ("Sure. " + CALL).encode()
    for ch in text:
        assert m.accept_token(pieces.index(bytes([ch])))
    assert m.triggered and m.can_end()
    assert json.loads(parse_reply(text.decode(), s).tool_calls[0].arguments) == {"a": 1, "b": 2}
