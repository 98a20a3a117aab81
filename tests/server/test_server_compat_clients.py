"""The official clients against ``constrained serve`` and the real llama-server: ``anthropic`` (messages.create,
messages.stream, count_tokens, tools) and ``openai`` (Responses: create, stream, parse with pydantic; Chat: the
structured-output stream the fence bug broke). Both servers get the same flags (default model, Qwen 2.5's template
for tools) and the same calls; what the clients return must be the same, and where ours deviates (``text.format``
honoured) the result must validate.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from oracle.cases.server import ours
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

WEATHER = {"name": "get_weather", "description": "Current weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                            "required": ["city"]}}


T0 = {"temperature": 0}      # this anthropic client's stream() has no temperature argument: sent as extra body


class Person(BaseModel):
    name: str
    age: int


_SHOT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'


def shots(city: str) -> list[dict[str, object]]:
    # a few-shot turn as plain content (both servers render it the same): the small model calls under auto
    return [{"role": "user", "content": "What is the weather in Rome?"},
            {"role": "assistant", "content": _SHOT}, {"role": "user", "content": "Thanks. Next one."},
            {"role": "user", "content": f"What is the weather in {city}?"}]


def rs_shots(city: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": "What is the weather in Rome?"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": _SHOT}]},
            {"role": "user", "content": "Thanks. Next one."},
            {"role": "user", "content": f"What is the weather in {city}?"}]


def _calls(url: str) -> dict[str, object]:
    a = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
    o = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    out: dict[str, object] = {}
    ask = [{"role": "user", "content": "Name a colour."}]
    m = a.messages.create(model="m", max_tokens=12, extra_body=T0, system="You answer briefly.", messages=ask)
    out["an-create"] = (m.stop_reason, [b.model_dump() for b in m.content], m.usage.output_tokens)
    with a.messages.stream(model="m", max_tokens=12, extra_body=T0, messages=ask) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    out["an-stream"] = (text, final.stop_reason, [b.model_dump() for b in final.content])
    out["an-count"] = a.messages.count_tokens(model="m", messages=ask, system="Be brief.").input_tokens
    t = a.messages.create(model="m", max_tokens=40, extra_body=T0, tools=[WEATHER], tool_choice={"type": "auto"},
                          messages=shots("Paris"))
    uses = [b for b in t.content if b.type == "tool_use"]
    out["an-tools"] = (t.stop_reason, [(b.name, b.input) for b in uses])
    with a.messages.stream(model="m", max_tokens=40, extra_body=T0, tools=[WEATHER], messages=shots("Oslo")) as s:
        fm = s.get_final_message()
    out["an-tools-stream"] = (fm.stop_reason, [(b.name, b.input) for b in fm.content if b.type == "tool_use"])
    if uses:                               # the tool's result back, as an agent loop does
        r = a.messages.create(model="m", max_tokens=20, extra_body=T0, tools=[WEATHER], messages=[
            *shots("Paris"),
            {"role": "assistant", "content": [b.model_dump() for b in t.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "Rain"}]}])
        out["an-tool-result"] = [b.model_dump() for b in r.content if b.type == "text"]
    rs = o.responses.create(model="m", input="Name a colour.", max_output_tokens=12, temperature=0)
    out["rs-create"] = (rs.output_text, rs.status, rs.usage.output_tokens)
    raw_events = list(o.responses.create(model="m", input="Name a fruit.", max_output_tokens=12, temperature=0,
                                         stream=True))
    out["rs-stream-raw"] = ([e.type for e in raw_events],
                            "".join(e.delta for e in raw_events if e.type == "response.output_text.delta"))
    try:              # the SDK's accumulating helper needs output_index / sequence_number (ours only)
        with o.responses.stream(model="m", input="Name a fruit.", max_output_tokens=12, temperature=0) as s:
            kinds = [e.type for e in s]
            fr = s.get_final_response()
        out["rs-stream"] = (kinds, fr.output_text)
    except (TypeError, RuntimeError) as e:
        out["rs-stream"] = ("failed", type(e).__name__)
    fc = o.responses.create(model="m", input=rs_shots("Paris"), max_output_tokens=40, temperature=0,
                            tools=[{"type": "function", "name": "get_weather",
                                                            "description": WEATHER["description"],
                                                            "parameters": WEATHER["input_schema"]}])
    out["rs-tools"] = [(i.type, getattr(i, "name", None), getattr(i, "arguments", None)) for i in fc.output]
    out["rs-input-tokens"] = o.responses.input_tokens.count(model="m", input="Name a colour.").input_tokens
    fence = [{"role": "user", "content": "Write a markdown code block (```json) with a JSON object for Alice, 31."}]
    with o.chat.completions.stream(model="m", messages=fence, response_format=Person, max_tokens=60, seed=0,
                                   temperature=0.8) as s:
        out["chat-parse-stream"] = s.get_final_completion().choices[0].message.parsed
    return out


@pytest.fixture(scope="module")
def both(default_model_path: str) -> tuple[dict[str, object], dict[str, object], str]:
    tmpl = str(Path(llama_cpp_source()) / "models" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja")
    args = ["-m", default_model_path, "-c", "2048", "-t", "1", "-np", "1", "--jinja", "--chat-template-file", tmpl]
    with LlamaServer(args) as real:
        theirs = _calls(real.url)
    with ours(args) as us:
        mine = _calls(us.url)
        o = openai.OpenAI(base_url=us.url + "/v1", api_key="x", max_retries=0)
        a = anthropic.Anthropic(base_url=us.url, api_key="x", max_retries=0)
        dev: dict[str, object] = {}
        dev["parse"] = o.responses.parse(model="m", input="Alice is 31. Give her as JSON.", text_format=Person,
                                         max_output_tokens=40, temperature=0).output_parsed
        # forced and named tool choices: a call of that tool (llama-server: text is allowed first)
        q = [{"role": "user", "content": "What is the weather in Paris?"}]
        for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
            m = a.messages.create(model="m", max_tokens=40, extra_body=T0, tools=[WEATHER], tool_choice=choice,
                                  messages=q)
            dev[f"an-{choice['type']}"] = [(b.type, getattr(b, "name", None), getattr(b, "input", None))
                                           for b in m.content]
        fn = {"type": "function", "name": "get_weather", "description": WEATHER["description"],
              "parameters": WEATHER["input_schema"]}
        r = o.responses.create(model="m", input="What is the weather in Paris?", max_output_tokens=40,
                               temperature=0, tools=[fn], tool_choice={"type": "function", "name": "get_weather"})
        dev["rs-named"] = [(i.type, getattr(i, "name", None)) for i in r.output]
    return theirs, mine, dev


@pytest.mark.parametrize("call", ["an-create", "an-stream", "an-count", "an-tools", "an-tools-stream",
                                  "an-tool-result", "rs-create", "rs-stream-raw", "rs-tools", "rs-input-tokens",
                                  "chat-parse-stream"])
def test_client_sees_the_same(both, call: str) -> None:
    theirs, mine, _ = both
    assert mine.get(call) == theirs.get(call)


def test_the_calls_did_something(both) -> None:
    theirs, _, _ = both
    assert theirs["an-tools"][1] and theirs["an-tools"][1][0][0] == "get_weather"      # a tool_use block
    assert theirs["rs-tools"][0][0] == "function_call"
    assert isinstance(theirs["chat-parse-stream"], Person)
    assert "response.output_text.delta" in theirs["rs-stream-raw"][0] and theirs["rs-create"][0]


def test_responses_stream_helper(both) -> None:
    # client.responses.stream() accumulates by output_index: llama-server's events have none and the helper fails
    # there; ours carries the positions, and the helper gives what the raw events give
    theirs, mine, _ = both
    assert theirs["rs-stream"][0] == "failed"
    kinds, text = mine["rs-stream"]
    assert kinds == mine["rs-stream-raw"][0] and text == mine["rs-stream-raw"][1] == theirs["rs-stream-raw"][1]


def test_deviations_on_ours(both) -> None:
    # ours honours text.format (llama-server ignores it): the SDK's parse gets a validated model; a forced or named
    # tool choice gives that tool's call and nothing else, on Messages and Responses alike
    _, _, dev = both
    assert isinstance(dev["parse"], Person)
    for k in ("an-any", "an-tool"):
        assert [(t, n) for t, n, _ in dev[k]] == [("tool_use", "get_weather")], dev[k]
        assert isinstance(dev[k][0][2], dict) and "city" in dev[k][0][2]
    assert dev["rs-named"] == [("function_call", "get_weather")]
