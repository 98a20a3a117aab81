"""``reasoning_content`` with ``--jinja``, against the real llama-server: the same requests, in the same order, to both
servers started with the same flags on the default model and a thinking template (DeepSeek-R1-Distill-Qwen, whose
generation prompt opens ``<think>``: llama-server's ``thinking_forced_open`` case); bodies identical apart from ids,
timestamps and timings.

Covered: the default ``reasoning_format`` (deepseek) and the request's ``reasoning_format`` (none, deepseek-legacy,
auto, bad names), ``chat_template_kwargs.enable_thinking``, replies that close the reasoning (a grammar makes the
model write ``</think>``) or leave it open, assistant prefills with reasoning (continued inside it) and with content,
past reasoning in the history, ``/apply-template``, streamed reasoning deltas and the final messages, and the
generation settings ``verbose`` shows (``reasoning_format``, ``generation_prompt``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracle.cases.server import events, normalize, ours, raw
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

TEMPLATE = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
ASK = [{"role": "user", "content": "Name a colour."}]
SPLIT = 'root ::= [a-z]{2,6} " " [a-z]{2,6} "</think>" [a-z ]{3,12}'     # reasoning, then content
_CHAT = "/v1/chat/completions"


def _c(body: dict) -> dict:
    return {"messages": ASK, "max_tokens": 10, "seed": 3, **body}


CASES: list[tuple[str, str, dict]] = [
    ("open", _CHAT, _c({})),
    ("open-stream", _CHAT, _c({"stream": True})),
    ("split", _CHAT, _c({"grammar": SPLIT, "max_tokens": 24})),
    ("split-stream", _CHAT, _c({"grammar": SPLIT, "max_tokens": 24, "stream": True})),
    ("format-none", _CHAT, _c({"grammar": SPLIT, "max_tokens": 24, "reasoning_format": "none"})),
    ("format-none-stream", _CHAT, _c({"grammar": SPLIT, "max_tokens": 24, "reasoning_format": "none",
                                      "stream": True})),
    ("format-legacy-stream", _CHAT, _c({"grammar": SPLIT, "max_tokens": 24, "reasoning_format": "deepseek-legacy",
                                        "stream": True})),
    ("format-auto", _CHAT, _c({"grammar": SPLIT, "max_tokens": 24, "reasoning_format": "auto"})),
    ("thinking-off", _CHAT, _c({"chat_template_kwargs": {"enable_thinking": False}, "grammar": SPLIT,
                                "max_tokens": 24})),
    ("thinking-off-stream", _CHAT, _c({"chat_template_kwargs": {"enable_thinking": False}, "stream": True})),
    ("prefill-reasoning", _CHAT, _c({"messages": [*ASK, {"role": "assistant", "content": "",
                                                           "reasoning_content": "The user wants"}]})),
    ("prefill-reasoning-stream", _CHAT, _c({"messages": [*ASK, {"role": "assistant", "content": "",
                                                                  "reasoning_content": "Colours"}],
                                            "stream": True, "grammar": SPLIT, "max_tokens": 24})),
    ("prefill-content", _CHAT, _c({"messages": [*ASK, {"role": "assistant", "content": "Blue",
                                                         "reasoning_content": "Easy."}]})),
    ("history", _CHAT, _c({"messages": [*ASK, {"role": "assistant", "content": "Blue.",
                                                "reasoning_content": "A colour."},
                                        {"role": "user", "content": "Another?"}]})),
    ("verbose", _CHAT, _c({"verbose": True, "grammar": SPLIT, "max_tokens": 24})),
    ("verbose-prefill-stream", _CHAT, _c({"verbose": True, "stream": True, "messages": [
        *ASK, {"role": "assistant", "content": "Red", "reasoning_content": "Easy."}]})),
    ("apply-template", "/apply-template", {"messages": ASK}),
    ("apply-template-off", "/apply-template", {"messages": ASK, "chat_template_kwargs": {"enable_thinking": False}}),
    ("apply-template-prefill", "/apply-template",
     {"messages": [*ASK, {"role": "assistant", "content": "", "reasoning_content": "Hm"}]}),
    ("bad-format-name", _CHAT, _c({"reasoning_format": "bogus"})),
    ("bad-format-type", _CHAT, _c({"reasoning_format": 5})),
]


def _body(payload: bytes, headers: dict[str, str]) -> object:
    if headers.get("content-type", "").startswith("text/event-stream"):
        return events(payload)
    return json.loads(payload)


@pytest.fixture(scope="module")
def pairs(default_model_path: str) -> dict[str, tuple]:
    tmpl = str(Path(llama_cpp_source()) / "models" / "templates" / TEMPLATE)
    args = ["-m", default_model_path, "-c", "1024", "-t", "1", "-np", "1", "--jinja", "--chat-template-file", tmpl]
    out: dict[str, list] = {}
    with LlamaServer(args) as real:
        out["real"] = [raw(real, "POST", p, b) for _, p, b in CASES]
    with ours(args) as us:
        out["ours"] = [raw(us, "POST", p, b) for _, p, b in CASES]
    return {cid: (out["real"][i], out["ours"][i]) for i, (cid, _, _) in enumerate(CASES)}


@pytest.mark.parametrize("case", [c for c, _, _ in CASES])
def test_reasoning_as_llama_server(pairs: dict[str, tuple], case: str) -> None:
    (rs, rh, rb), (us, uh, ub) = pairs[case]
    assert us == rs, (ub[:300], rb[:300])
    assert normalize(_body(ub, uh)) == normalize(_body(rb, rh))


def test_reasoning_is_split(pairs: dict[str, tuple]) -> None:
    # the cases above prove something: reasoning and content both present where the grammar closes the reasoning
    (_, _, rb), _ = pairs["split"]
    msg = json.loads(rb)["choices"][0]["message"]
    assert msg.get("reasoning_content") and msg.get("content")
