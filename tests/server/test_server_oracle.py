"""``constrained serve`` against the real llama-server: the same requests, in the same order, to both servers started
with the same flags; the bodies must be identical apart from ids, timestamps and timings.

Both servers start fresh, so their slots hold the same prompts at every request (slot choice, prompt reuse, the
checkpoint split and the host-memory prompt cache all matter for the tokens). Both run at llama-server's defaults
for the prompt cache (``--cache-ram 8192``, ``--cache-idle-slots``, four slots sharing a unified KV cache): 23 of
the cases answer differently with ``--cache-ram 0``, so the cache is exercised.
"""

from __future__ import annotations

import json

import pytest

from oracle.cases.server import events, normalize, ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

LONG = "word " * 1100

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
CHAT = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a colour."}]

# (id, method, path, body); a body of bytes is sent as is
COMMON: list[tuple[str, str, str, object]] = [
    ("health", "GET", "/health", None),
    ("cmpl-greedy", "POST", "/completion", {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0}),
    ("cmpl-same-prompt-cached", "POST", "/completion",
     {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0}),
    ("cmpl-seed", "POST", "/completion", {"prompt": "Once upon a time", "n_predict": 12, "seed": 42}),
    ("cmpl-json-schema", "POST", "/completion",
     {"prompt": "Alice is 31 years old. As JSON: ", "json_schema": SCHEMA, "n_predict": 40, "seed": 3}),
    ("cmpl-json-schema-empty", "POST", "/completion",
     {"prompt": "JSON: ", "json_schema": {}, "n_predict": 12, "temperature": 0}),
    ("cmpl-grammar", "POST", "/completion",
     {"prompt": "Is the sky blue? Answer: ", "grammar": 'root ::= "yes" | "no"', "n_predict": 8, "seed": 1}),
    ("cmpl-n-probs", "POST", "/completion", {"prompt": "Hello", "n_predict": 4, "n_probs": 3, "seed": 5}),
    ("cmpl-post-sampling-probs", "POST", "/completion",
     {"prompt": "Hello", "n_predict": 4, "n_probs": 3, "post_sampling_probs": True, "seed": 5}),
    ("cmpl-stop", "POST", "/completion",
     {"prompt": "1, 2, 3, 4,", "n_predict": 16, "stop": [" 7"], "temperature": 0}),
    ("cmpl-stop-probs", "POST", "/completion",
     {"prompt": "1, 2, 3, 4,", "n_predict": 16, "stop": [" 7"], "temperature": 0, "n_probs": 1}),
    ("cmpl-return-tokens", "POST", "/completion",
     {"prompt": "Red, green,", "n_predict": 5, "return_tokens": True, "seed": 9}),
    ("cmpl-n2", "POST", "/completion", {"prompt": "My dog", "n_predict": 6, "n": 2, "seed": 11}),
    ("cmpl-token-prompt", "POST", "/completion", {"prompt": [2, 9259, 1902], "n_predict": 4, "temperature": 0}),
    ("cmpl-two-prompts", "POST", "/completion", {"prompt": ["Cats", "Dogs"], "n_predict": 3, "temperature": 0}),
    ("cmpl-response-fields", "POST", "/completion",
     {"prompt": "Hi", "n_predict": 2, "temperature": 0, "response_fields": ["content", "generation_settings/n_predict"]}),
    ("cmpl-ignore-eos", "POST", "/completion", {"prompt": "Bye", "n_predict": 3, "ignore_eos": True, "seed": 2}),
    ("cmpl-logit-bias", "POST", "/completion",
     {"prompt": "The sky is", "n_predict": 4, "logit_bias": [[" blue", -100], [1902, False]], "temperature": 0}),
    ("cmpl-samplers", "POST", "/completion",
     {"prompt": "Pick a number:", "n_predict": 5, "samplers": "kt", "top_k": 5, "seed": 8,
      "repeat_penalty": 1.3, "presence_penalty": 0.4}),
    ("cmpl-lazy-pattern", "POST", "/completion",
     {"prompt": "List: 1.", "n_predict": 10, "temperature": 0, "grammar": 'root ::= [0-9]+ "." [ a-z]*',
      "grammar_lazy": True, "grammar_triggers": [{"type": 2, "value": "[0-9]"}]}),
    ("cmpl-lazy-no-triggers", "POST", "/completion",
     {"prompt": "x", "n_predict": 2, "grammar": 'root ::= "a"', "grammar_lazy": True, "temperature": 0}),
    ("bad-lazy-word-not-preserved", "POST", "/completion",
     {"prompt": "The answer is", "n_predict": 4, "grammar": 'root ::= " yes"', "grammar_lazy": True,
      "grammar_triggers": [{"type": 1, "value": " yes"}]}),
    ("cmpl-no-cache", "POST", "/completion",
     {"prompt": "The capital of France is", "n_predict": 4, "cache_prompt": False, "temperature": 0}),
    ("cmpl-stream", "POST", "/completion", {"prompt": "Tell me", "n_predict": 6, "stream": True, "seed": 4}),
    ("cmpl-stream-probs", "POST", "/completion",
     {"prompt": "Tell me", "n_predict": 4, "stream": True, "n_probs": 2, "seed": 4}),
    ("cmpl-stream-stop", "POST", "/completion",
     {"prompt": "1, 2, 3, 4,", "n_predict": 16, "stop": [" 7"], "temperature": 0, "stream": True}),
    ("oai-cmpl", "POST", "/v1/completions", {"prompt": "The moon", "max_tokens": 5, "seed": 6}),
    ("oai-cmpl-logprobs", "POST", "/v1/completions", {"prompt": "The moon", "max_tokens": 3, "logprobs": 2,
                                                      "seed": 6}),
    ("oai-cmpl-stream", "POST", "/v1/completions", {"prompt": "The sun", "max_tokens": 4, "stream": True,
                                                    "seed": 6}),
    ("chat", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "temperature": 0}),
    ("chat-seed", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "seed": 42}),
    ("chat-json-object", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 16, "seed": 1, "response_format": {"type": "json_object"}}),
    ("chat-json-schema", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Alice is 31. JSON please."}], "max_tokens": 30, "seed": 1,
      "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}),
    ("chat-grammar", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 6, "grammar": 'root ::= "red" | "blue"', "seed": 1}),
    ("chat-stream-usage", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}, "seed": 3}),
    ("chat-logprobs", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 3, "logprobs": True, "top_logprobs": 2, "temperature": 0}),
    ("chat-stream-logprobs", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 3, "logprobs": True, "top_logprobs": 2, "temperature": 0, "stream": True}),
    ("chat-n2", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "n": 2, "seed": 7}),
    ("chat-stop", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 12, "stop": "e",
                                                   "temperature": 0}),
    ("chat-prefill", "POST", "/v1/chat/completions",
     {"messages": [*CHAT, {"role": "assistant", "content": "My favourite colour is"}], "max_tokens": 4,
      "temperature": 0}),
    ("tokenize", "POST", "/tokenize", {"content": "Hello world <bos>", "with_pieces": True}),
    ("tokenize-special", "POST", "/tokenize", {"content": "Hello", "add_special": True}),
    ("detokenize", "POST", "/detokenize", {"tokens": [2, 9259, 1902]}),
    ("apply-template", "POST", "/apply-template", {"messages": CHAT}),
    # bad input: llama-server's status and message, then the next request is answered
    ("bad-grammar", "POST", "/completion", {"prompt": "x", "grammar": "root ::= ("}),
    ("bad-type", "POST", "/completion", {"prompt": "x", "top_k": "a"}),
    ("bad-no-prompt", "POST", "/completion", {"n_predict": 1}),
    ("bad-n-predict", "POST", "/completion", {"prompt": "x", "n_predict": -2}),
    ("bad-n", "POST", "/completion", {"prompt": "x", "n": 9}),
    ("bad-schema", "POST", "/completion", {"prompt": "x", "json_schema": {"type": 123}}),
    ("bad-breakers", "POST", "/completion", {"prompt": "x", "dry_sequence_breakers": []}),
    ("bad-too-long", "POST", "/completion", {"prompt": LONG, "n_predict": 1}),
    ("bad-too-long-stream", "POST", "/completion", {"prompt": LONG, "n_predict": 1, "stream": True}),
    ("bad-path", "GET", "/nope", None),
    ("bad-chat-format", "POST", "/v1/chat/completions", {"messages": CHAT, "response_format": {"type": "sound"}}),
    ("bad-chat-no-messages", "POST", "/v1/chat/completions", {"max_tokens": 1}),
    ("bad-chat-messages-type", "POST", "/v1/chat/completions", {"messages": "hi"}),
    ("bad-chat-no-content", "POST", "/v1/chat/completions", {"messages": [{"role": "user"}]}),
    ("bad-chat-two-assistants", "POST", "/v1/chat/completions",
     {"messages": [CHAT[1], {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]}),
    ("bad-chat-schema-and-grammar", "POST", "/v1/chat/completions",
     {"messages": CHAT, "json_schema": {"type": "string"}, "grammar": "root ::= \"a\""}),
    ("bad-chat-top-logprobs", "POST", "/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}),
    ("bad-chat-schema", "POST", "/v1/chat/completions",
     {"messages": CHAT, "response_format": {"type": "json_object", "schema": {"type": "hiccup"}}}),
    ("after-errors", "POST", "/completion", {"prompt": "Still alive?", "n_predict": 3, "temperature": 0}),
    # return_progress (prompt-progress events in stream mode) and verbose (__verbose)
    ("cmpl-progress", "POST", "/completion",
     {"prompt": "Count: one two three", "n_predict": 3, "stream": True, "return_progress": True, "temperature": 0}),
    ("cmpl-progress-cached", "POST", "/completion",
     {"prompt": "Count: one two three four", "n_predict": 2, "stream": True, "return_progress": True,
      "temperature": 0}),
    ("cmpl-progress-no-stream", "POST", "/completion",
     {"prompt": "Count: one", "n_predict": 2, "return_progress": True, "temperature": 0}),
    ("chat-progress", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 3, "stream": True, "return_progress": True, "temperature": 0}),
    ("oai-cmpl-progress", "POST", "/v1/completions",
     {"prompt": "The sun", "max_tokens": 2, "stream": True, "return_progress": True, "temperature": 0}),
    ("cmpl-verbose", "POST", "/completion", {"prompt": "Hi", "n_predict": 2, "verbose": True, "temperature": 0}),
    ("oai-cmpl-verbose", "POST", "/v1/completions",
     {"prompt": "The moon", "max_tokens": 3, "verbose": True, "seed": 6}),
    ("oai-cmpl-verbose-stream", "POST", "/v1/completions",
     {"prompt": "The moon", "max_tokens": 3, "verbose": True, "stream": True, "seed": 6}),
    ("chat-verbose", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "verbose": True,
                                                      "temperature": 0}),
    ("chat-verbose-stream", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 3, "verbose": True, "stream": True, "temperature": 0}),
    ("chat-input-tokens", "POST", "/v1/chat/completions/input_tokens", {"messages": CHAT}),
    ("chat-input-tokens-short", "POST", "/chat/completions/input_tokens",
     {"messages": [{"role": "user", "content": "Hi"}]}),
    ("cors-proxy-disabled", "GET", "/cors-proxy", None),
    ("embeddings-not-supported", "POST", "/v1/embeddings", {"input": "hi"}),
    ("embedding-not-supported", "POST", "/embedding", {"content": "hi"}),
    ("rerank-not-supported", "POST", "/v1/rerank", {"query": "a", "documents": ["b"]}),
    ("slot-save-not-supported", "POST", "/slots/0?action=save", {"filename": "x.bin"}),
    ("infill-not-supported", "POST", "/infill", {"input_prefix": "def f(", "input_suffix": "):"}),
    ("lora-adapters", "GET", "/lora-adapters", None),
    ("lora-adapters-set", "POST", "/lora-adapters", [{"id": 0, "scale": 0.5}]),
    ("bad-lora-adapters-set", "POST", "/lora-adapters", {"id": 0}),
    ("tools-disabled", "POST", "/tools", {}),
    ("slots", "GET", "/slots", None),
]

