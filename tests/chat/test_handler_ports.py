"""llama-server's Gemma 4, DeepSeek V3.2 / V4, Kimi K3 and MiniMax M3 tool-call handlers
(``constrained.chat.handler_gemma4`` / ``handler_deepseek`` / ``handler_kimi_k3`` / ``handler_minimax_m3``) against
llama.cpp's own (common/parsers/*.cpp through ``oracle/shims/render_shim.cpp``): a fixed sample of the sweep
``scripts/handler_sweep.py`` runs in full (oracle.cases.handler_shim).

- Setup: per template 6 cases (tool set, conversation with or without a past call and result, tool_choice auto /
  required / none / named, parallel on / off / absent, reasoning_format deepseek / none) through our server's
  ``chat_params`` (``llama_server_compat``): prompt, grammar text, laziness, triggers, preserved tokens and
  generation prompt of ``common_chat_templates_apply``.
- Reply: every 3rd prefix of each handler's replies (content, reasoning, one and two calls, nested values, an
  unknown tool, text after the calls, malformed and cut replies, multi-byte text) parsed as partial and the whole
  as final: ``common_chat_parse``'s message, or a failure where it throws; ``parse_reply`` reads the finals alike.
- Ours (not llama-server's): a named ``tool_choice`` keeps only that tool, in an eager grammar.
"""

from __future__ import annotations

import pytest

from constrained.chat.handlers import handler_for
from constrained.chat.tools import detect_format, parse_reply, tool_call_setup_for_template
from oracle.cases.handler_shim import (
    ARRAYS,
    MIXED,
    PING,
    WEATHER,
    D,
    parse_differences,
    setup_differences,
    src,
)

TEMPLATES = {
    "gemma4": ["google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"],
    "deepseek_v3_2": ["deepseek-ai-DeepSeek-V3.2.jinja", "deepseek-ai-DeepSeek-V4.jinja",
                      "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"],
    "kimi_k3": ["Kimi-K3.jinja"],
    "minimax_m3": ["MiniMax-M3.jinja"],
}
ALL = [(h, n) for h, ns in TEMPLATES.items() for n in ns]
# (tool set, conversation, tool_choice, parallel, reasoning_format): each template gets 6, shifted by its index
SAMPLE = [("weather+ping", 1, "auto", True, "deepseek"), ("nested+mixed+weather", 0, "required", False, "deepseek"),
          ("arrays", 0, "auto", None, "none"), ("ref", 1, "required", True, "none"), ("ping", 0, "none", True, "deepseek"),
          ("mixed", 1, "named", False, "deepseek"), ("weather", 0, "auto", False, "none")]


def test_dispatch() -> None:
    for h, names in TEMPLATES.items():
        found = sorted(p.name for p in D.glob("*.jinja") if handler_for(p.read_text()) == h)
        assert found == sorted(names), h
        assert all(detect_format(src(n)) == h for n in names)


@pytest.mark.parametrize("i, handler, name", [(i, h, n) for i, (h, n) in enumerate(ALL)])
def test_setups_match_llama_cpp(i: int, handler: str, name: str) -> None:
    n = 0
    for k in range(6):
        ts, conv, choice, par, rf = SAMPLE[(i + k) % len(SAMPLE)]
        cases, bad = setup_differences(name, [ts], [choice], [par], [rf], convs=(conv,))
        assert not bad, (name, bad)
        n += cases
    assert n == 6


@pytest.mark.parametrize("handler, name", [(h, ns[-1]) for h, ns in TEMPLATES.items()])
def test_parses_match_llama_cpp(handler: str, name: str) -> None:
    tools = [WEATHER, MIXED, PING, ARRAYS]
    texts, calls, bad = parse_differences(name, handler, choices=("auto", "required"), parallels=(True, False),
                                          formats=("deepseek",), tools=tools, step=3)
    assert not bad, bad[:3]
    assert calls > 40
    texts, calls, bad = parse_differences(name, handler, choices=("auto",), parallels=(True,), formats=("none",),
                                          tools=tools, step=5)
    assert not bad, bad[:3]
    # parse_reply on the final replies: the handler's message (calls validated, ids given)
    from oracle.cases.handler_shim import replies
    from oracle.render import chat_apply

    s = src(name)
    setup = tool_call_setup_for_template(s, tools, "auto", True, llama_server_compat=True)
    setup.generation_prompt = chat_apply(s, {"messages": [{"role": "user", "content": "hi"}], "tools": tools})[
        "generation_prompt"]
    for text in replies(handler, s):
        r = parse_reply(text, setup)
        try:
            m = setup.handler.parse(setup.generation_prompt, text)
        except Exception:  # noqa: BLE001 - PegFail: parse_reply gives the text back with parse_error
            assert r.parse_error and r.content == text
            continue
        if not m.empty():
            assert (r.content, r.reasoning_content) == (m.content, m.reasoning_content)
            assert [(c.name, c.arguments) for c in r.tool_calls] == [(c[0], c[1]) for c in m.tool_calls]
            assert all(c.id for c in r.tool_calls)


@pytest.mark.parametrize("handler, name", [(h, ns[0]) for h, ns in TEMPLATES.items()])
def test_named_choice_keeps_one_tool(handler: str, name: str) -> None:
    s = src(name)
    named = {"type": "function", "function": {"name": "ping"}}
    ours = tool_call_setup_for_template(s, [WEATHER, PING], named)
    theirs = tool_call_setup_for_template(s, [WEATHER, PING], named, llama_server_compat=True)
    assert ours.tool_choice == "required" and not ours.grammar_lazy and "tool-ping" in ours.grammar
    assert "get-weather" not in ours.grammar
    assert theirs.tool_choice == "auto" and theirs.grammar_lazy and "get-weather" in theirs.grammar
