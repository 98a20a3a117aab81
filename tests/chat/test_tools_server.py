"""Tool calls vs the real llama-server (``--jinja --chat-template-file <template>``), one server per template.

For each format's template (the suite: Qwen 2.5, Qwen 3, Llama 3.1, Mistral Nemo; ``CONSTRAINED_TOOLS_ALL=1`` adds
Llama 3.2 / 3.3 and Hermes 2 Pro / 3, as ``scripts/tool_call_sweep.py`` does):

- **setup**: for 3 tool sets x ``tool_choice`` auto / required / none / named x ``parallel_tool_calls`` true / false /
  absent, ``tool_call_setup_for_template(..., llama_server_compat=True)`` gives the grammar text, ``grammar_lazy``,
  the triggers and the generation prompt of ``__verbose.generation_settings`` exactly (ours by default differ for
  required and named on purpose: ``tests/chat/test_tools.py``);
- **prompt**: ``ChatTemplates.apply(..., tools=template_tools(tools))`` on ``template_messages`` equals
  ``/apply-template``, with and without a past tool call and its result;
- **parser**: llama-server parses a text we choose when it is the prefilled assistant message and the model is made
  to stop at once (a logit bias on the end tokens): its content, reasoning and tool calls equal ``parse_reply``'s,
  its HTTP 500 is our ``parse_error``; every parsed call's arguments are validated against the tool's schema.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from constrained.chat.tool_formats import FORMATS
from constrained.chat.tools import (
    detect_format,
    parse_reply,
    tool_call_setup_for_template,
)
from oracle.cases.tool_templates import CHOICES, TOOLSETS, WEATHER, prompt_differences, setup_differences
from oracle.cases.tool_templates import function_tool as _fn
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

SUITE = ["Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
         "mistralai-Mistral-Nemo-Instruct-2407.jinja"]
ALL = [t for f in FORMATS.values() for t in f.templates]
TEMPLATES = ALL if os.environ.get("CONSTRAINED_TOOLS_ALL") else SUITE
END_TOKENS = [[1, 100], [106, 100]]           # Gemma's <eos> and <end_of_turn>: stop at once


# the suite (time): auto and required with parallel_tool_calls true / false / absent, none with it absent; the named
# choice (llama-server's = auto, by construction) and the rest with CONSTRAINED_TOOLS_ALL=1 and the sweep script
SUITE_CASES = ([(c, p) for c in CHOICES for p in (True, False, None)] if os.environ.get("CONSTRAINED_TOOLS_ALL")
               else [(c, p) for c in CHOICES[:2] for p in (True, False, None)] + [("none", None)])


@pytest.fixture(scope="module", params=TEMPLATES)
def server(request, default_model_path):
    path = llama_cpp_source() / "models" / "templates" / request.param
    with LlamaServer(["-m", default_model_path, "-c", "2048", "--jinja", "--chat-template-file", str(path)]) as srv:
        yield srv, path.read_text()


@pytest.mark.parametrize("ti", range(len(TOOLSETS)))
def test_setup_matches_llama_server(server, ti: int) -> None:
    srv, source = server
    assert detect_format(source) != "generic"
    n, diffs = setup_differences(srv, source, TOOLSETS[ti], SUITE_CASES)
    assert n == len(SUITE_CASES) and diffs == []


def test_prompt_matches_llama_server(server) -> None:
    srv, source = server
    for tools in (TOOLSETS[1], [WEATHER, *TOOLSETS[2]]):
        assert prompt_differences(srv, source, tools) == (2, [])


def _call_text(fmt: str, calls: list[tuple[str, str]]) -> str:
    if fmt in ("hermes", "qwen3"):
        return "".join(f'<tool_call>\n{{"name": "{n}", "arguments": {a}}}\n</tool_call>\n' for n, a in calls)
    if fmt == "llama3":
        return ", ".join(f'{{"name": "{n}", "parameters": {a}}}' for n, a in calls)
    return "[TOOL_CALLS][" + ", ".join(f'{{"name": "{n}", "arguments": {a}, "id": "abc{i}XYZ12"}}'
                                       for i, (n, a) in enumerate(calls)) + "]"


def _texts(fmt: str) -> list[str]:
    one = _call_text(fmt, [("get_weather", '{"location": "Paris"}')])
    two = _call_text(fmt, [("get_weather", '{"location": "Paris"}'), ("ping", "{}")])
    # (no leading whitespace with reasoning: a prefilled text follows the reasoning end tag there, which keeps it)
    lead = "" if fmt == "qwen3" else "  "
    out = ["Hello there.", lead + "Let me check.\n" + one, "Sure: " + two + "  \n",
           _call_text(fmt, [("get_weather", '{"location": 5}')]),             # valid JSON, breaks the schema
           _call_text(fmt, [("nope", "{}")]),                                 # an undeclared tool: a 500
           one + " and some words after",                                      # text after the calls: a 500
           one.replace('{"location": "Paris"}', '{"location": "Par')]          # cut off: a 500
    if fmt == "llama3":
        out += ['{"type": "function", "name": "ping", "parameters": {}}', "a {brace} in the text"]
    if fmt == "qwen3":
        out += ["<think>\nHm.\n</think>\n\nOk."]          # forced token by token: kept short
    if fmt == "mistral_nemo":
        out += ['[TOOL_CALLS][{"name": "ping", "arguments": {}}]', '[TOOL_CALLS][{"name": "ping", "arguments": {}, }]']
    return out


def _is_json(s: str) -> bool:
    try:
        json.loads(s)
    except ValueError:
        return False
    return True


def test_parser_matches_llama_server(server) -> None:
    srv, source = server
    fmt = detect_format(source)
    tools = [WEATHER, _fn("ping")]
    setup = tool_call_setup_for_template(source, tools, "auto", True)
    names = {t["function"]["name"]: t for t in tools}
    n_calls = n_fail = 0
    none = tool_call_setup_for_template(source, tools, "none")
    for text in _texts(fmt):
        if text.startswith("<think>"):
            # a prefilled text would follow the reasoning end tag: generate it instead, forced by a grammar
            # (allowed with tool_choice none, whose content parser still takes the reasoning out)
            body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": "none",
                    "grammar": f"root ::= {json.dumps(text)}", "max_tokens": 64}
            ours = parse_reply(text, none)
        else:
            body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": text}],
                    "tools": tools, "tool_choice": "auto", "parallel_tool_calls": True, "max_tokens": 1,
                    "logit_bias": END_TOKENS}
            ours = parse_reply(text, setup)
        status, payload = srv.post("/v1/chat/completions", body, raw=True)
        if os.environ.get("CONSTRAINED_TOOLS_DEBUG"):
            print(repr(text), status, payload[:400], ours, sep="\n  ", file=sys.stderr)
        if status == 500:
            assert ours.parse_error, text
            n_fail += 1
            continue
        assert status == 200, (text, payload[:300])
        msg = json.loads(payload)["choices"][0]["message"]
        theirs = msg.get("tool_calls", [])
        if ours.parse_error:
            # a call cut off at the end: llama-server's lenient parse returns it with the truncated arguments;
            # ours keeps only the complete calls before it (CHANGELOG, Deviations)
            assert theirs and not _is_json(theirs[-1]["function"]["arguments"]), (text, ours.parse_error)
            theirs = theirs[:-1]
            msg["content"] = msg["content"] if ours.tool_calls else text
            n_fail += 1
        assert ours.content == msg["content"], text
        assert ours.reasoning_content == msg.get("reasoning_content", ""), text
        assert [(c.name, c.arguments) for c in ours.tool_calls] == \
            [(c["function"]["name"], c["function"]["arguments"]) for c in theirs], text
        for c, t in zip(ours.tool_calls, theirs, strict=True):
            if f'"id": "{t["id"]}"' in text:           # an id the model wrote (Mistral Nemo) is kept
                assert c.id == t["id"], text
            else:
                assert len(c.id) == 32 and c.id.isalnum(), c.id
        for c in ours.tool_calls:                      # every call validated against its tool's schema
            schema = names[c.name]["function"].get("parameters") or {"type": "object", "properties": {}}
            assert bool(c.issues) == ('"location": 5' in c.arguments), (c, schema)
        n_calls += len(theirs)
    assert n_calls >= 4 and n_fail >= 3