NO_JINJA_ONLY: list[tuple[str, str, str, object]] = [
    ("bad-chat-tools-no-jinja", "POST", "/v1/chat/completions",
     {"messages": CHAT, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
]

JINJA: list[tuple[str, str, str, object]] = [
    ("chat", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "temperature": 0}),
    ("chat-stream", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "stream": True, "seed": 2}),
    ("apply-template", "POST", "/apply-template", {"messages": CHAT}),
    ("apply-template-prefill", "POST", "/apply-template",
     {"messages": [*CHAT, {"role": "assistant", "content": "Blue"}]}),
    ("cmpl", "POST", "/completion", {"prompt": "Hello", "n_predict": 4, "seed": 1}),
    ("chat-json-object", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Give me a JSON object with a name."}], "max_tokens": 40, "seed": 1,
      "response_format": {"type": "json_object"}}),
    ("chat-json-schema-stop", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Give me a JSON object with a name."}], "max_tokens": 40, "seed": 0,
      "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}),
    ("chat-json-schema-stream", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Give me a JSON object with a name."}], "max_tokens": 40, "seed": 3,
      "stream": True, "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}),
    ("chat-const-partial", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Alice is 31. JSON please."}], "max_tokens": 10, "seed": 1,
      "json_schema": {"const": "42"}}),
    ("chat-grammar-jinja", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 6, "seed": 1, "grammar": 'root ::= "a"{5,5}'}),
    ("chat-input-tokens", "POST", "/v1/chat/completions/input_tokens", {"messages": CHAT}),
    ("chat-progress", "POST", "/v1/chat/completions",
     {"messages": CHAT, "max_tokens": 3, "stream": True, "return_progress": True, "temperature": 0}),
    ("chat-verbose", "POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "verbose": True,
                                                      "temperature": 0}),
    ("chat-multi-turn", "POST", "/v1/chat/completions",
     {"messages": [*CHAT, {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another?"}],
      "max_tokens": 6, "temperature": 0}),
]

# the comparison is status + error type only: nlohmann's parse-error texts are not reproduced (CHANGELOG)
STATUS_ONLY: list[tuple[str, str, str, object]] = [
    ("bad-json", "POST", "/completion", b"{bad"),
]

FLAGS = ["-c", "1024", "-t", "1", "--slots"]


def _body(payload: bytes, headers: dict[str, str]) -> object:
    if headers.get("content-type", "").startswith("text/event-stream"):
        return events(payload)
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode("utf-8", "replace")


def _run_pair(model: str, extra: list[str], cases: list[tuple[str, str, str, object]]) -> dict[str, tuple]:
    args = ["-m", model, *FLAGS, *extra]
    out: dict[str, list] = {}
    with LlamaServer(args) as real:
        out["real"] = [raw(real, m, p, b) for _, m, p, b in cases]
    with ours(args) as us:
        out["ours"] = [raw(us, m, p, b) for _, m, p, b in cases]
    return {cid: (out["real"][i], out["ours"][i]) for i, (cid, _, _, _) in enumerate(cases)}


@pytest.fixture(scope="module")
def no_jinja(default_model_path: str) -> dict[str, tuple]:
    return _run_pair(default_model_path, ["--no-jinja"], COMMON + NO_JINJA_ONLY + STATUS_ONLY)


@pytest.fixture(scope="module")
def jinja(default_model_path: str) -> dict[str, tuple]:
    return _run_pair(default_model_path, ["--jinja"], JINJA)


def _compare(pair: tuple) -> None:
    (s1, h1, b1), (s2, h2, b2) = pair
    real, us = normalize(_body(b1, h1)), normalize(_body(b2, h2))
    assert (s2, us) == (s1, real)


@pytest.mark.parametrize("case", [c[0] for c in COMMON + NO_JINJA_ONLY])
def test_same_as_llama_server_no_jinja(no_jinja: dict[str, tuple], case: str) -> None:
    _compare(no_jinja[case])


@pytest.mark.parametrize("case", [c[0] for c in JINJA])
def test_same_as_llama_server_jinja(jinja: dict[str, tuple], case: str) -> None:
    _compare(jinja[case])


@pytest.mark.parametrize("case", [c[0] for c in STATUS_ONLY])
def test_same_status_as_llama_server(no_jinja: dict[str, tuple], case: str) -> None:
    (s1, h1, b1), (s2, h2, b2) = no_jinja[case]
    assert s2 == s1
    assert json.loads(b2)["error"]["type"] == json.loads(b1)["error"]["type"]


def test_headers_as_llama_server(no_jinja: dict[str, tuple]) -> None:
    (s1, h1, _), (s2, h2, _) = no_jinja["cmpl-greedy"]
    for k in ("server", "content-type"):
        assert h2.get(k) == h1.get(k)
    (s1, h1, _), (s2, h2, _) = no_jinja["cmpl-stream"]
    assert h2.get("content-type", "").split(";")[0] == h1.get("content-type", "").split(";")[0]


def _overflow_rounds(srv: LlamaServer) -> list:
    import threading

    out = []
    for vals in ([80, 40, 80, 80], [70, 70, 70, 70]):      # llama-server's test_completion_unified
        res: list = [None] * len(vals)

        def go(i: int, n: int, res: list = res) -> None:
            s, _, p = raw(srv, "POST", "/completion", {"prompt": "A", "n_predict": n, "temperature": 0})
            d = json.loads(p)
            res[i] = (s, d["error"]["message"] if s != 200 else d["timings"]["predicted_n"])
        th = [threading.Thread(target=go, args=(i, n)) for i, n in enumerate(vals)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        out.append(res)
    s, _, p = raw(srv, "POST", "/completion", {"prompt": "A", "n_predict": 4, "temperature": 0})
    out.append((s, json.loads(p)["content"]))
    return out


def test_unified_kv_overflow_as_llama_server(default_model_path: str) -> None:
    # 4 slots in a unified 256-cell KV cache: an idle slot's prompt is purged to make room (all four 200), and
    # when nothing can be purged every processing slot gets "Context size has been exceeded." (500); the next
    # request is answered as on a fresh slot
    args = ["-m", default_model_path, "-c", "256", "-np", "4", "--kv-unified", "-t", "1"]
    with LlamaServer(args) as real:
        want = _overflow_rounds(real)
    with ours(args) as us:
        got = _overflow_rounds(us)
    assert want[1] == [(500, "Context size has been exceeded.")] * 4     # the case is not vacuous
    assert got == want
