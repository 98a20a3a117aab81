"""Assistant prefills on a content-only template (no reasoning markers: the default model's own Gemma 3 template),
against the real llama-server: the same requests to both servers started with the same flags (``--jinja``), bodies
identical apart from ids, timestamps and timings.

llama-server parses the reply after the generation prompt *with the continuation* (``common_chat_peg_parse`` on
``generation_prompt + text``), so the message's content starts with the prefilled text; the stream's first delta
carries it. Covered: a content prefill, streamed and not, a typed-parts prefill, and the same conversation without a
prefill.
"""

from __future__ import annotations

import json

import pytest

from oracle.cases.server import events, normalize, ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

ASK = [{"role": "user", "content": "What is the best book"}]
_CHAT = "/v1/chat/completions"


def _c(body: dict) -> dict:
    return {"messages": ASK, "max_tokens": 6, "seed": 3, "temperature": 0, **body}


_PREFILL = [*ASK, {"role": "assistant", "content": "Whill"}]
CASES: list[tuple[str, dict]] = [
    ("no-prefill", _c({})),
    ("prefill", _c({"messages": _PREFILL})),
    ("prefill-stream", _c({"messages": _PREFILL, "stream": True})),
    ("prefill-typed", _c({"messages": [*ASK, {"role": "assistant", "content": [{"type": "text", "text": "Wh"},
                                                                               {"type": "text", "text": "ill"}]}]})),
]


def _body(payload: bytes, headers: dict[str, str]) -> object:
    if headers.get("content-type", "").startswith("text/event-stream"):
        return events(payload)
    return json.loads(payload)


@pytest.fixture(scope="module")
def pairs(default_model_path: str) -> dict[str, tuple]:
    args = ["-m", default_model_path, "-c", "1024", "-t", "1", "-np", "1", "--jinja"]
    out: dict[str, list] = {}
    with LlamaServer(args) as real:
        out["real"] = [raw(real, "POST", _CHAT, b) for _, b in CASES]
    with ours(args) as us:
        out["ours"] = [raw(us, "POST", _CHAT, b) for _, b in CASES]
    return {cid: (out["real"][i], out["ours"][i]) for i, (cid, _) in enumerate(CASES)}


@pytest.mark.parametrize("case", [c for c, _ in CASES])
def test_prefill_as_llama_server(pairs: dict[str, tuple], case: str) -> None:
    (rs, rh, rb), (us, uh, ub) = pairs[case]
    assert us == rs, (ub[:300], rb[:300])
    assert normalize(_body(ub, uh)) == normalize(_body(rb, rh))


def test_prefill_is_in_the_content(pairs: dict[str, tuple]) -> None:
    # the cases above prove something: llama-server's message starts with the prefilled text
    (_, _, rb), _ = pairs["prefill"]
    assert json.loads(rb)["choices"][0]["message"]["content"].startswith("Whill")
