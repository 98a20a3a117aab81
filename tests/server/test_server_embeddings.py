"""Embeddings and reranking (``--embedding``, ``--pooling``, ``--reranking``) against the real llama-server: the
same requests, in the same order, to both servers started with the same flags (the default model: a causal LM, as
llama-server's own suite runs it here); statuses, error bodies and results identical, the vectors and scores
float for float (both servers run llama.cpp's decode on one thread; the normalisation is ``common_embd_normalize``'s
arithmetic).

Four set-ups: ``last`` pooling (its prompts may span batches: the OAI and plain routes, every input shape, the
normalisations, base64, the errors, a completion between embeddings), ``mean`` (a prompt in one ubatch: the
too-large and parallel cases), ``none`` (a vector per token; the OAI route refuses it), ``--reranking`` (Jina's
and TEI's formats, ``top_n``, ``return_text``, the errors).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

E, EP, EO = "/v1/embeddings", "/embeddings", "/embedding"
R, RV = "/rerank", "/v1/rerank"
TXT = "I believe the meaning of life is"
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

LAST: list[tuple[str, str, Any]] = [
    ("single", E, {"input": TXT}),
    ("multiple", E, {"input": [TXT, "This is a test", "Write a joke about AI"]}),
    ("same-twice", E, {"input": [TXT, TXT]}),
    ("tokens", E, {"input": [12, 34, 56]}),
    ("mixed", E, {"input": [12, 34, "string", 56, 78]}),
    ("token-lists", E, {"input": [[12, 34, 56], [12, "string", 34, 56]]}),
    ("objects", E, {"input": ["string1", {"prompt_string": "string2"},
                              {"content": [{"type": "text", "text": "string3"}]}]}),
    ("content-parts", E, {"input": ["hello world", {"content": [{"type": "text", "text": "hello "},
                                                                  {"type": "text", "text": "world"}]}]}),
    ("empty-string", E, {"input": ""}),
    ("model-echo", E, {"input": "x", "model": "my-model"}),
    *[(f"norm{k}", E, {"input": TXT, "embd_normalize": k}) for k in (-1, 0, 1, 3)],
    ("base64", E, {"input": [TXT, "Test"], "encoding_format": "base64"}),
    ("float", E, {"input": "Test", "encoding_format": "float"}),
    ("plain", EP, {"input": TXT}),
    ("plain-legacy", EO, {"content": TXT}),
    ("content-key", E, {"content": [TXT, "x"]}),
    ("long", E, {"input": "This is a test " * 40}),
    ("after-completion", E, {"input": TXT}),
    # errors
    ("bad-empty-list", E, {"input": []}),
    ("bad-no-input", E, {"text": "x"}),
    ("bad-not-object", E, ["x"]),
    ("bad-content-string", E, {"input": {"content": "string"}}),
    ("bad-content-type", E, {"input": {"content": [{"type": "unknown"}]}}),
    ("bad-image", E, {"input": {"content": [{"type": "image_url", "image_url": {"url": PNG}}]}}),
    ("bad-audio", E, {"input": {"content": [{"type": "input_audio", "input_audio": {"data": "AAAA"}}]}}),
    ("bad-video", E, {"input": {"content": [{"type": "input_video", "input_video": {"url": PNG}}]}}),
    ("bad-element", E, {"input": [TXT, 5.5]}),
    ("bad-null", E, {"input": None}),
    ("bad-format", E, {"input": "x", "encoding_format": "int8"}),
    ("bad-format-type", E, {"input": "x", "encoding_format": 1}),
    ("bad-normalize-type", E, {"input": "x", "embd_normalize": "2"}),
    ("bad-too-long", E, {"input": "This is a test " * 200}),
    ("bad-invalid-token", E, {"input": [1, 99999999]}),
    ("rerank-off", R, {"query": "a", "documents": ["b"]}),
    ("after-errors", E, {"input": "ok"}),
]
MEAN: list[tuple[str, str, Any]] = [
    ("single", E, {"input": TXT}),
    ("multiple", E, {"input": [TXT, "a " * 30, "b " * 31, "c"]}),
    ("plain", EP, {"input": ["x", "y"]}),
    ("bad-too-large", E, {"input": "This is a test " * 30}),
    ("after", E, {"input": "ok"}),
]
NONE: list[tuple[str, str, Any]] = [
    ("per-token", EP, {"input": "hello hello hello"}),
    ("per-token-two", EP, {"input": ["a b", "c"], "embd_normalize": 2}),
    ("legacy", EO, {"content": "hello"}),
    ("bad-oai", E, {"input": "hello"}),
]
DOCS = ["A machine is a physical system that uses power to apply forces.",
        "Learning is the process of acquiring new understanding.",
        "Machine learning is a field of study in artificial intelligence.",
        "Paris, capitale de la France, est une grande ville."]
RANK: list[tuple[str, str, Any]] = [
    ("jina", R, {"query": "Machine learning is", "documents": DOCS}),
    ("jina-v1", RV, {"query": "Which city?", "documents": DOCS, "model": "m"}),
    ("reranking-alias", "/reranking", {"query": "x", "documents": DOCS[:2]}),
    ("tei", R, {"query": "Machine learning is", "texts": DOCS}),
    ("tei-text", R, {"query": "Machine learning is", "texts": DOCS[:3], "return_text": True}),
    *[(f"top-n-{n}", R, {"query": "q", "documents": DOCS, "top_n": n}) for n in (None, 2, 4, 99, 1.7)],
    ("tei-top-n", R, {"query": "q", "texts": DOCS, "top_n": 2}),
    ("both-keys", R, {"query": "q", "documents": DOCS[:1], "texts": DOCS[1:3]}),
    ("bad-docs-ints", R, {"query": "q", "documents": [1, 2]}),
    ("docs-ints-texts", R, {"query": "q", "documents": [1, 2], "texts": DOCS[:2]}),
    ("bad-no-docs", R, {"query": "q"}),
    ("bad-empty-docs", R, {"query": "q", "documents": []}),
    ("bad-docs-string", R, {"query": "q", "documents": "abc"}),
    ("bad-no-query", R, {"documents": DOCS}),
    ("bad-query-type", R, {"query": 5, "documents": DOCS}),
    ("after-errors", R, {"query": "a", "documents": ["b", "c"]}),
]

SETUPS = {
    "last": (["--embedding", "--pooling", "last", "-c", "512", "-np", "2", "-b", "128", "-ub", "128"], LAST),
    "mean": (["--embeddings", "--pooling", "mean", "-c", "512", "-np", "2", "-b", "64", "-ub", "64"], MEAN),
    "none": (["--embedding", "--pooling", "none", "-c", "256", "-np", "1"], NONE),
    "rank": (["--reranking", "-c", "512", "-np", "1"], RANK),
}


def _answer(r: tuple[int, dict[str, str], bytes]) -> tuple[int, Any]:
    s, h, body = r
    return s, json.loads(body) if h.get("content-type", "").startswith("application/json") else body


_CACHE: dict[str, dict[str, tuple[Any, Any]]] = {}


def _pairs(model: str, setup: str) -> dict[str, tuple[Any, Any]]:
    if setup not in _CACHE:
        flags, cases = SETUPS[setup]
        args = ["-m", model, "-t", "1", *flags]
        with LlamaServer(args) as real:
            want = [_answer(raw(real, "POST", p, b)) for _, p, b in cases]
        with ours(args) as us:
            got = [_answer(raw(us, "POST", p, b)) for _, p, b in cases]
        _CACHE[setup] = {c: (w, g) for (c, _, _), w, g in zip(cases, want, got, strict=True)}
    return _CACHE[setup]


def _ids() -> list[tuple[str, str]]:
    return [(s, c) for s, (_, cases) in SETUPS.items() for c, _, _ in cases]


@pytest.mark.parametrize("setup,case", _ids(), ids=[f"{s}:{c}" for s, c in _ids()])
def test_same_as_llama_server(default_model_path: str, setup: str, case: str) -> None:
    want, got = _pairs(default_model_path, setup)[case]
    if case.startswith("bad-") or case.endswith("-off") or case == "bad-oai":
        assert want[0] >= 400, want          # the error cases are errors on the real one
    else:
        assert want[0] == 200, want
    assert got == want


def test_the_cases_reach_what_they_name(default_model_path: str) -> None:
    # the vectors are real: normalised (or not) as asked, one per token without pooling, scores that differ
    last = _pairs(default_model_path, "last")
    vec = last["single"][0][1]["data"][0]["embedding"]
    assert len(vec) > 100 and abs(sum(x * x for x in vec) - 1) < 1e-3
    raw_vec = last["norm-1"][0][1]["data"][0]["embedding"]
    assert abs(sum(x * x for x in raw_vec) - 1) > 1e-2
    assert last["long"][0][1]["usage"]["prompt_tokens"] > 128        # spans two batches of 128
    none = _pairs(default_model_path, "none")["per-token"][0][1]
    assert len(none[0]["embedding"]) == 4                            # <bos> and the three words
    rank = _pairs(default_model_path, "rank")["jina"][0][1]["results"]
    assert len({r["relevance_score"] for r in rank}) > 1
