"""``constrained.server.tools_api`` without a model: the request's tool plan, the lenient PEG parse of partial
replies, the stream deltas, and the flags where llama-server would fail. (Whole generations against the real
llama-server: ``tests/server/test_server_tools_oracle.py``.)"""

from __future__ import annotations

import json

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.peg import ChatMessage, PegFail, json_native_parser, parse_message
from constrained.chat.stream_diff import compute_diffs
from constrained.chat.tool_formats import FORMATS
from constrained.chat.tool_stream import ToolCallParser
from constrained.server.chat_api import chat_params, parser_for
from constrained.server.errors import HttpError
from constrained.server.tools_api import plan_tools
from oracle.cases.server_tools import ADD, SEARCH, WEATHER, template_path

GP = "<|im_start|>assistant\n"


def _qwen() -> ChatTemplates:
    from pathlib import Path

    return ChatTemplates(Path(template_path()).read_text())


def _body(**kw):
    return {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, ADD], **kw}


def _stream(plan, text: str, step: int = 3):
    """Feed ``text`` in ``step``-character pieces, then the final update: (final message, all deltas)."""
    prs = ToolCallParser(plan.setup, GP)
    deltas = []
    for i in range(0, len(text), step):
        deltas += prs.update(text[i:i + step], True)[1]
    msg, last = prs.update("", False)
    return msg, deltas + last


def _replay(deltas):
    content, calls = "", []
    for d in deltas:
        content += d.get("content", "")
        for tc in d.get("tool_calls", []):
            while len(calls) <= tc["index"]:
                calls.append({"name": "", "arguments": "", "id": ""})
            c = calls[tc["index"]]
            c["id"] = tc.get("id", c["id"])
            c["name"] += tc.get("function", {}).get("name", "")
            c["arguments"] += tc.get("function", {}).get("arguments", "")
    return content, calls


def test_plan_qwen_auto_is_llama_servers_lazy_grammar() -> None:
    p = chat_params(_body(), _qwen(), jinja=True)
    assert p["grammar_lazy"] is True and p["grammar_type"] == "tool_calls"
    assert p["grammar_triggers"] == [{"type": 1, "value": "<tool_call>\n"}]
    assert p["preserved_tokens"] == ["<tool_call>", "</tool_call>"]
    assert "get_weather" in p["prompt"] and "<tools>" in p["prompt"]
    assert parser_for(p) is not None


def test_plan_chatml_gets_the_generic_format() -> None:
    p = chat_params(_body(tool_choice="required"), ChatTemplates(None), jinja=True)
    assert p["prompt"].startswith("<|im_start|>system\nYou can call these tools")
    assert p["grammar_lazy"] is False and "grammar_type" not in p          # ours: not prefilled
    assert "root ::=" in p["grammar"] and "tool-get-weather" in p["grammar"]
    # llama_server_compat: llama-server's behaviour, the tools dropped for a template that cannot render them
    q = chat_params(_body(tool_choice="required", llama_server_compat=True), ChatTemplates(None), jinja=True)
    assert "You can call" not in q["prompt"] and not q.get("grammar") and parser_for(q) is None


def test_named_choice_and_errors() -> None:
    plan = plan_tools(_body(tool_choice={"type": "function", "function": {"name": "add"}}), _qwen())
    assert plan.setup.named == "add" and plan.setup.tool_choice == "required"
    assert "tool-add" in plan.params()["grammar"] and "tool-get-weather" not in plan.params()["grammar"]
    with pytest.raises(HttpError, match="Invalid tool_choice: sometimes") as e:
        chat_params(_body(tool_choice="sometimes"), _qwen(), jinja=True)
    assert e.value.status == 400
    with pytest.raises(HttpError, match="unknown tool"):
        plan_tools(_body(tool_choice={"type": "function", "function": {"name": "nope"}}), _qwen())
    with pytest.raises(HttpError, match="Failed to parse tools"):
        plan_tools({"tools": [{"type": "function", "function": {}}]}, _qwen())
    with pytest.raises(HttpError, match="requires --jinja"):
        chat_params(_body(), _qwen(), jinja=False)


def test_none_keeps_tools_in_prompt_without_grammar() -> None:
    p = chat_params(_body(tool_choice="none"), _qwen(), jinja=True)
    assert "get_weather" in p["prompt"] and not p.get("grammar") and parser_for(p) is None


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_stream_deltas_rebuild_the_message(step: int) -> None:
    plan = plan_tools(_body(), _qwen())
    text = "Let me check." + CALL + "\n" + CALL.replace("Paris", "Rome")
    msg, deltas = _stream(plan, text, step)
    content, calls = _replay(deltas)
    assert content == msg["content"] == "Let me check."
    assert [(c["name"], c["arguments"], c["id"]) for c in calls] == [
        (c["function"]["name"], c["function"]["arguments"], c["id"]) for c in msg["tool_calls"]]
    assert json.loads(calls[1]["arguments"]) == {"city": "Rome", "unit": "celsius"}
    assert all(len(c["id"]) == 32 for c in calls) and "issues" not in json.dumps(msg)


