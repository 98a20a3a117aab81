"""``constrained serve`` over real HTTP on 127.0.0.1: the official ``openai`` client, bad input, concurrency,
disconnects, the API key and the command line. (Byte-for-byte agreement with the real llama-server is
``test_server_oracle.py``.)"""

from __future__ import annotations

import http.client
import json
import threading
import time

import jsonschema
import pytest

from oracle.cases.server import events, ours, raw

openai = pytest.importorskip("openai")

COLOURS = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]},
                                             "shade": {"type": "integer", "minimum": 0, "maximum": 9}},
           "required": ["colour", "shade"]}
MSGS = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def srv():
    with ours(["-c", "2048", "-t", "1", "-np", "2", "--jinja", "--metrics", "--slots"]) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)


# ------------------------------------------------------------------ the openai client
def test_openai_chat(client) -> None:
    r = client.chat.completions.create(model="x", messages=MSGS, max_tokens=8, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant" and isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_openai_stream_equals_non_stream(client) -> None:
    full = client.chat.completions.create(model="x", messages=MSGS, max_tokens=10, temperature=0)
    chunks = list(client.chat.completions.create(model="x", messages=MSGS, max_tokens=10, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert len({ch.id for ch in chunks}) == 1


def test_openai_response_format_json_schema_validates(client) -> None:
    for seed in (1, 2, 3):
        r = client.chat.completions.create(
            model="x", messages=MSGS, max_tokens=40, seed=seed, temperature=1.0,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": COLOURS}})
        jsonschema.validate(json.loads(r.choices[0].message.content), COLOURS)


def test_openai_json_object(client) -> None:
    r = client.chat.completions.create(model="x", messages=MSGS, max_tokens=60, seed=4,
                                       response_format={"type": "json_object"},
                                       extra_body={"json_schema": COLOURS})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_openai_seed_reproducible(client) -> None:
    a = [client.chat.completions.create(model="x", messages=MSGS, max_tokens=12, seed=7, temperature=1.0)
         .choices[0].message.content for _ in range(2)]
    assert a[0] == a[1]


def test_openai_logprobs(client) -> None:
    r = client.chat.completions.create(model="x", messages=MSGS, max_tokens=5, temperature=0, logprobs=True,
                                       top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert "".join(t.token for t in lp) == r.choices[0].message.content
    for t in lp:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3 and t.bytes
        assert t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob


def test_openai_completions(client) -> None:
    r = client.completions.create(model="x", prompt="Once upon a time", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text


def test_openai_errors_are_client_exceptions(client, srv) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="x", messages=MSGS, response_format={"type": "sound"})
    assert "response_format type must be one of" in e.value.message
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="x", messages=MSGS, extra_body={"json_schema": {"type": "string"},
                                                                            "grammar": 'root ::= "a"'})
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="x", messages=MSGS, extra_body={"grammar": "root ::= ("})
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "word " * 2100}],
                                       max_tokens=1)
    assert e.value.status_code == 400
    body = e.value.body if isinstance(e.value.body, dict) else {}
    assert body.get("type", body.get("error", {}).get("type")) == "exceed_context_size_error"


def test_api_key(default_model_path: str) -> None:
    with ours(["-m", default_model_path, "-c", "512", "-t", "1", "--api-key", "sekrit"]) as s:
        bad = openai.OpenAI(base_url=f"{s.url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=f"{s.url}/v1", api_key="sekrit", max_retries=0)
        assert good.models.list().data[0].id == default_model_path
        st, _, b = raw(s, "GET", "/health")
        assert st == 200                                     # public
        st, _, b = raw(s, "GET", "/props", headers={"X-Api-Key": "sekrit"})
        assert st == 200
        st, _, b = raw(s, "GET", "/props", headers={"Authorization": "Bearer nope"})
        assert (st, json.loads(b)) == (401, {"error": {"message": "Invalid API Key", "type": "authentication_error",
                                                       "code": 401}})


# ------------------------------------------------------------------ bad input: status, message, still serving
BAD = [
    (b"{bad", 500, "server_error", "[json.exception.parse_error.101]"),
    (b"", 500, "server_error", "[json.exception.parse_error.101]"),
    ({"prompt": "x", "n_predict": "many"}, 400, "invalid_request_error",
     "Field 'n_predict': [json.exception.type_error.302] type must be number, but is string"),
    ({"prompt": "x", "stream": "yes"}, 400, "invalid_request_error",
     "Field 'stream': [json.exception.type_error.302] type must be boolean, but is string"),
    ({"prompt": "x", "grammar": "root ::= (", "n_predict": 1}, 400, "invalid_request_error",
     "Failed to initialize samplers: failed to parse grammar"),
    ({"prompt": "x", "json_schema": {"type": "hiccup"}}, 400, "invalid_request_error",
     "Field 'json_schema': \"json_schema\": JSON schema conversion failed:"),
    ({"prompt": "x", "n": 3}, 400, "invalid_request_error",
     "Field 'n': Value must be between 1 <= value <= 2, but got 3"),
    ({"prompt": [262144 + 5], "n_predict": 1}, 400, "invalid_request_error", "Prompt contains invalid tokens"),
    ({"prompt": "word " * 2100, "n_predict": 1}, 400, "exceed_context_size_error",
     "request (2102 tokens) exceeds the available context size (1024 tokens), try increasing it"),
    ({"prompt": {"no": 1}}, 400, "invalid_request_error", "\"prompt\" elements must be"),
]


@pytest.mark.parametrize("i", range(len(BAD)))
def test_bad_input_then_served(srv, i: int) -> None:
    body, status, etype, msg = BAD[i]
    st, h, b = raw(srv, "POST", "/completion", body)
    err = json.loads(b)["error"]
    assert (st, err["type"], err["code"]) == (status, etype, status)
    assert err["message"].startswith(msg)
    if etype == "exceed_context_size_error":
        assert (err["n_prompt_tokens"], err["n_ctx"]) == (2102, 1024)      # -np 2: the context is split
    st, _, b = raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": 2, "temperature": 0})
    assert st == 200 and json.loads(b)["tokens_predicted"] <= 2


def test_n_probs_out_of_range_is_clamped(srv) -> None:
    # llama-server gives n_probs no range: <= 0 is off, a large value is cut to the candidates
    st, _, b = raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": 1, "n_probs": -4, "temperature": 0})
    assert st == 200 and "completion_probabilities" not in json.loads(b)
    st, _, b = raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": 1, "n_probs": 50, "temperature": 0,
                                                 "post_sampling_probs": True})
    probs = json.loads(b)["completion_probabilities"][0]["top_probs"]
    assert st == 200 and 1 <= len(probs) <= 40            # what survives top_k = 40


