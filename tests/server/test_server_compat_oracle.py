"""The Anthropic Messages routes (``/v1/messages``, ``/v1/messages/count_tokens``), the OpenAI Responses routes
(``/v1/responses``, ``/responses``, ``/v1/responses/input_tokens``) and chat ``response_format`` replies in and
out of a code fence, against the real llama-server: the same requests, in the same order, to both servers started
with the same flags; status, bodies and SSE events (names, order, block indices, data) identical apart from
random ids (compared as placeholders in order of appearance), timestamps and timings.

Three set-ups: the default model with its own template (no tools, no reasoning); Qwen 2.5's template
(``<tool_call>`` tools: ``tool_use`` / ``tool_result`` blocks, function calls and their outputs); DeepSeek-R1's
(its generation prompt opens ``<think>``: thinking blocks and reasoning items).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracle.cases.compat import RESPONSES_EXTRA, body_of, normalize_ids, without_responses_extras
from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

CHAT, MSG, COUNT, RESP = "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
BOOK = {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title"]}
FENCE = "Write a markdown code block (```json) with a JSON object for Alice, 31."
ASK = [{"role": "user", "content": "Name a colour."}]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="   # 1x1
PNG_URL = f"data:image/png;base64,{PNG}"
IMAGE_BLOCK = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


def _rf(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def _fence(seed: int, **kw: object) -> dict:
    return {"messages": [{"role": "user", "content": FENCE}], "max_tokens": 60, "seed": seed, "temperature": 0.8,
            "response_format": _rf(SCHEMA), "verbose": True, **kw}


def _book(seed: int, **kw: object) -> dict:
    return {"messages": [{"role": "user", "content": "Describe a book as JSON with a title."}], "max_tokens": 40,
            "seed": seed, "temperature": 0.7, "response_format": _rf(BOOK), "verbose": True, **kw}


def _an(**kw: object) -> dict:
    return {"model": "m", "max_tokens": 12, "temperature": 0, "system": "You answer briefly.", "messages": ASK,
            **kw}


def _rs(**kw: object) -> dict:
    return {"model": "m", "input": "Name a colour.", "max_output_tokens": 12, "seed": 3, **kw}


# (id, path, body) per set-up
DEFAULT: list[tuple[str, str, object]] = [
    # response_format: the fence and the whitespace around the JSON are never content (stream or not, cut or not)
    *[(f"rf-fence-{s}", CHAT, _fence(s)) for s in range(4)],
    *[(f"rf-fence-stream-{s}", CHAT, _fence(s, stream=True)) for s in range(4)],
    *[(f"rf-cut-{n}", CHAT, _fence(0, max_tokens=n)) for n in (2, 3, 5, 12)],
    *[(f"rf-cut-stream-{n}", CHAT, _fence(0, max_tokens=n, stream=True)) for n in (2, 3, 5, 12)],
    ("rf-fence-json-object", CHAT, {**_fence(1), "response_format": {"type": "json_object"}}),
    ("rf-fence-json-object-stream", CHAT, {**_fence(1, stream=True), "response_format": {"type": "json_object"}}),
    *[(f"rf-ws-{s}", CHAT, _book(s)) for s in range(6)],
    *[(f"rf-ws-stream-{s}", CHAT, _book(s, stream=True)) for s in range(3)],
    # schema errors on the jinja path: the reader's own message, the converter's with its head
    ("bad-schema-type", CHAT, {"messages": ASK, "response_format": {"type": "json_object",
                                                                    "schema": {"type": "hiccup"}}}),
    ("bad-schema-ref", CHAT, {"messages": ASK, "response_format": _rf({"$ref": "#/definitions/nope"})}),
    ("bad-schema-pattern", CHAT, {"messages": ASK, "response_format": _rf({"type": "string", "pattern": "^(ab$"})}),
    ("bad-schema-top-level", CHAT, {"messages": ASK, "json_schema": {"type": 5}}),
    # Anthropic Messages
    ("an-basic", MSG, _an()),
    ("an-basic-stream", MSG, _an(stream=True)),
    ("an-blocks", MSG, _an(system=[{"type": "text", "text": "You answer "}, {"type": "text", "text": "briefly."}],
                           messages=[{"role": "user", "content": [{"type": "text", "text": "Name a"},
                                                                  {"type": "text", "text": " fruit."}]}])),
    ("an-stop", MSG, _an(stop_sequences=["e"], max_tokens=20)),
    ("an-stop-stream", MSG, _an(stop_sequences=["e"], max_tokens=20, stream=True)),
    ("an-max-tokens", MSG, _an(max_tokens=3)),
    ("an-max-tokens-stream", MSG, _an(max_tokens=3, stream=True)),
    ("an-top-k", MSG, _an(temperature=1.0, top_k=1)),
    ("an-top-p", MSG, _an(temperature=1.0, top_p=0.0001)),
    ("an-multi-turn", MSG, _an(messages=[*ASK, {"role": "assistant", "content": "Blue."},
                                         {"role": "user", "content": "Another?"}])),
    ("an-prefill", MSG, _an(messages=[*ASK, {"role": "assistant", "content": "My favourite colour is"}])),
    ("an-no-system", MSG, {"model": "m", "max_tokens": 6, "temperature": 0, "messages": ASK}),
    ("an-no-max-tokens", MSG, {"model": "m", "temperature": 0, "messages": ASK, "stop_sequences": ["."]}),
    ("an-billing", MSG, _an(system="x-anthropic-billing-header: cc_version=2.1; cch=a5145; You are helpful.")),
    ("an-seed-ignored", MSG, _an(seed=5, top_k=1, temperature=1.0)),
    ("an-count", COUNT, _an()),
    ("an-count-blocks", COUNT, _an(system=[{"type": "text", "text": "Be kind."}])),
    ("an-bad-no-messages", MSG, {"model": "m", "max_tokens": 4}),
    ("an-bad-count-no-messages", COUNT, {"model": "m"}),
    ("an-bad-two-assistants", MSG, _an(messages=[*ASK, {"role": "assistant", "content": "a"},
                                                 {"role": "assistant", "content": "b"}])),
    ("an-after-errors", MSG, _an(max_tokens=4)),
    # OpenAI Responses
    ("rs-basic", RESP, _rs()),
    ("rs-basic-stream", RESP, _rs(stream=True)),
    ("rs-alias", "/responses", _rs()),
    ("rs-instructions", RESP, _rs(instructions="You answer briefly.")),
    ("rs-items", RESP, _rs(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Blue."}]},
        {"role": "user", "content": "Another?"}])),
    ("rs-developer", RESP, _rs(input=[{"role": "developer", "content": "Be brief."},
                                      {"role": "user", "content": "Name a fruit."}])),
    ("rs-response-format", RESP, _rs(input="Alice is 31. JSON please.", max_output_tokens=30,
                                     response_format=_rf(SCHEMA))),
    ("rs-response-format-stream", RESP, _rs(input="Alice is 31. JSON please.", max_output_tokens=30,
                                            response_format=_rf(SCHEMA), stream=True)),
    ("rs-grammar-stream", RESP, _rs(grammar='root ::= "red" | "blue"', stream=True)),
    ("rs-progress-stream", RESP, _rs(max_output_tokens=3, stream=True, return_progress=True)),
    ("rs-input-tokens", "/v1/responses/input_tokens", _rs(instructions="Be brief.")),
    ("rs-bad-no-input", RESP, {"model": "m"}),
    ("rs-bad-previous", RESP, _rs(previous_response_id="resp_1")),
    ("rs-bad-item", RESP, _rs(input=[{"foo": 1}])),
    ("rs-bad-input-file", RESP, _rs(input=[{"role": "user", "content": [{"type": "input_file"}]}])),
    ("rs-bad-input-type", RESP, _rs(input=5)),
    ("rs-bad-tools", RESP, _rs(tools={"type": "function"})),
    ("rs-after-errors", RESP, _rs(max_output_tokens=4)),
    # media parts without a projector (oaicompat_content_load_media): 500 for image/audio/video, 400 for the rest
    ("an-image", MSG, _an(messages=[{"role": "user", "content": [IMAGE_BLOCK, {"type": "text", "text": "What?"}]}])),
    ("an-tool-result-image", MSG, _an(messages=[
        {"role": "user", "content": "What is in this image?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"f": "a.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "File: a.png"}, IMAGE_BLOCK]}]}])),
    ("an-count-image", COUNT, _an(messages=[{"role": "user", "content": [IMAGE_BLOCK]}])),
    *[(f"chat-part-{n}", CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."}, part]}],
                                "max_tokens": 2})
      for n, part in [("image", {"type": "image_url", "image_url": {"url": PNG_URL}}),
                      ("audio", {"type": "input_audio", "input_audio": {"data": PNG, "format": "wav"}}),
                      ("video", {"type": "input_video", "input_video": {"url": PNG_URL}}),
                      ("video-url", {"type": "video_url", "video_url": {"url": PNG_URL}}),
                      ("unknown", {"type": "file", "file": {}}), ("no-type", {"text": "x"}),
                      ("type-not-string", {"type": 7, "text": "x"}), ("not-object", "x")]],
    ("rs-input-image", RESP, _rs(input=[{"role": "user", "content": [{"type": "input_image", "image_url": PNG_URL},
                                                                     {"type": "input_text", "text": "What?"}]}])),
]

WEATHER = {"name": "get_weather", "description": "Current weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                            "required": ["city"]}}
RS_WEATHER = {"type": "function", "name": WEATHER["name"], "description": WEATHER["description"],
              "parameters": WEATHER["input_schema"]}
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
AN_HISTORY = [
    {"role": "user", "content": "What is the weather in Rome?"},
    {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                      {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                       "input": {"city": "Rome"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 24 C"}]},
    {"role": "assistant", "content": "It is sunny in Rome."},
    {"role": "user", "content": "And in Oslo?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "get_weather",
                                       "input": {"city": "Oslo"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                                  "content": [{"type": "text", "text": "Error: "}, {"type": "text",
                                                                                   "text": "timeout"}]}]},
]
RS_HISTORY = [
    {"role": "user", "content": "What is the weather in Rome?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Rome"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 24 C"},
    {"role": "user", "content": "Say it in one sentence."},
]

# a few-shot turn (a <tool_call> block as plain content, rendered the same by both servers, as in
# oracle/cases/server_tools.py) makes the small model call the tool under auto
_SHOT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
FEW_SHOT = [{"role": "user", "content": "What is the weather in Rome?"},
            {"role": "assistant", "content": [{"type": "text", "text": _SHOT}]},
            {"role": "user", "content": "Thanks. Next one."},
            {"role": "user", "content": "What is the weather in Paris?"}]
RS_FEW_SHOT = [{"role": "user", "content": "What is the weather in Rome?"},
               {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": _SHOT}]},
               {"role": "user", "content": "Thanks. Next one."},
               {"role": "user", "content": "What is the weather in Paris?"}]

TOOLS: list[tuple[str, str, object]] = [
    # auto: the few-shot turn makes the model call the tool (tool_use blocks, input_json_delta at index 0 or 1)
    ("an-tools-auto", MSG, _an(tools=[WEATHER], tool_choice={"type": "auto"}, messages=FEW_SHOT, max_tokens=40)),
    ("an-tools-auto-stream", MSG, _an(tools=[WEATHER], messages=FEW_SHOT, max_tokens=40, stream=True)),
    ("an-tools-auto-cut-stream", MSG, _an(tools=[WEATHER], messages=FEW_SHOT, max_tokens=12, stream=True)),
    ("an-tools-plain", MSG, _an(tools=[WEATHER], tool_choice={"type": "auto"}, messages=PARIS, max_tokens=20)),
    ("an-tools-history", MSG, _an(tools=[WEATHER], messages=AN_HISTORY, max_tokens=30)),
    ("an-tools-history-stream", MSG, _an(tools=[WEATHER], messages=AN_HISTORY, max_tokens=30, stream=True)),
    ("an-tools-count", COUNT, _an(tools=[WEATHER], messages=AN_HISTORY)),
    # required as llama-server has it (our "llama_server_compat", which llama-server ignores; Responses keeps it)
    ("rs-tools-required", RESP, _rs(tools=[RS_WEATHER], tool_choice="required", input=PARIS, max_output_tokens=40,
                                    llama_server_compat=True)),
    ("rs-tools-auto", RESP, _rs(tools=[RS_WEATHER], input=RS_FEW_SHOT, max_output_tokens=40)),
    ("rs-tools-auto-stream", RESP, _rs(tools=[RS_WEATHER], input=RS_FEW_SHOT, max_output_tokens=40, stream=True)),
    ("rs-tools-history", RESP, _rs(tools=[RS_WEATHER], input=RS_HISTORY, max_output_tokens=30)),
    ("rs-tools-history-stream", RESP, _rs(tools=[RS_WEATHER], input=RS_HISTORY, max_output_tokens=30, stream=True)),
    ("rs-tools-web-search-skipped", RESP, _rs(tools=[{"type": "web_search"}], max_output_tokens=4)),
    ("rs-tools-input-tokens", "/v1/responses/input_tokens", _rs(tools=[RS_WEATHER], input=RS_HISTORY)),
]

SPLIT = 'root ::= [a-z]{2,6} " " [a-z]{2,6} "</think>" [a-z ]{3,12}'
THINK: list[tuple[str, str, object]] = [
    ("an-think", MSG, _an(max_tokens=10)),
    ("an-think-stream", MSG, _an(max_tokens=10, stream=True)),
    ("an-think-history", MSG, _an(max_tokens=8, messages=[
        *ASK, {"role": "assistant", "content": [{"type": "thinking", "thinking": "Easy.", "signature": ""},
                                                {"type": "text", "text": "Blue."}]},
        {"role": "user", "content": "Another?"}])),
    ("an-think-off", MSG, _an(max_tokens=10, chat_template_kwargs={"enable_thinking": False})),
    ("rs-reason-split", RESP, _rs(grammar=SPLIT, max_output_tokens=24)),
    ("rs-reason-split-stream", RESP, _rs(grammar=SPLIT, max_output_tokens=24, stream=True)),
    ("rs-reason-history", RESP, _rs(input=[
        {"role": "user", "content": "Name a colour."},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Easy."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Blue."}]},
        {"role": "user", "content": "Another?"}], max_output_tokens=8)),
]

SETUPS = {"default": ([], DEFAULT), "tools": (["Qwen-Qwen2.5-7B-Instruct.jinja"], TOOLS),
          "think": (["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"], THINK)}


def _args(model: str, template: list[str]) -> list[str]:
    args = ["-m", model, "-c", "2048", "-t", "1", "-np", "1", "--jinja"]
    for t in template:
        args += ["--chat-template-file", str(Path(llama_cpp_source()) / "models" / "templates" / t)]
    return args


def _case_ids() -> list[tuple[str, str]]:
    return [(s, c) for s, (_, cases) in SETUPS.items() for c, _, _ in cases]


@pytest.mark.parametrize("setup,case", _case_ids(), ids=[f"{s}:{c}" for s, c in _case_ids()])
def test_same_as_llama_server(request, setup: str, case: str) -> None:
    pairs = _pairs_for(request, setup)
    (rs, rh, rb), (us, uh, ub) = pairs[case]
    real, mine = normalize_ids(body_of(rb, rh)), normalize_ids(body_of(ub, uh))
    assert (us, without_responses_extras(mine)) == (rs, real), (ub[:400], rb[:400])
    if isinstance(mine, list) and path_of(setup, case) in (RESP, "/responses"):     # ours: the SDK's positions
        _check_positions(mine)


_CACHE: dict[str, dict[str, tuple]] = {}      # per set-up, both servers run once per session


def _pairs_for(request, setup: str) -> dict[str, tuple]:
    if setup not in _CACHE:
        template, cases = SETUPS[setup]
        args = _args(request.getfixturevalue("default_model_path"), template)
        out: dict[str, list] = {}
        with LlamaServer(args) as real:
            out["real"] = [raw(real, "POST", p, b) for _, p, b in cases]
        with ours(args) as us:
            out["ours"] = [raw(us, "POST", p, b) for _, p, b in cases]
        _CACHE[setup] = {cid: (out["real"][i], out["ours"][i]) for i, (cid, _, _) in enumerate(cases)}
    return _CACHE[setup]


def path_of(setup: str, case: str) -> str:
    return next(p for c, p, _ in SETUPS[setup][1] if c == case)


def _check_positions(evs: list) -> None:
    # sequence_number counts the events; an item's events share its output_index, items numbered as added
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    added: dict[str, int] = {}
    for name, d in evs:
        if name == "response.output_item.added":
            assert d["output_index"] == len(added)
            added[d["item"]["id"]] = d["output_index"]
        elif "item_id" in d or name == "response.output_item.done":
            key = d.get("item_id") or d["item"]["id"]
            if key in added:
                assert d["output_index"] == added[key], (name, d)
        if name.startswith(("response.output_text.", "response.content_part.")):
            assert d["content_index"] == 0
    assert not RESPONSES_EXTRA & set(evs[-1][1]["response"]) if evs and evs[-1][0] == "response.completed" else True


def _verbose_content(payload: bytes, headers: dict[str, str]) -> str:
    body = body_of(payload, headers)
    if isinstance(body, list):
        return next(d["__verbose"]["content"] for _, d in body if isinstance(d, dict) and "__verbose" in d)
    return body["__verbose"]["content"]


def test_the_cases_reach_the_fence_and_the_whitespace(request) -> None:
    # the response_format cases prove something: llama-server's raw replies open a fence (and some are cut inside
    # it), and some start with whitespace the parser strips
    pairs = _pairs_for(request, "default")
    raws = {c: _verbose_content(pairs[c][0][2], pairs[c][0][1]) for c, _, _ in DEFAULT if c.startswith("rf-")}
    assert sum(r.lstrip().startswith("```json") for r in raws.values()) >= 4, raws
    assert any(c.startswith("rf-cut") and r.lstrip().startswith("```json") for c, r in raws.items()), raws
    assert any(r[:1].isspace() for r in raws.values()), raws
    for c, r in raws.items():                   # and the content llama-server answered is not the raw text (unless
        # the reply stops before the JSON starts: an empty parsed message is answered as the raw text)
        if r.lstrip().startswith("```json") and "stream" not in c and "{" in r:
            content = json.loads(pairs[c][0][2])["choices"][0]["message"]["content"]
            assert "```" not in content and content == content.strip(), (c, content)



def test_the_cases_reach_tools_and_thinking(request) -> None:
    # llama-server's answers in the tools and thinking set-ups carry what they are there for
    tools = _pairs_for(request, "tools")
    assert '"type":"tool_use"' in tools["an-tools-auto"][0][2].decode()
    assert b"input_json_delta" in tools["an-tools-auto-stream"][0][2]
    assert b"response.function_call_arguments.delta" in tools["rs-tools-auto-stream"][0][2]
    think = _pairs_for(request, "think")
    assert b'"type":"thinking"' in think["an-think"][0][2] and b"thinking_delta" in think["an-think-stream"][0][2]
    assert b"response.reasoning_text.delta" in think["rs-reason-split-stream"][0][2]


# one generating instance per request: llama-server runs a request's instances concurrently, so the slot's prompt
# cache would depend on which finished last
GCP_CASES: list[tuple[str, object]] = [
    ("predict", {"instances": [
        {"@requestFormat": "chatCompletions", "max_tokens": 4, "temperature": 0, "messages": ASK},
        {"@requestFormat": "/apply-template", "messages": ASK},
        {"@requestFormat": "tokenize", "content": "Hi"},
        {"@requestFormat": "nope"}, 5, {"x": 1},
        {"@requestFormat": "chatCompletions", "messages": "bad"}]}),
    ("predict-completions-stream-off", {"instances": [
        {"@requestFormat": "completions", "prompt": "Hi", "max_tokens": 2, "temperature": 0, "stream": True}]}),
    ("predict-messages", {"instances": [{"@requestFormat": "messages", "max_tokens": 3, "temperature": 0,
                                         "messages": ASK}]}),
    ("predict-path", {"instances": [{"@requestFormat": "/v1/responses", "input": "Hi", "max_output_tokens": 2,
                                     "temperature": 0}]}),
    ("predict-not-array", {"instances": 3}),
    ("predict-not-object", [1]),
    ("predict-too-many", {"instances": [{"@requestFormat": "tokenize", "content": "a"}] * 129}),
]


def test_gcp_predict_as_llama_server(default_model_path: str, monkeypatch) -> None:
    # AIP_MODE=PREDICTION: /predict dispatches each instance to the route its @requestFormat names
    monkeypatch.setenv("AIP_MODE", "PREDICTION")
    monkeypatch.setenv("AIP_HEALTH_ROUTE", "/ping")
    args = _args(default_model_path, [])
    got = {}
    for who, cls in (("real", LlamaServer), ("ours", ours)):
        srv = cls(args)
        monkeypatch.setenv("AIP_HTTP_PORT", str(srv.port))
        with srv:
            got[who] = [raw(srv, "POST", "/predict", b) for _, b in GCP_CASES] + [raw(srv, "GET", "/ping")]
    for (rs, rh, rb), (us, uh, ub) in zip(got["real"], got["ours"], strict=True):
        assert (us, normalize_ids(body_of(ub, uh))) == (rs, normalize_ids(body_of(rb, rh)))


def _metrics(text: str) -> dict[str, tuple[str, str, float]]:
    out: dict[str, list] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, help_ = line[7:].split(" ", 1)
            out[name] = [help_, "", None]
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ", 1)
            out[name][1] = kind
        elif line and not line.startswith("#"):
            name, v = line.rsplit(" ", 1)
            out[name][2] = float(v)
    return {k: tuple(v) for k, v in out.items()}


VARYING = ("seconds",)          # times and rates differ between two runs


def test_metrics_as_llama_server(default_model_path: str) -> None:
    # /metrics: the same names, help texts, types, and counts after the same requests (times and rates aside)
    args = [*_args(default_model_path, []), "--metrics"]
    got = {}
    for who, cls in (("real", LlamaServer), ("ours", ours)):
        with cls(args) as srv:
            first = raw(srv, "GET", "/metrics")
            for b in ({"prompt": "The capital of France is", "n_predict": 6, "temperature": 0},
                      {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0},
                      {"prompt": "Once upon a time", "n_predict": 1, "temperature": 0}):
                assert raw(srv, "POST", "/completion", b)[0] == 200
            got[who] = (first, raw(srv, "GET", "/metrics"), raw(srv, "GET", "/metrics"))
    for (rs, rh, rb), (us, uh, ub) in zip(got["real"], got["ours"], strict=True):
        assert (us, uh["content-type"]) == (rs, rh["content-type"])
        assert ("process-start-time-unix" in uh) == ("process-start-time-unix" in rh)
        real, mine = _metrics(rb.decode()), _metrics(ub.decode())
        assert list(mine) == list(real)
        for name, (help_, kind, v) in real.items():
            mh, mk, mv = mine[name]
            assert (mh, mk) == (help_, kind), name
            if any(w in name for w in VARYING):
                assert mv >= 0 and (mv > 0) == (v > 0), (name, mv, v)
            else:
                assert mv == v, (name, mv, v)
