"""llama-server's LFM2 / LFM2.5, Cohere2 MoE, GigaChat 3, Ling 3, MiniCPM5 and Muse Glimmer tool-call handlers
(``constrained.chat.handler_*``) against llama.cpp's own (common/parsers/*.cpp through
``oracle/shims/render_shim.cpp``): a fixed sample of the sweep of ``scripts/tool_call_sweep.py --shim``.

- Setup: through our server's ``chat_params`` (``llama_server_compat``), the prompt, grammar text, laziness,
  triggers, preserved tokens and generation prompt of ``common_chat_templates_apply`` for two tool sets x
  tool_choice auto / required / none / named (llama-server: auto) x parallel on / absent, both conversations.
- Reply: every 3rd prefix of each handler's replies (content, reasoning, calls, unknown tools, text after calls,
  cut markers, multi-byte text) as a partial parse and the whole as final, under auto / parallel / deepseek and
  required / single / none: ``common_chat_parse``'s message, or a failure where it throws; ``parse_reply`` reads
  the finals alike.
- Ours (not llama-server's): a named ``tool_choice`` keeps only that tool in an eager grammar.
"""

from __future__ import annotations

import pytest

from constrained.chat.handlers import handler_for
from constrained.chat.tools import detect_format, parse_reply, tool_call_setup_for_template
from oracle.cases.handler_cases import (
    MIXED,
    PARSE_TOOLS,
    PING,
    TEMPLATES,
    TOOLSETS,
    WEATHER,
    parse_results,
    setup_bodies,
    setup_results,
    template_source,
)
from oracle.sdist import llama_cpp_source

FIRST = [(h, ns[0]) for h, ns in TEMPLATES.items()]


def test_dispatch() -> None:
    d = llama_cpp_source() / "models" / "templates"
    for h, names in TEMPLATES.items():
        assert sorted(p.name for p in d.glob("*.jinja") if handler_for(p.read_text()) == h) == sorted(names), h
        assert all(detect_format(template_source(n)) == h for n in names)


@pytest.mark.parametrize("handler, name", [(h, n) for h, ns in TEMPLATES.items() for n in ns])
def test_setup_matches_llama_cpp(handler: str, name: str) -> None:
    # GigaChat 3: llama.cpp's jinja throws on the "mixed" tool set's type list (a listed deviation)
    sets = {k: TOOLSETS[k] for k in ("weather+ping", "ref" if handler == "gigachat_v3" else "mixed")}
    # the first tool set with a past call, the second with a past answer and its reasoning; every tool_choice
    # under parallel on (first) / absent (second) with deepseek, and required with parallel off under none
    a, b = sets
    bodies = [(label, body) for label, body in setup_bodies(sets)
              if label.startswith((f"{a}/conv0/", f"{b}/conv1/"))
              and (label.endswith(f"/par={label.startswith(a) or None}/deepseek") or "/required/par=False/none" in label)]
    results = list(setup_results(name, bodies))
    assert len(results) == 10
    assert [r for r in results if r[1]] == []


@pytest.mark.parametrize("choice, parallel, rf", [("auto", True, "deepseek"), ("required", False, "none")])
@pytest.mark.parametrize("handler, name", FIRST)
def test_partial_and_final_parses_match_llama_cpp(handler: str, name: str, choice: str, parallel: bool,
                                                  rf: str) -> None:
    setup = tool_call_setup_for_template(template_source(name), PARSE_TOOLS.get(handler, [WEATHER, MIXED, PING]),
                                         choice, parallel, llama_server_compat=True, extract_reasoning=rf != "none")
    n = calls = 0
    for text, partial, mine, theirs in parse_results(name, handler, choice=choice, parallel=parallel, rf=rf,
                                                     step=3):
        assert mine == theirs, (text, partial)
        n += 1
        calls += bool(theirs["ok"] and theirs["msg"].get("tool_calls"))
        if partial:
            continue
        r = parse_reply(text, setup)
        if not mine["ok"]:
            assert r.parse_error and r.content == text
        elif mine["msg"]["content"] or mine["msg"].get("tool_calls") or mine["msg"].get("reasoning_content"):
            assert (r.content, r.reasoning_content) == (mine["msg"]["content"],
                                                        mine["msg"].get("reasoning_content", ""))
            assert [(c.name, c.arguments) for c in r.tool_calls] == [
                (c["function"]["name"], c["function"]["arguments"]) for c in mine["msg"].get("tool_calls", [])]
    assert n > 100 and calls > 10


@pytest.mark.parametrize("handler, name", FIRST)
def test_named_choice_keeps_one_tool(handler: str, name: str) -> None:
    src = template_source(name)
    named = {"type": "function", "function": {"name": "ping"}}
    ours = tool_call_setup_for_template(src, [WEATHER, PING], named)
    theirs = tool_call_setup_for_template(src, [WEATHER, PING], named, llama_server_compat=True)
    assert ours.tool_choice == "required" and not ours.grammar_lazy and "tool-ping" in ours.grammar
    assert "get-weather" not in ours.grammar
    assert theirs.tool_choice == "auto" and theirs.grammar_lazy and "get-weather" in theirs.grammar
