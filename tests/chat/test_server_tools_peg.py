"""``constrained.chat.peg`` against llama.cpp's own chat parser (``common_chat_parse`` with the PEG parser
``common_chat_templates_apply`` builds for the template, through ``oracle/chat_parse_shim.cpp``).

For the sdist templates of each JSON format (Qwen 2.5 / Hermes, Qwen 3 with thinking, Llama 3.1, Mistral Nemo),
``tool_choice`` auto and required, ``parallel_tool_calls`` on and off, and replies of every kind (content only,
calls, several calls, calls in one block, escapes and numbers, reasoning, a wrong tool name, text after the calls,
non-object arguments, partial markers): every prefix parsed as a partial reply and the whole as the final one give
the same message (content, reasoning, tool calls with their raw arguments and parsed ids), or fail where llama.cpp
throws. These are the messages whose diffs the server streams.
"""

from __future__ import annotations

import pytest

from constrained.chat.peg import PegFail, json_native_parser, parse_message
from constrained.chat.tool_formats import FORMATS
from oracle.cases.server_tools import ADD, WEATHER
from oracle.chat_parse import chat_parse
from oracle.sdist import llama_cpp_source

W = '{"name": "get_weather", "arguments": {"city": "Ro\\"me \\u00e9", "unit": "celsius"}}'
A = '{"name": "add", "arguments": {"a": -12, "b": 3.5e2}}'
NOT_OBJ = '{"name": "add", "arguments": 5}'
BAD = '{"name": "nope", "arguments": {}}'


def _replies(fmt: str) -> list[str]:
    if fmt in ("hermes", "qwen3"):
        o, c = "<tool_call>\n", "\n</tool_call>"
        out = ["Just text, no call.", f"Let me check.{o}{W}{c}", f"  {o}{A}{c}\n{o}{W}{c}\n", f"{o}{A}, {W}{c}",
               f"{o}{W}{c} and then text", f"{o}{BAD}{c}", f"{o}{NOT_OBJ}{c}", "A <tool> tag and <tool_c"]
        if fmt == "qwen3":
            out += [f"<think>\nWeather first.\n</think>\n\n{o}{W}{c}", "<think>\nonly thinking"]
        return out
    if fmt == "llama3":
        return ["No braces here.", f"Sure. {A}", '{"type": "function", "name": "add", "parameters": {"a": 1, "b": 2}}',
                "I like {braces} a lot", A.replace('"arguments"', '"parameters"') + " trailing"]
    w = W[:-1] + ', "id": "a1B2c3D4e"}'
    return [f"[TOOL_CALLS][{w}]", f"Content first [TOOL_CALLS][{A}]", f"[TOOL_CALLS][{w}, {w.replace('a1B2', 'z9Y8')}]",
            "plain answer", "[TOOL_CALLS]not json"]


def _mine(parser, fmt: str, gen: str, text: str, partial: bool) -> dict:
    try:
        m = parse_message(parser, gen, text, is_partial=partial, reasoning_start=(FORMATS[fmt].reasoning or ("",))[0])
    except PegFail:
        return {"ok": False}
    out: dict = {"role": "assistant", "content": m.content}
    if m.reasoning_content:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = []
        for name, args, cid in m.tool_calls:
            c = {"type": "function", "function": {"name": name, "arguments": args}}
            if cid:
                c["id"] = cid
            out["tool_calls"].append(c)
    return {"ok": True, "msg": out}


CASES = [(fmt, choice, par) for fmt in FORMATS for choice in ("auto", "required") for par in (True, False)]


@pytest.mark.parametrize("fmt, choice, parallel", CASES)
def test_partial_and_final_parses_match_llama_cpp(fmt: str, choice: str, parallel: bool) -> None:
    template = (llama_cpp_source() / "models" / "templates" / FORMATS[fmt].templates[0]).read_text()
    tools = [WEATHER, ADD]
    texts = []
    for r in _replies(fmt):
        texts += [(r[:i], True) for i in range(len(r) + 1)] + [(r, False)]
    theirs = chat_parse(template, tools, choice, parallel, texts)
    gen = theirs[0]["generation_prompt"] if theirs[0]["ok"] else FORMATS[fmt].generation_prompt
    parser = json_native_parser(["get_weather", "add"], FORMATS[fmt], parallel=parallel, required=choice == "required")
    n_calls = n_fail = 0
    for (text, partial), t in zip(texts, theirs, strict=True):
        mine = _mine(parser, fmt, gen, text, partial)
        expect = {"ok": True, "msg": t["msg"]} if t["ok"] else {"ok": False}
        assert mine == expect, (fmt, choice, parallel, text, partial, t)
        n_calls += bool(t["ok"] and t["msg"].get("tool_calls"))
        n_fail += not t["ok"]
    assert n_calls > 10 and len(texts) > 200
