"""llama-server's autoparser tool-call path (``constrained.chat.autoparser_tools``, ``constrained.chat.autoparser_build``)
against llama.cpp's own code (``oracle/shims/autoparser_shim.cpp``, ``oracle/shims/render_shim.cpp``).

- Analysis: for every sdist template llama-server sends to the autoparser, the whole ``analyze_template`` result
  (format, section / per-call / function / argument / call-id markers, JSON fields and their order, preserved
  tokens, extra stops) is llama.cpp's.
- Setup (a fixed sample, one template per format family): through the server's ``chat_params`` with
  ``llama_server_compat``, the prompt, grammar text, laziness, triggers, preserved tokens and generation prompt of
  ``common_chat_templates_apply`` for 2 tool sets x auto / required / none x parallel on / off / absent.
- Reply (a sample): replies the template itself renders (content, one call, two calls, reasoning and a call) and
  plain ones, every 4th prefix as a partial parse and the whole as final: ``common_chat_parse``'s message, or a
  failure where it throws.

The real llama-server sweep covers these templates too (``scripts/tool_call_sweep.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.autoparser_tools import analyze_template
from constrained.chat.handlers import build
from constrained.chat.tools import detect_format, normalize_tools, parse_reply, tool_call_setup_for_template
from constrained.server.chat_api import chat_params
from oracle.autoparser import analyze_all
from oracle.render import chat_apply, chat_parse_body, parsed_message
from oracle.sdist import llama_cpp_source
from tests.chat.test_qwen3_coder import MIXED, PING, TOOLSETS, WEATHER

D = llama_cpp_source() / "models" / "templates"
AUTOPARSER = sorted(p.name for p in D.glob("*.jinja") if detect_format(p.read_text()) == "autoparser")
SAMPLE = ["Mistral-Small-3.2-24B-Instruct-2506.jinja", "GLM-4.7-Flash.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
          "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "Apertus-8B-Instruct.jinja"]
FIELDS = {"format": {k: k for k in ("mode", "section_start", "section_end", "per_call_start", "per_call_end",
                                    "fun_name_is_key", "tools_array_wrapped", "openai_wrapper_trigger",
                                    "function_field", "name_field", "args_field", "id_field", "gen_id_field",
                                    "parameter_order")},
          "function": {k: k for k in ("name_prefix", "name_suffix", "args_separator", "close")},
          "arguments": {"start": "args_start", "end": "args_end", "name_prefix": "arg_name_prefix",
                        "name_suffix": "arg_name_suffix", "value_prefix": "arg_value_prefix",
                        "value_suffix": "arg_value_suffix", "separator": "arg_separator",
                        "tolerate_intertag_whitespace": "tolerate_intertag_whitespace"},
          "call_id": {"pos": "call_id_pos", "prefix": "call_id_prefix", "suffix": "call_id_suffix"}}


def _src(name: str) -> str:
    return (D / name).read_text()


def test_dispatch() -> None:
    assert len(AUTOPARSER) == 29
    assert set(SAMPLE) <= set(AUTOPARSER)
    assert "Qwen-Qwen2.5-7B-Instruct.jinja" not in AUTOPARSER          # hermes (its own proven format)
    assert "HuggingFaceTB-SmolLM3-3B.jinja" not in AUTOPARSER          # no tool-call support: generic


@pytest.mark.parametrize("name", AUTOPARSER)
def test_analysis_matches_llama_cpp(name: str) -> None:
    src = _src(name)
    theirs = analyze_all(src)
    a = analyze_template(ChatTemplates(src))
    mine = {g: {k: getattr(a.tools, f) for k, f in m.items()} for g, m in FIELDS.items()}
    assert mine == {g: {k: theirs[g][k] for k in m} for g, m in FIELDS.items()}
    assert (a.preserved_tokens, a.additional_stops) == (theirs["preserved_tokens"], theirs["additional_stops"])
    assert a.tools.mode != "NONE" and theirs["supports_tool_calls"]


@pytest.mark.parametrize("name", SAMPLE)
def test_setup_matches_llama_cpp(name: str) -> None:
    src = _src(name)
    t = ChatTemplates(src)
    n = 0
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    for toolset in ("weather+ping", "mixed"):
        for choice in ("auto", "required", "none"):
            for par in (True, False, None):
                body: dict[str, Any] = {"messages": msgs, "tools": TOOLSETS[toolset], "tool_choice": choice}
                if par is not None:
                    body["parallel_tool_calls"] = par
                theirs = chat_apply(src, body)
                o = chat_params({**body, "llama_server_compat": True}, t, jinja=True)
                mine = {"prompt": o["prompt"], "grammar": o.get("grammar", ""), "grammar_lazy": o["grammar_lazy"],
                        "preserved_tokens": o["preserved_tokens"], "generation_prompt": o["generation_prompt"],
                        "grammar_triggers": [{"type": x["type"], "value": x["value"]} for x in o["grammar_triggers"]]}
                assert mine == {k: theirs[k] for k in mine}, (name, toolset, choice, par)
                n += 1
    assert n == 18


def _replies(t: ChatTemplates) -> list[str]:
    """Replies as the template renders an assistant turn (after the generation prompt), and plain ones."""
    user = {"role": "user", "content": "hi"}
    tools = [WEATHER, PING, MIXED]
    a = t.render_jinja(t.prepare_messages([user]), add_generation_prompt=True, tools=tools)
    calls = [{"id": "call00001", "type": "function", "function": {"name": "get_weather",
                                                               "arguments": {"city": 'Pa"ris é', "days": 3}}},
             {"id": "call00002", "type": "function", "function": {"name": "ping", "arguments": {}}}]
    out = ["Just text é 🎉.", "plain <tool"]
    for msg in ({"role": "assistant", "content": "Sure.", "tool_calls": calls[:1]},
                {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "assistant", "content": "", "reasoning_content": "Let me think", "tool_calls": calls[:1]}):
        b = t.render_jinja(t.prepare_messages([user, msg]), add_generation_prompt=False, tools=tools)
        i = 0
        while i < min(len(a), len(b)) and a[i] == b[i]:
            i += 1
        if b[i:] and b[i:] not in out:
            out.append(b[i:])
    return out


def _mine(setup: Any, gen: str, text: str, partial: bool) -> dict[str, Any]:
    return parsed_message(setup.parse, gen, text, partial)


@pytest.mark.parametrize("name", SAMPLE[:3])
@pytest.mark.parametrize("choice, parallel, rf", [("auto", True, "deepseek"), ("required", False, "none")])
def test_parses_match_llama_cpp(name: str, choice: str, parallel: bool, rf: str) -> None:
    src = _src(name)
    tools = [WEATHER, PING, MIXED]
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": parallel, "reasoning_format": rf}
    gen = chat_apply(src, body)["generation_prompt"]
    arena = build("autoparser", src, normalize_tools(tools), tool_choice=choice, parallel=parallel,
                  extract_reasoning=rf != "none", generation_prompt=gen)
    texts: list[tuple[str, bool]] = []
    for r in _replies(ChatTemplates(src)):
        texts += [(r[:i], True) for i in range(0, len(r), 4)] + [(r, True), (r, False)]
    theirs = chat_parse_body(src, body, texts)
    n_calls = 0
    for (text, partial), t in zip(texts, theirs, strict=True):
        expect = {"ok": True, "msg": t["msg"]} if t["ok"] else {"ok": False}
        assert _mine(arena, gen, text, partial) == expect, (name, text, partial)
        n_calls += bool(t["ok"] and t["msg"].get("tool_calls"))
    assert n_calls >= 1
    setup = tool_call_setup_for_template(src, tools, choice, parallel, llama_server_compat=True,
                                         extract_reasoning=rf != "none")
    for text, partial in texts:
        if not partial:
            m = _mine(arena, gen, text, False)
            r = parse_reply(text, setup)
            if m["ok"] and m["msg"].get("tool_calls"):
                assert [(c.name, c.arguments) for c in r.tool_calls] == [
                    (c["function"]["name"], c["function"]["arguments"]) for c in m["msg"]["tool_calls"]]
