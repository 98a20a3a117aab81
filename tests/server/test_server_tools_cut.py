"""Replies cut by ``max_tokens`` with tools: ``constrained serve`` against the real llama-server over HTTP.

llama-server's final parse of a generation cut inside a tool marker (``<tool`` of ``<tool_call>``) or made only of
whitespace the parser skips (``\\n\\n`` before ``[TOOL_CALLS]``) is an empty message; its non-stream answer is then
the generated text as content (``to_json_oaicompat_chat``, server-task.cpp:415-422), its stream sends no delta.
For four templates of different formats (Qwen 2.5, Qwen 3, Llama 3.1, Mistral Nemo) and the default model, a few-shot
conversation in the template's own call syntax, greedy, ``max_tokens`` 1, 2, 3, 5 and 9, and a one-token reply
pushed to ``\n\n`` by a logit bias, streamed and not: the bodies, or every SSE event, are identical (ids dropped).
At least one case per template must be such an empty parse, so the test covers the fallback and not only ordinary
text.
"""

from __future__ import annotations

import pytest

from constrained.chat.tool_stream import ToolCallParser
from constrained.chat.tools import tool_call_setup_for_template
from oracle.cases.server import ours
from oracle.cases.server_tools import ADD, WEATHER, comparable, post, summary, verbose_of
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

CALL = {"hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
        "llama3": '{"name": "get_weather", "parameters": {"city": "Rome"}}',
        "mistral_nemo": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}, "id": "a1B2c3D4e"}]'}
TEMPLATES = {"Qwen-Qwen2.5-7B-Instruct.jinja": "hermes", "Qwen-Qwen3-0.6B.jinja": "hermes",
             "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
             "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral_nemo"}
CUTS = (1, 2, 3, 5, 9)


def _bodies(fmt: str) -> list[dict]:
    out = []
    for shot in (True, False):
        msgs = []
        if shot:
            msgs = [{"role": "user", "content": "What is the weather in Rome?"},
                    {"role": "assistant", "content": CALL[fmt]}]
            if fmt != "mistral_nemo":               # Mistral Nemo's template wants the roles to alternate
                msgs.append({"role": "user", "content": "Thanks. Next one."})
        msgs.append({"role": "user", "content": "What is the weather in Paris?"})
        for n in CUTS:
            for stream in (False, True):
                out.append({"messages": msgs, "tools": [WEATHER, ADD], "tool_choice": "auto", "temperature": 0.0,
                            "max_tokens": n, "stream": stream, "verbose": True, "cache_prompt": False})
    # a reply that is only whitespace the parser skips, whatever the model prefers (a logit bias on "\n\n")
    for stream in (False, True):
        out.append({"messages": msgs, "tools": [WEATHER, ADD], "tool_choice": "auto", "temperature": 0.0,
                    "max_tokens": 1, "stream": stream, "verbose": True, "cache_prompt": False,
                    "logit_bias": [["\n\n", 100.0]]})
    return out


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_cut_replies_as_llama_server(template: str, default_model_path: str) -> None:
    path = str(llama_cpp_source() / "models" / "templates" / template)
    args = ["-m", default_model_path, "-c", "2048", "--jinja", "--chat-template-file", path]
    bodies = _bodies(TEMPLATES[template])
    with LlamaServer(args) as srv:
        theirs = [post(srv, b) for b in bodies]
    with ours(args) as srv:
        mine = [post(srv, b) for b in bodies]
    source = (llama_cpp_source() / "models" / "templates" / template).read_text()
    setup = tool_call_setup_for_template(source, [WEATHER, ADD], "auto")
    n_empty = 0
    for b, a, m in zip(bodies, theirs, mine, strict=True):
        assert a["status"] == m["status"] == 200, (b, a, m)
        assert comparable(m) == comparable(a), (template, b["max_tokens"], b["stream"], a, m)
        if not b["stream"]:
            text = verbose_of(a)["content"]
            content, calls, _ = summary(a)
            parsed, _ = ToolCallParser(setup, setup.generation_prompt).update(text, False)
            if text and not (parsed["content"] or parsed.get("reasoning_content") or parsed.get("tool_calls")):
                assert content == text and not calls, (template, text)      # the fallback
                n_empty += 1
    assert len(bodies) == 22
    assert n_empty >= 1, template
