"""llama-server's specialised tool-call handlers (``constrained.chat.handlers``: Kimi K2, Ministral 3 / Devstral,
Functionary v3.2, GPT-OSS) against llama.cpp's own (common/parsers/*.cpp, through ``oracle/shims/render_shim.cpp``):
a fixed sample of ``scripts/handler_sweep.py``, which runs every case (oracle.cases.handler_shim).

- Setup: for every sdist template dispatched to these handlers, our server's ``chat_params`` (with
  ``llama_server_compat``) gives the prompt (tools rendered by the template, past calls and reasoning included),
  grammar text, laziness, triggers, preserved tokens and generation prompt of ``common_chat_templates_apply``: 8
  cases per template, together covering every tool set (no parameters, enums, mixed types, nested objects, arrays,
  ``$ref``, several tools), conversation, tool_choice auto / required / none / named, parallel on / off / default
  and reasoning_format deepseek / none.
- Reply: every 2nd prefix of each handler's replies (content, reasoning, one and two calls, the model's ids, an
  unknown tool, text after the calls, a missing section marker, multi-byte text) parsed as partial and the whole as
  final, under two (tool_choice, parallel, reasoning_format) per template: the message of ``common_chat_parse``, or
  a failure where it throws; ``parse_reply`` reads the finals alike.
- Ours (not llama-server's): a named ``tool_choice`` keeps only that tool in the grammar.
"""

from __future__ import annotations

import pytest

from constrained.chat.handlers import handler_for
from constrained.chat.tools import detect_format, parse_reply, tool_call_setup_for_template
from oracle.cases.handler_shim import MIXED, PING, REPLIES, WEATHER, parse_differences, setup_differences
from oracle.render import chat_apply, parsed_message
from oracle.sdist import llama_cpp_source

TEMPLATES = {
    "kimi_k2": ["Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja"],
    "ministral_3": ["mistralai-Ministral-3-14B-Reasoning-2512.jinja", "unsloth-mistral-Devstral-Small-2507.jinja"],
    "functionary_v3_2": ["meetkai-functionary-medium-v3.2.jinja"],
    "gpt_oss": ["openai-gpt-oss-120b.jinja"],
}
ALL = [(h, n) for h, ns in TEMPLATES.items() for n in ns]


def _src(name: str) -> str:
    return (llama_cpp_source() / "models" / "templates" / name).read_text()


def test_dispatch() -> None:
    d = llama_cpp_source() / "models" / "templates"
    for h, names in TEMPLATES.items():
        found = sorted(p.name for p in d.glob("*.jinja") if handler_for(p.read_text()) == h)
        assert found == sorted(names), h
        assert all(detect_format(_src(n)) == h for n in names)


# (tool set, conversation, tool_choice, parallel, reasoning_format): each template gets 8, shifted by its index (the
# whole product: scripts/handler_sweep.py)
SAMPLE = [("weather+ping", 0, "auto", True, "deepseek"), ("nested+mixed+weather", 1, "required", False, "deepseek"),
          ("mixed", 2, "auto", None, "none"), ("ref", 0, "required", True, "none"), ("ping", 1, "none", True, "deepseek"),
          ("weather", 2, "named", False, "deepseek"), ("arrays", 0, "auto", False, "none"),
          ("weather+ping", 1, "required", None, "deepseek"), ("mixed", 0, "none", False, "none")]


@pytest.mark.parametrize("i, handler, name", [(i, h, n) for i, (h, n) in enumerate(ALL)])
def test_setup_matches_llama_cpp(i: int, handler: str, name: str) -> None:
    n = 0
    for k in range(8):
        ts, conv, choice, par, rf = SAMPLE[(i + k) % len(SAMPLE)]
        cases, bad = setup_differences(name, [ts], [choice], [par], [rf], convs=(conv,))
        assert not bad, (name, bad)
        n += cases
    assert n == 8


# (tool_choice, parallel, reasoning_format) per template: the sweep runs all of them on every prefix
PARSE_CASES = [(h, n, c, p, rf) for i, (h, n) in enumerate(ALL)
               for c, p, rf in [(("auto", "required")[i % 2], True, "deepseek"), (("required", "auto")[i % 2], False,
                                                                                 "none")]]


@pytest.mark.parametrize("handler, name, choice, parallel, rf", PARSE_CASES)
def test_partial_and_final_parses_match_llama_cpp(handler: str, name: str, choice: str, parallel: bool,
                                                  rf: str) -> None:
    tools = [WEATHER, MIXED, PING]
    texts, calls, bad = parse_differences(name, handler, choices=(choice,), parallels=(parallel,), formats=(rf,),
                                          tools=tools, step=2)
    assert not bad, bad[:3]
    assert calls > 10
    src = _src(name)
    setup = tool_call_setup_for_template(src, tools, choice, parallel, llama_server_compat=True,
                                         extract_reasoning=rf != "none")
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": parallel, "reasoning_format": rf}
    setup.generation_prompt = gen = chat_apply(src, body)["generation_prompt"]
    for text in REPLIES[handler]:
        m = parsed_message(setup.handler.parse, gen, text, False)
        r = parse_reply(text, setup)
        if not m["ok"]:
            assert r.parse_error and r.content == text
        elif m["msg"]["content"] or m["msg"].get("tool_calls") or m["msg"].get("reasoning_content"):
            assert (r.content, r.reasoning_content) == (m["msg"]["content"], m["msg"].get("reasoning_content", ""))
            assert [(c.name, c.arguments) for c in r.tool_calls] == [
                (c["function"]["name"], c["function"]["arguments"]) for c in m["msg"].get("tool_calls", [])]


@pytest.mark.parametrize("handler, name", [(h, ns[0]) for h, ns in TEMPLATES.items()])
def test_named_choice_keeps_one_tool(handler: str, name: str) -> None:
    src = _src(name)
    named = {"type": "function", "function": {"name": "ping"}}
    ours = tool_call_setup_for_template(src, [WEATHER, PING], named)
    theirs = tool_call_setup_for_template(src, [WEATHER, PING], named, llama_server_compat=True)
    assert ours.tool_choice == "required" and not ours.grammar_lazy and "tool-ping" in ours.grammar
    assert "tool-get-weather" not in ours.grammar
    assert theirs.tool_choice == "auto" and theirs.grammar_lazy and "tool-get-weather" in theirs.grammar