def test_partial_parse_is_lenient_as_llama_cpp() -> None:
    p = json_native_parser(["get_weather", "add"], FORMATS["hermes"], parallel=True, required=False)
    # a partial marker at the end is held back from the content
    assert parse_message(p, GP, "Hello <tool", is_partial=True).content == "Hello "
    assert parse_message(p, GP, "Hello <tool>", is_partial=True).content == "Hello <tool>"
    # leading whitespace goes (prefix << parser); a call shows once its name is complete, arguments "{" first
    m = parse_message(p, GP, '  <tool_call>\n{"name": "get_wea', is_partial=True)
    assert m.content == "" and m.tool_calls == []
    m = parse_message(p, GP, '<tool_call>\n{"name": "get_weather"', is_partial=True)
    assert m.tool_calls == [("get_weather", "{", "")]
    m = parse_message(p, GP, '<tool_call>\n{"name": "add", "arguments": {"a": 12', is_partial=True)
    assert m.tool_calls == [("add", '{"a": 12', "")]
    # text after the last call: the final parse fails (llama-server: HTTP 500)
    with pytest.raises(PegFail):
        parse_message(p, GP, CALL + " and more")
    assert parse_message(p, GP, CALL + " and more", is_partial=True) == ChatMessage()


def test_unparsable_reply_is_flagged_content_not_an_error() -> None:
    plan = plan_tools(_body(), _qwen())
    prs = ToolCallParser(plan.setup, GP)
    msg, _ = prs.update(CALL + " trailing words", False)
    assert msg["parse_error"] and msg["tool_calls"][0]["function"]["name"] == "get_weather"
    prs = ToolCallParser(plan.setup, GP)
    msg, _ = prs.update('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', False)
    assert msg["tool_calls"][0]["function"]["arguments"] == '{"city": "Par'     # llama-server's partial call
    assert "cut off" in msg["tool_calls"][0]["issues"][0]


def test_arguments_that_break_the_schema_are_flagged() -> None:
    plan = plan_tools(_body(), _qwen())
    prs = ToolCallParser(plan.setup, GP)
    msg, _ = prs.update('<tool_call>\n{"name": "add", "arguments": {"a": "two", "b": 3}}\n</tool_call>', False)
    assert msg["tool_calls"][0]["issues"] and "a" in msg["tool_calls"][0]["issues"][0]


def test_diffs_as_llama_server() -> None:
    assert compute_diffs(ChatMessage("a"), ChatMessage("a")) == []
    d = compute_diffs(ChatMessage("", tool_calls=[("f", "{", "x")]), ChatMessage("", tool_calls=[("f", '{"k', "x"),
                                                                                               ("g", "{", "y")]))
    assert d == [{"tool_calls": [{"index": 0, "function": {"arguments": '"k'}}]},
                 {"tool_calls": [{"index": 1, "id": "y", "type": "function", "function": {"name": "g",
                                                                                          "arguments": "{"}}]}]
    with pytest.raises(ValueError, match="less tool calls"):
        compute_diffs(ChatMessage(tool_calls=[("f", "{", "x")]), ChatMessage("z"))


@pytest.mark.parametrize("fmt, text, calls", [
    ("llama3", 'Sure {"type": "function", "name": "add", "parameters": {"a": 1, "b": 2}}',
     [("add", '{"a": 1, "b": 2}', "")]),
    ("mistral_nemo", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abc123xyz"}]',
     [("add", '{"a": 1, "b": 2}', "abc123xyz")]),
    ("qwen3", '<think>\nhmm\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
     [("add", '{"a": 1, "b": 2}', "")]),
])
def test_other_formats_parse(fmt: str, text: str, calls) -> None:
    p = json_native_parser(["add", "search"], FORMATS[fmt], parallel=True, required=False)
    m = parse_message(p, FORMATS[fmt].generation_prompt, text, reasoning_start=(FORMATS[fmt].reasoning or ("",))[0])
    assert m.tool_calls == calls
    if fmt == "qwen3":
        assert m.reasoning_content == "hmm\n" and m.content == ""       # until("</think>"): the newline stays
    if fmt == "llama3":
        assert m.content == "Sure "
    assert SEARCH  # the tool set used above
