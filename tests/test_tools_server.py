"""Tool-call grammars vs the real llama-server (``--jinja --chat-template-file``, ``"verbose": true``).

For the ``<tool_call>`` templates of the sdist (Qwen 2.5 in the suite; Hermes 2 Pro and 3 with
``CONSTRAINED_TOOLS_ALL=1``) and several tool sets, with
``tool_choice: "auto"`` with both ``parallel_tool_calls`` and ``"none"``: the grammar text, ``grammar_lazy``, the
triggers and the preserved tokens of ``__verbose.generation_settings`` equal ``tool_call_setup``'s. (``required``
and named choices are deliberately ours: see CHANGELOG.) Every setup's grammar loads in our engine.
"""

from __future__ import annotations

import os

import pytest

from constrained.chat.tools import detect_format, tool_call_setup
from constrained.grammar import Grammar
from tests.oracle.llama_server import LlamaServer
from tests.oracle.sdist import llama_cpp_source

ALL_TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct.jinja", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                 "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"]
# the suite runs one template (suite time); CONSTRAINED_TOOLS_ALL=1 runs them all (the sweep)
TEMPLATES = ALL_TEMPLATES if os.environ.get("CONSTRAINED_TOOLS_ALL") else ALL_TEMPLATES[:1]


def _fn(name, params=None, desc="d"):
    f = {"name": name, "description": desc}
    if params is not None:
        f["parameters"] = params
    return {"type": "function", "function": f}


TOOLSETS = [
    [_fn("get_weather", {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})],
    [_fn("add", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
                 "required": ["a", "b"]}),
     _fn("search", {"type": "object", "properties": {"q": {"type": "string", "maxLength": 20},
                                                      "tags": {"type": "array", "items": {"enum": ["x", "y"]}}}})],
    [_fn("ping"), _fn("z_last", {}), _fn("Mixed.Case-name", {"type": "object", "properties": {
        "opt": {"type": "boolean"}, "nested": {"type": "object", "properties": {"k": {"type": "null"}}}}})],
]


@pytest.fixture(scope="module", params=TEMPLATES)
def server(request, default_model_path):
    path = llama_cpp_source() / "models" / "templates" / request.param
    with LlamaServer(["-m", default_model_path, "-c", "1024", "--jinja", "--chat-template-file", str(path)]) as srv:
        yield srv, path.read_text()


@pytest.mark.parametrize("ti", range(len(TOOLSETS)))
def test_grammar_triggers_match_llama_server(server, ti: int) -> None:
    srv, source = server
    assert detect_format(source) == "hermes"
    tools = TOOLSETS[ti]
    for choice, par in (("auto", True), ("auto", False), ("none", True)):
        if True:
            r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": tools,
                                                  "tool_choice": choice, "parallel_tool_calls": par,
                                                  "verbose": True, "max_tokens": 1})
            gs = r["__verbose"]["generation_settings"]
            ours = tool_call_setup(tools, choice, par)
            assert (ours.grammar or "") == gs["grammar"], (choice, par)
            assert ours.grammar_lazy == gs["grammar_lazy"]
            assert ours.grammar_triggers == gs["grammar_triggers"]
            # preserved tokens: only single-token strings survive, and the default vocabulary has no <tool_call>
            assert gs["preserved_tokens"] == []
            if ours.grammar:
                Grammar.from_gbnf(ours.grammar)