def test_unknown_endpoint_and_method(srv) -> None:
    st, h, b = raw(srv, "GET", "/v2/nothing")
    assert (st, json.loads(b)) == (404, {"error": {"message": "File Not Found", "type": "not_found_error",
                                                   "code": 404}})
    assert h["server"] == "llama.cpp"
    st, h, b = raw(srv, "OPTIONS", "/v1/chat/completions", headers={"Origin": "http://x.example"})
    assert st == 200 and h["access-control-allow-origin"] == "http://x.example"
    assert h["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"


# ------------------------------------------------------------------ streaming framing, metrics, slots
def test_sse_framing(srv) -> None:
    st, h, b = raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": 3, "stream": True, "temperature": 0})
    assert h["content-type"].startswith("text/event-stream") and b.endswith(b"\n\n")
    ev = events(b)
    assert "[DONE]" not in ev and ev[-1]["stop"] is True
    st, h, b = raw(srv, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3, "stream": True})
    assert events(b)[-1] == "[DONE]"


def test_metrics(srv) -> None:
    st, h, b = raw(srv, "GET", "/metrics")
    assert st == 200 and h["content-type"].startswith("text/plain; version=0.0.4")
    assert b"llamacpp:prompt_tokens_total" in b and b"llamacpp:requests_deferred" in b


def _slots_idle(srv, timeout: float = 10.0) -> bool:
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        st, _, b = raw(srv, "GET", "/slots")
        if not any(s["is_processing"] for s in json.loads(b)):
            return True
        time.sleep(0.1)
    return False


def test_disconnect_frees_the_slot(srv) -> None:
    for stream in (True, False):
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        body = {"prompt": "Count forever:", "n_predict": -1, "ignore_eos": True, "stream": stream}
        conn.request("POST", "/completion", body=json.dumps(body), headers={"Content-Type": "application/json"})
        if stream:
            r = conn.getresponse()
            assert r.status == 200
            r.fp.readline()
        else:
            time.sleep(1.0)
        st, _, b = raw(srv, "GET", "/slots")
        assert any(s["is_processing"] for s in json.loads(b))
        conn.sock.close()
        conn.close()
        assert _slots_idle(srv), "the slot of a closed connection is still busy"
    st, _, b = raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": 2})
    assert st == 200


def test_concurrent_requests_queue_and_finish(srv) -> None:
    # 6 requests on 2 slots: they are batched two at a time, the others wait; all are answered
    results: list = [None] * 6

    def go(i: int) -> None:
        body = {"prompt": f"Story {i}:", "n_predict": 6, "seed": i,
                **({"json_schema": COLOURS, "n_predict": 40} if i % 2 else {})}
        results[i] = raw(srv, "POST", "/completion", body)

    th = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in th:
        t.start()
    for t in th:
        t.join(120)
    for i, (st, _, b) in enumerate(results):
        assert st == 200, b
        d = json.loads(b)
        if i % 2:
            jsonschema.validate(json.loads(d["content"]), COLOURS)
    assert _slots_idle(srv)


def test_one_at_a_time_is_deterministic(srv) -> None:
    body = {"prompt": "The weather today", "n_predict": 8, "seed": 3, "cache_prompt": False}
    a = json.loads(raw(srv, "POST", "/completion", body)[2])["content"]
    b = json.loads(raw(srv, "POST", "/completion", body)[2])["content"]
    assert a == b


def test_cli_serve_refuses_bad_flags() -> None:
    import subprocess
    import sys

    for cmd in (["-m", "constrained.cli", "serve"], ["-m", "constrained.server"]):
        p = subprocess.run([sys.executable, *cmd, "--no-such-flag"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "--no-such-flag" in p.stderr
    p = subprocess.run([sys.executable, "-m", "constrained.cli", "serve", "-m", "/no/such.gguf"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "/no/such.gguf" in p.stderr


def test_progress_and_request_log_lines(srv) -> None:
    raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": 1})
    log = srv.log_path.read_text(errors="replace")
    assert "loading model" in log and "listening on" in log
    assert "request /completion 200" in log
