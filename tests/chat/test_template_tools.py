"""The rendering environment against llama.cpp's jinja engine, for all 70 templates of the sdist's models/templates/
rendered with tools, tool calls and tool results in the history.

The oracle is a C++ shim (``oracle/render_shim.cpp``) over libllama-common's
``common_chat_template_direct_apply_impl``: one render with exactly the given inputs (no message rewrites), as
``ChatTemplates.render_jinja`` does one. Each template renders every conversation of :data:`CONVERSATIONS` (tools
alone, with a system message, a call with object arguments and its result, two parallel calls with a ``null``
content, string arguments, reasoning in the history, results out of call order, contents padded with whitespace) and the output, or the fact of an error, is identical.

The same conversations as a chat request (arguments as JSON strings, as clients send them) with llama-server's own
tool handling (``"llama_server_compat": true``) give the prompt llama-server builds (the shim's
``common_chat_templates_apply`` with the inputs ``oaicompat_chat_params_parse`` makes): the message workarounds of
``ChatTemplates.prepare_messages`` (null content, string arguments parsed for templates that take objects,
StepFun's trimming, outdated Gemma 4 templates' tool results in the assistant turn, DeepSeek V4's in call order), the specialised handlers' prompts. :data:`KNOWN` lists the cases that differ, with the reason.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from constrained.chat import ChatTemplates, jinja_env
from constrained.server.chat_api import chat_params
from constrained.server.errors import HttpError
from oracle.render import chat_apply, chat_apply_model, render
from oracle.sdist import llama_cpp_source

TEMPLATES = sorted(p.name for p in (Path(llama_cpp_source()) / "models" / "templates").glob("*.jinja"))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "description": "City"},
                                               "days": {"type": "integer"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "now", "description": "",
                                           "parameters": {"type": "object", "properties": {}}}}]
_USER = {"role": "user", "content": "Weather in Paris?"}


def _call(i: int, args: object) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": args}}


CONVERSATIONS: dict[str, list[dict]] = {
    "tools": [_USER],
    "system-tools": [{"role": "system", "content": "Be brief."}, _USER],
    "call-result": [_USER, {"role": "assistant", "content": "", "tool_calls": [_call(1, {"city": "Paris"})]},
                    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Sunny"}],
    "parallel-null-content": [
        _USER, {"role": "assistant", "content": None,
                "tool_calls": [_call(1, {"city": "Paris"}), _call(2, {"city": "Lyon", "days": 2})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Rain"},
        {"role": "assistant", "content": "Sunny in Paris, rain in Lyon."}, {"role": "user", "content": "Thanks"}],
    "string-args": [_USER, {"role": "assistant", "content": "", "tool_calls": [_call(1, '{"city": "Paris"}')]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}],
    "reasoning-history": [
        _USER, {"role": "assistant", "content": "", "reasoning_content": "Need the weather",
                "tool_calls": [_call(1, {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "assistant", "content": "Sunny.", "reasoning_content": "Done"}, {"role": "user", "content": "Ok"}],
    "results-out-of-order": [
        _USER, {"role": "assistant", "content": "", "tool_calls": [_call(1, {"city": "Paris"}), _call(2, {"city": "Lyon"})]},
        {"role": "tool", "tool_call_id": "call_2", "content": "Rain"},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}],
    "padded": [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "\n Weather in Paris?  "},
               {"role": "assistant", "content": " Sunny. ", "reasoning_content": "\tEasy\n", "name": ""},
               {"role": "user", "content": [{"type": "text", "text": " And Lyon? "}]},
               {"role": "assistant", "content": "Rain", "reasoning_content": ""}, {"role": "user", "content": "Ok "}],
}


@pytest.mark.parametrize("name", TEMPLATES, ids=[n[:-6] for n in TEMPLATES])
def test_render_with_tools_as_llama_cpp(name: str) -> None:
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    t = ChatTemplates(src, bos_token="<bos>", eos_token="<eos>")
    for case, msgs in CONVERSATIONS.items():
        for thinking in (True, False):
            want = render(t.source, {"messages": msgs, "tools": TOOLS, "add_generation_prompt": True,
                                     "enable_thinking": thinking}, "<bos>", "<eos>")
            try:
                got = {"prompt": t.render_jinja(msgs, tools=TOOLS, enable_thinking=thinking, date_context=False,
                                                strip_bos=False)}
            except jinja_env.ChatTemplateError as e:
                got = {"error": str(e)}
            assert ("error" in got) == ("error" in want), (case, thinking, got, want)
            assert got.get("prompt") == want.get("prompt"), (case, thinking)


# template -> why the chat prompt with tools differs from llama-server's
KNOWN: dict[str, str] = {}


def _string_args(msgs: list[dict]) -> list[dict]:
    out = copy.deepcopy(msgs)
    for m in out:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.dumps(c["function"]["arguments"])
    return out


@pytest.mark.parametrize("name", TEMPLATES, ids=[n[:-6] for n in TEMPLATES])
def test_chat_with_tools_as_llama_server(name: str) -> None:
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    t = ChatTemplates(src, bos_token="<bos>", eos_token="<eos>")
    differ = []
    for case, msgs in CONVERSATIONS.items():
        body = {"messages": _string_args(msgs) if case != "string-args" else msgs, "tools": TOOLS}
        want = chat_apply(src, body, "<bos>", "<eos>")
        try:
            got = {"prompt": chat_params(dict(body, llama_server_compat=True), t, jinja=True)["prompt"]}
        except HttpError as e:
            got = {"error": e.message}
        if ("error" in got) != ("error" in want) or got.get("prompt") != want.get("prompt"):
            differ.append(case)
    if name in KNOWN:
        assert differ, f"listed as known but now identical: remove it from KNOWN ({KNOWN[name]})"
        pytest.xfail(KNOWN[name])
    assert not differ


_DUMP = "{% for m in messages %}{{ m.content }}{% for c in m.tool_calls %}{{ c | tojson }}{% endfor %}{% endfor %}"
CALL_SHAPES = {
    "no-type": {"function": {"name": "f", "arguments": "{}"}},
    "other-type": {"type": "x", "function": {}},
    "no-function": {"type": "function"},
    "no-name": {"type": "function", "function": {"arguments": "{}"}},
    "no-arguments": {"type": "function", "function": {"name": "f"}},
    "name-not-string": {"type": "function", "function": {"name": 5, "arguments": "{}"}},
    "object-arguments-extra-keys": {"id": "a", "type": "function", "zz": 2,
                                    "function": {"arguments": {"b": [1, 2.5, "é"]}, "name": "f", "extra": 1}},
    "empty-id": {"type": "function", "id": "", "function": {"name": "f", "arguments": "{}"}},
}


@pytest.mark.parametrize("template", ["<dump>", "Qwen-Qwen2.5-7B-Instruct.jinja",
                                      "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"])
def test_tool_call_shapes_as_llama_server(template: str) -> None:
    # common_chat_msgs_parse_oaicompat's checks and to_json_oaicompat's shape: the errors' texts and the prompts
    _assert_shapes_as_llama_server(template, {shape: {"role": "assistant", "tool_calls": [call]}
                                              for shape, call in CALL_SHAPES.items()})


def _assert_shapes_as_llama_server(template: str, messages: dict) -> None:
    """Each message between two user turns, with tools: our prompt or error text equals the shim's
    (common_chat_templates_apply after common_chat_msgs_parse_oaicompat)."""
    src = _DUMP if template == "<dump>" else (Path(llama_cpp_source()) / "models" / "templates" / template).read_text()
    t = ChatTemplates(src, bos_token="<bos>", eos_token="<eos>")
    for shape, msg in messages.items():
        body = {"messages": [_USER, msg, _USER], "tools": TOOLS}
        theirs = chat_apply(src, body, "<bos>", "<eos>")    # also the grammar and thinking tags: not compared here
        want = {k: theirs[k] for k in ("prompt", "error") if k in theirs}
        try:
            got = {"prompt": chat_params(dict(body, llama_server_compat=True), t, jinja=True)["prompt"]}
        except HttpError as e:
            got = {"error": e.message}
        assert got == want, shape


_CALL = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
MESSAGE_SHAPES = {
    "role-missing": {"content": "hi"},
    "role-boolean": {"role": True, "content": "hi"},
    "role-array": {"role": [1], "content": "hi"},
    "role-null": {"role": None, "content": "hi"},
    "tool-calls-string": {"role": "assistant", "content": "hi", "tool_calls": "x"},
    "tool-calls-number": {"role": "assistant", "content": "hi", "tool_calls": 5},
    "tool-calls-null": {"role": "assistant", "content": "hi", "tool_calls": None},
    "tool-calls-empty": {"role": "assistant", "content": "hi", "tool_calls": []},
    "tool-calls-object": {"role": "assistant", "tool_calls": {"k": _CALL, "j": dict(_CALL, id="c2")}},
}


@pytest.mark.parametrize("template", ["<dump>", "Qwen-Qwen2.5-7B-Instruct.jinja"])
def test_message_shapes_as_llama_server(template: str) -> None:
    # common_chat_msgs_parse_oaicompat on the message itself: role's type error and a missing role inside its
    # "Failed to parse messages" wrapper, tool_calls iterated as nlohmann's range-for does (an object's values,
    # nothing for null, any other value once)
    _assert_shapes_as_llama_server(template, MESSAGE_SHAPES)


@pytest.mark.parametrize("expr,want", [
    ("{{ [{'a': 1}, {}] | map(attribute='a', default=5) | list | tojson }}", '[1, 5]'),
    ("{% set c = none %}{{ c | default('d') }}|{{ u | d('e') }}|{{ '' | default('f') }}|{{ '' | default('g', true) }}", 'd|e||g'),
    ("{{ [{'a': 'x'}, {'a': 'y'}] | map(attribute='a') | tojson }}", '["x", "y"]'),
    ("{{ [{'x': 1}, {'x': 0}] | selectattr('x') | tojson }}", '[{"x": 1}]'),
    ("{{ [{'x': 1}, {'x': 0}] | rejectattr('x') | tojson }}", '[{"x": 0}]'),
    ("{{ [0, 1, 2] | select('equalto', 1) | tojson }}", '[1]'),
    ("{{ [0, 1, 2] | reject('equalto', 1) | tojson }}", '[0, 2]'),
    ("{{ 'a' | safe + '<b>' }}", "a<b>"),
    ("{{ none }}|{{ {'a': 1} }}|{{ [1, 'x', [true, 2.5]] }}|{{ 0.1 }}|{{ 1.0 }}", "||1xTrue2.5|0.1|1.0"),
    ("{{ 'x' + none }}{{ none + 'y' }}{% set n = none %}{{ 'z' ~ n ~ 1 }}{{ u ~ 'w' }}", "xyz1w"),
    ("{{ 'a=' + {'k': 'v', 'n': [1, none, true]} }}", "a={'k': 'v', 'n': [1, None, True]}"),
    ("{{ 'q' + \"it's\" }}|{{ 'n=' + 2 }}|{{ 'f=' + 2.50 }}", "qit's|n=2|f=2.5"),
    ("{{ [1] + [2] }}|{{ 1 + 2 }}|{{ 1 + 2.5 }}", "12|3|3.5"),
    ("{% set t = {'a': 1} %}[{{ t.b.c }}{{ u['a'] }}{{ t.b.items() | list }}]{% for k, v in t.b.items() %}{{ k }}"
     "{% endfor %}|{{ t.b | length }}|{{ t.b is defined }}|{{ u.v ~ 'a' }}|{{ u.upper() ~ u.length() }}"
     "|{{ u.first() is defined }}|{{ u.default('d') }}", "[]|0|False|a|0|False|d"),
    ("{% set n = none %}{{ n[0] }}", None),
    ("{{ u() }}", None),
])
def test_environment_as_llama_cpp(expr: str, want: str | None) -> None:
    # the behaviours the templates above depend on, each checked against the engine itself (None: an error)
    theirs = render(expr, {"messages": []})
    if want is None:
        assert "error" in theirs
        with pytest.raises(Exception):  # noqa: B017 - jinja2's or ours, as ChatTemplates.render_jinja catches them
            jinja_env.environment().from_string(expr).render()
        return
    assert theirs == {"prompt": want}
    assert jinja_env.environment().from_string(expr).render() == want


@pytest.fixture(scope="module")
def command_r() -> tuple[str, ChatTemplates]:
    """ggml-vocab-command-r.gguf (vocabulary only): a GGUF with a default and a ``tool_use`` template."""
    import llama_cpp
    from llama_cpp import llama_cpp as L

    path = str(Path(llama_cpp_source()) / "models" / "ggml-vocab-command-r.gguf")
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), mp)
    assert model, path
    try:
        t = ChatTemplates.from_model(model, L.llama_model_get_vocab(model))
    finally:
        L.llama_model_free(model)
    assert t.tool_use and t.tool_use != t.source and llama_cpp
    return path, t


@pytest.mark.parametrize("case", ["tools", "call-result", "parallel-null-content", "no-tools"])
def test_tool_use_template_as_llama_server(command_r: tuple[str, ChatTemplates], case: str) -> None:
    # common_chat_templates_apply_jinja renders a request with tools with the GGUF's tool_use template
    path, t = command_r
    msgs = CONVERSATIONS["tools" if case == "no-tools" else case]
    body = {"messages": _string_args(msgs)} if case == "no-tools" else {"messages": _string_args(msgs), "tools": TOOLS}
    want = chat_apply_model(path, body)
    got = chat_params(dict(body, llama_server_compat=True), t, jinja=True)["prompt"]
    assert got == want.get("prompt"), want
