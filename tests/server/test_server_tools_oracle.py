"""Chat requests with tools, whole generations: ``constrained serve`` against the real llama-server over HTTP.

Both servers get the same flags (``--jinja --chat-template-file`` Qwen 2.5's template, ``-c 2048``), one model at
a time (Gemma 3 270M, SmolLM2-135M), and the same requests (``oracle/cases/server_tools.py``: tool sets, few-shot or
not, seeds, temperatures, ``parallel_tool_calls``, streamed or not). The real server answers all of them first,
then ours (one server at a time).

- ``tool_choice: "auto"``: the whole body, or every SSE event, is identical (tool call ids are random on both
  sides: checked present, then dropped): the tokens (``__verbose.tokens``), content, ``tool_calls`` and their
  stream deltas, ``finish_reason``, ``usage``, and ``__verbose``'s grammar, ``grammar_lazy``, triggers and
  preserved tokens.
- ``tool_choice: "required"`` with ``"llama_server_compat": true`` (ours; llama-server ignores the key): the same,
  identical (llama-server's eager grammar that lets free text come first, prefilled with the generation prompt).
- ``tool_choice: "required"`` is otherwise deliberately ours (the reply is a call; llama-server lets free text come first):
  the real llama-server's ``/completion`` with the same prompt and *our* grammar (eager, not prefilled) gives the
  same tokens and text as our chat answer,
  and our ``tool_calls`` are the calls ``parse_reply`` reads in that text.

Every tool call's arguments are JSON that validates against its tool's schema, unless flagged (``issues``: cut
off by ``max_tokens``).
"""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from constrained.llama import smollm2_model_path
from oracle.cases.server import ours
from oracle.cases.server_tools import cases, comparable, post, summary, template_path, verbose_of
from oracle.llama_server import LlamaServer

N = int(os.environ.get("CONSTRAINED_TOOLS_N", "20"))


def _args(path: str) -> list[str]:
    return ["-m", path, "-c", "2048", "--jinja", "--chat-template-file", template_path()]


def _our_grammar(body: dict) -> str:
    """The grammar our server builds for a request (the same code path: ``tools_api.plan_tools``)."""
    from pathlib import Path

    from constrained.chat import ChatTemplates
    from constrained.server.tools_api import plan_tools

    return plan_tools(body, ChatTemplates(Path(template_path()).read_text())).params()["grammar"]


def _delimiters(body: dict) -> list:
    from pathlib import Path

    from constrained.chat import ChatTemplates
    from constrained.server.chat_api import chat_params

    return chat_params(dict(body), ChatTemplates(Path(template_path()).read_text()), jinja=True)["message_delimiters"]


@pytest.fixture(scope="module", params=["gemma3-270m", "smollm2-135m"])
def runs(request, default_model_path):
    path = default_model_path if request.param == "gemma3-270m" else smollm2_model_path()
    reqs = cases(N, salt=0 if request.param == "gemma3-270m" else 3)
    forced = {}
    with LlamaServer(_args(path)) as srv:
        theirs = [post(srv, b) for b in reqs]
        for i, b in enumerate(reqs):
            if b["tool_choice"] != "required" or b.get("llama_server_compat"):
                continue
            # required (ours): llama-server's /completion with the same prompt and our grammar (not prefilled)
            # the chat route's message delimiters too: the slot evaluates the prompt in pieces cut at the messages'
            # starts, and another cut gives other logits
            prompt = srv.post("/apply-template", {"messages": b["messages"], "tools": b["tools"]})["prompt"]
            forced[i] = srv.post("/completion", {
                "prompt": prompt, "grammar": _our_grammar(b), "seed": b["seed"],
                "temperature": b["temperature"], "n_predict": b["max_tokens"], "return_tokens": True,
                "cache_prompt": False, "message_delimiters": _delimiters(b)})
    with ours(_args(path)) as srv:
        mine = [post(srv, b) for b in reqs]
    yield request.param, reqs, theirs, mine, forced


def _check_arguments(reqs, replies) -> int:
    n = 0
    for b, r in zip(reqs, replies, strict=True):
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in b["tools"]}
        content, calls, finish = summary(r)
        for name, args in calls:
            n += 1
            try:
                value = json.loads(args)
            except ValueError:
                assert finish == "length", (name, args)      # cut off by max_tokens: flagged, see below
                continue
            jsonschema.validate(value, schemas[name])
    return n


def test_identical_to_llama_server(runs) -> None:
    model, reqs, theirs, mine, _ = runs
    auto = [i for i, b in enumerate(reqs) if b["tool_choice"] == "auto" or b.get("llama_server_compat")]
    assert len(auto) >= 0.7 * N
    n_calls = n_flagged = 0
    for i in auto:
        a, b = theirs[i], mine[i]
        assert b["status"] == 200, (i, b)
        if a["status"] != 200:          # llama-server's parse failed (HTTP 500): ours is content, flagged
            assert "does not match" in json.dumps(a["body"]) and b["body"]["choices"][0]["message"]["parse_error"]
            n_flagged += 1
            continue
        assert comparable(b) == comparable(a), (model, i, reqs[i])
        n_calls += len(summary(a)[1])
    # the few-shot turns make both models call tools under auto: the comparison covers tool_calls, not only text
    assert n_calls >= N // 6, (model, n_calls)
    assert n_flagged <= 2


def test_required_is_a_call_with_llama_servers_tokens(runs) -> None:
    from constrained.chat.tools import parse_reply, tool_call_setup

    model, reqs, theirs, mine, forced = runs
    assert len(forced) >= N // 5
    for i, r in forced.items():
        v = verbose_of(mine[i])
        theirs_v = verbose_of(theirs[i])
        assert v["prompt"] == theirs_v["prompt"] and v["generation_settings"]["grammar"] == _our_grammar(reqs[i])
        assert v["tokens"] == r["tokens"], (model, i)
        assert v["content"] == r["content"]
        content, calls, finish = summary(mine[i])
        assert calls, (model, i, v["content"])                     # required: the reply is a call
        b = reqs[i]
        setup = tool_call_setup(b["tools"], "required", b.get("parallel_tool_calls"), fmt="hermes")
        parsed = parse_reply(r["content"], setup)
        if finish != "length":
            assert [(c.name, c.arguments) for c in parsed.tool_calls] == calls
            assert finish == "tool_calls"


def test_tool_call_arguments_validate(runs) -> None:
    model, reqs, theirs, mine, _ = runs
    assert _check_arguments(reqs, theirs) >= 0
    assert _check_arguments(reqs, mine) >= N // 6
    for r in mine:                                     # our flag on cut-off arguments
        if "body" in r:
            for c in r["body"]["choices"][0]["message"].get("tool_calls", []):
                try:
                    json.loads(c["function"]["arguments"])
                except ValueError:
                    assert c.get("issues"), c
