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


def _walk(grammar: str, text: str) -> bool:
    """Whether ``grammar`` accepts exactly ``text`` (one byte per token)."""
    g = Grammar.from_gbnf(grammar)
    pieces = [bytes([c]) for c in range(256)] + [b"</s>"]
    v = Vocabulary(pieces, eog_ids=[len(pieces) - 1])
    m = g.matcher(v)
    for ch in text.encode():
        if not m.accept_token(ch):
            return False
    return m.can_end()


LLAMA_CALL = '{"name": "add", "parameters": {"a": 1, "b": 2}}'
NEMO_CALL = '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abc123XYZ"}]'


@pytest.mark.parametrize("fmt,call", [("hermes", CALL), ("qwen3", CALL), ("llama3", LLAMA_CALL),
                                      ("mistral_nemo", NEMO_CALL)])
def test_required_and_named_are_calls_only(fmt: str, call: str) -> None:
    """Ours (the default): the reply is the call, nothing before it, only the named tool; llama-server's
    (``llama_server_compat``) lets text come first, starts with the generation prompt and ignores the name."""
    req = tool_call_setup(TOOLS, "required", fmt=fmt)
    assert not req.grammar_lazy and not req.prefill and not req.grammar_triggers
    assert _walk(req.grammar, call) and not _walk(req.grammar, "Sure. " + call)
    named = tool_call_setup(TOOLS, {"type": "function", "function": {"name": "now"}}, fmt=fmt)
    assert not _walk(named.grammar, call)
    compat = tool_call_setup(TOOLS, "required", fmt=fmt, llama_server_compat=True)
    assert compat.prefill and _walk(compat.grammar, compat.generation_prompt + "Sure. " + call)
    as_auto = tool_call_setup(TOOLS, {"type": "function", "function": {"name": "now"}}, fmt=fmt,
                              llama_server_compat=True)
    assert as_auto.tool_choice == "auto" and as_auto.named is None


def test_parallel_off_means_one_call() -> None:
    two_llama = LLAMA_CALL + ", " + LLAMA_CALL
    assert not _walk(tool_call_setup(TOOLS, "required", fmt="llama3").grammar, two_llama)    # llama3: default off
    assert _walk(tool_call_setup(TOOLS, "required", True, fmt="llama3").grammar, two_llama)
    assert not _walk(tool_call_setup(TOOLS, "required", False).grammar, CALL + "\n" + CALL)
    assert _walk(tool_call_setup(TOOLS, "required", True).grammar, CALL + "\n" + CALL)


def test_llama3_and_mistral_parse() -> None:
    s = tool_call_setup(TOOLS, "auto", fmt="llama3")
    assert s.grammar is None and not s.grammar_lazy             # llama-server: no marker, no grammar
    r = parse_reply("Here: " + LLAMA_CALL, s)
    assert r.content == "Here: " and r.tool_calls[0].arguments == '{"a": 1, "b": 2}' and not r.tool_calls[0].issues
    r = parse_reply('{"type": "function", "name": "now", "parameters": {}}', s)
    assert r.tool_calls[0].name == "now"
    bad = parse_reply("a {brace} in prose", s)
    assert bad.parse_error and bad.content == "a {brace} in prose"
    m = tool_call_setup(TOOLS, "auto", fmt="mistral_nemo")
    assert m.grammar_triggers == [{"type": 1, "value": "[TOOL_CALLS]"}] and m.preserved_tokens == ["[TOOL_CALLS]"]
    r = parse_reply(NEMO_CALL, m)
    assert r.tool_calls[0].id == "abc123XYZ" and r.content == ""
    assert parse_reply(NEMO_CALL.replace(', "id": "abc123XYZ"', ""), m).parse_error    # llama.cpp's comma


def test_qwen3_reasoning() -> None:
    s = tool_call_setup(TOOLS, "auto", fmt="qwen3")
    r = parse_reply("<think>\nadd them\n</think>\n\n" + CALL, s)
    assert r.reasoning_content == "add them\n" and r.content == "" and r.tool_calls[0].name == "add"
    r = parse_reply("<think>\n \n</think>\n\nHi", tool_call_setup(TOOLS, "none", fmt="qwen3"))
    assert (r.reasoning_content, r.content) == ("", "Hi")
    assert tool_call_setup(TOOLS, "none", fmt="qwen3").preserved_tokens == ["<think>", "</think>", "<tool_call>",
                                                                           "</tool_call>"]


def test_formats_for_the_sdist_templates() -> None:
    from constrained.chat.tool_formats import FORMATS
    from constrained.chat.tools import tool_call_setup_for_template
    from oracle.sdist import llama_cpp_source

    d = llama_cpp_source() / "models" / "templates"
    for f in FORMATS.values():
        for t in f.templates:
            assert detect_format((d / t).read_text()) == f.name, t
    for t in ["Qwen3-Coder.jinja", "Qwen3.5-4B.jinja"]:
        assert detect_format((d / t).read_text()) == "qwen3_coder", t
    for t in ["Mistral-Small-3.2-24B-Instruct-2506.jinja", "Qwen-QwQ-32B.jinja", "Bielik-11B-v3.0-Instruct.jinja",
              "GLM-4.6.jinja", "ibm-granite-granite-4.0.jinja"]:         # llama-server's autoparser
        assert detect_format((d / t).read_text()) == "autoparser", t
    for t in ["google-gemma-2-2b-it.jinja", "HuggingFaceTB-SmolLM3-3B.jinja"]:  # no tool-call support
        assert detect_format((d / t).read_text()) == "generic", t
    g = tool_call_setup_for_template(None, TOOLS, "auto")
    assert g.fmt == "generic" and g.system_prompt and g.grammar_lazy


def test_template_messages() -> None:
    from constrained.chat.tools import template_messages, template_tools

    s = tool_call_setup(TOOLS, "auto", fmt="llama3")
    m = template_messages([{"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "id": "x", "function": {"name": "add", "arguments": '{"a": 1}'}}]}], s)
    assert m[0]["content"] == "" and m[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    with pytest.raises(ToolError, match="Failed to parse tool call arguments as JSON"):
        template_messages([{"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": "{"}}]}], s)
    assert template_tools(TOOLS)[1] == {"type": "function", "function": {"name": "now", "description": "",
                                                                        "parameters": {}}}
