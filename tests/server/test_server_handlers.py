"""Whole generations with tools under llama-server's specialised handlers (``constrained.chat.handlers``):
``constrained serve`` against the real llama-server over HTTP.

Seven sdist templates (Qwen 3.5, Qwen3-Coder, Kimi K2, Devstral, Ministral 3, Functionary v3.2, GPT-OSS), both test
models (Gemma 3 270M, SmolLM2-135M), the same flags (``--jinja --chat-template-file``), a one-shot conversation in
the template's own call syntax, then: ``tool_choice`` auto (lazy grammar, the handler's triggers) greedy and not
streamed, sampled and streamed, and required with ``"llama_server_compat": true`` (llama-server's eager grammar,
prefilled with the generation prompt: every token constrained by the handler's grammar) greedy streamed and sampled
not, 24 tokens each. Every body, or every SSE
event, is identical (tool call ids dropped, they are random on both sides): tokens, content, reasoning,
``tool_calls`` and their stream deltas, ``finish_reason``, and ``__verbose``'s grammar, laziness, triggers and
preserved tokens. Where llama-server's parser rejects the reply (HTTP 500 or an SSE error event), ours answers
without an error (the listed deviation): checked, not compared.
"""

from __future__ import annotations

import json

import pytest

from constrained.llama import smollm2_model_path
from oracle.cases.server import ours
from oracle.cases.server_tools import ADD, WEATHER, comparable, post, summary
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

CALLS = {
    "Qwen3.5-4B.jinja": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
                        "</tool_call>",
    "Qwen3-Coder.jinja": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
                         "</tool_call>",
    "Kimi-K2-Instruct.jinja": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                              '<|tool_call_argument_begin|>{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>',
    "unsloth-mistral-Devstral-Small-2507.jinja": '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
    "meetkai-functionary-medium-v3.2.jinja": 'get_weather\n{"city": "Rome"}',
    "openai-gpt-oss-120b.jinja": '<|channel|>commentary to=functions.get_weather<|message|>{"city": "Rome"}',
}
# SmolLM2 on every template; Gemma 3 270M only where its generations are proven identical (on Devstral and
# Ministral 3 a stream / a greedy reply differs from llama-server's, and on Kimi K2 and Functionary v3.2 its required
# requests end without a call in 24 tokens: open, CHANGELOG "Known differences")
GEMMA_PROVEN = ("Qwen3.5-4B.jinja", "Qwen3-Coder.jinja", "openai-gpt-oss-120b.jinja")
RUNS = [(t, m) for t in CALLS for m in ("gemma3-270m", "smollm2-135m") if m != "gemma3-270m" or t in GEMMA_PROVEN]


def _bodies(template: str) -> list[dict]:
    msgs = [{"role": "user", "content": "What is the weather in Rome?"},
            {"role": "assistant", "content": CALLS[template]},
            {"role": "user", "content": "And in Paris?"}]
    out = []
    for choice, temp, seed, stream in (("auto", 0.0, 0, False), ("auto", 0.8, 7, True),
                                       ("required", 0.0, 0, True), ("required", 0.8, 7, False)):
        b = {"messages": msgs, "tools": [WEATHER, ADD], "tool_choice": choice, "temperature": temp,
             "seed": seed, "max_tokens": 24, "stream": stream, "verbose": True}
        if choice == "required":
            b["llama_server_compat"] = True
        out.append(b)
    return out


@pytest.mark.parametrize("template, model", RUNS)
def test_handler_generations_as_llama_server(template: str, model: str, default_model_path: str) -> None:
    path = default_model_path if model == "gemma3-270m" else smollm2_model_path()
    tpl = str(llama_cpp_source() / "models" / "templates" / template)
    args = ["-m", path, "-c", "4096", "--jinja", "--chat-template-file", tpl]
    bodies = _bodies(template)
    with LlamaServer(args) as srv:
        theirs = [post(srv, b) for b in bodies]
    with ours(args) as srv:
        mine = [post(srv, b) for b in bodies]
    n_calls = n_same = 0
    for b, a, m in zip(bodies, theirs, mine, strict=True):
        assert m["status"] == 200, (template, model, b, m)
        if "does not match the expected" in json.dumps(a):
            # llama-server's parser rejects the reply (HTTP 500, or an SSE error event): ours answers, never an
            # error (CHANGELOG "Deviations"): a final message with parse_error, a stream without the error event
            assert "server_error" not in json.dumps(m), (template, model, m)
            if not b["stream"]:
                assert m["body"]["choices"][0]["message"].get("parse_error"), m
            continue
        assert a["status"] == 200, (template, model, b, a)
        assert comparable(m) == comparable(a), (template, model, b["tool_choice"], b["stream"], b["temperature"])
        n_calls += len(summary(a)[1])
        n_same += 1
    assert n_same >= 2, (template, model, theirs)
    if model == "gemma3-270m":
        assert n_calls >= 1, (template, model)       # the required (eager) requests end in calls
