"""Context shift (``--context-shift``, ``n_keep``, ``n_discard``) against the real llama-server: the same requests,
in the same order, to both servers started with the same flags; bodies and SSE events identical apart from
timestamps (the tokens generated, ``truncated``, ``tokens_cached``, the timings' token counts and the cache reuse of
the request after a shift included).

A slot of 256 tokens (`-c 256 -np 2`: one unified cache of 256 cells, the smallest llama.cpp makes; each slot
sees all of it) with a prompt of 230 fills after ~25 generated tokens, so every request below shifts at least once
(the ones with a small ``n_discard`` several times). The default model has a sliding window: llama-server turns context
shift off unless both caches are the same size (``llama_memory_can_shift``; at ``-c 256`` they are, at ``-c 2048``
the window's is 1024 cells), and then the slot stops full (``truncated``) as with the shift disabled.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from oracle.cases.server import events, normalize, ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

PROMPT = ("The keeper's log. " + " ".join(f"Night {i}: the lamp burned and the sea was calm." for i in range(16))
          + " Now write the next entries of the log:")
LONG = PROMPT + " " + " ".join(f"Rule {i}: the lamp must never go out." for i in range(6))


def _cmpl(n_predict: int, **kw: Any) -> tuple[str, str, Any]:
    return "POST", "/completion", {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0, "return_tokens": True,
                                   **kw}


SEQUENCE: list[tuple[str, str, Any]] = [
    _cmpl(50),                                              # n_keep 0, n_discard half: shifts more than once
    _cmpl(40, n_keep=-1, n_discard=6),                      # the prompt kept, 6 dropped at a time: many shifts
    _cmpl(40, n_keep=5, n_discard=1000),                    # n_discard clamped to what is left but one
    _cmpl(4),                                               # after a shift: the cache reuse of the next request
    ("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "stream": True}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 40,
                                      "temperature": 0.8, "seed": 5}),
    _cmpl(40, n=2),                                         # a shared prompt cannot shift (n > 1)
    ("POST", "/completion", {"prompt": LONG, "n_predict": 4}),   # a prompt past the slot: refused all the same
    _cmpl(40, n_keep=-1, n_discard=3, stream=True, seed=3, temperature=0.8),
]
OFF = [0, 4, 7]          # with the shift off: the slot stops full


def _summary(status: int, headers: dict[str, str], payload: bytes) -> Any:
    if headers.get("content-type", "").startswith("text/event-stream"):
        evs = events(payload)
        counts = [(e["timings"]["prompt_n"], e["timings"]["predicted_n"], e["timings"]["cache_n"])
                  for e in evs if isinstance(e, dict) and "timings" in e]
        return status, normalize([e for e in evs if e != ":"]), counts
    d = json.loads(payload)
    t = d.get("timings") if isinstance(d, dict) else None
    counts = (t["prompt_n"], t["predicted_n"], t["cache_n"]) if t else None
    if isinstance(d, dict):
        for k in ("id", "system_fingerprint", "model"):
            d.pop(k, None)
    return status, normalize(d), counts


def _run(srv: LlamaServer, which: list[int]) -> list[Any]:
    return [_summary(*raw(srv, *SEQUENCE[i])) for i in which]


def _args(model: str, extra: list[str]) -> list[str]:
    return ["-m", model, "-c", "256", "-np", "2", "-t", "1", "--context-shift", *extra]


def _compare(model: str, extra: list[str], which: list[int]) -> list[Any]:
    with LlamaServer(_args(model, extra)) as real:
        want = _run(real, which)
    with ours(_args(model, extra)) as us:
        got = _run(us, which)
    for i, w, g in zip(which, want, got, strict=True):
        assert g == w, (i, SEQUENCE[i])
    return want


def test_context_shift_as_llama_server(default_model_path: str) -> None:
    want = _compare(default_model_path, ["--swa-full"], list(range(len(SEQUENCE))))
    # not vacuous: the slot (256 tokens) overflowed and shifted, and the generation went on past it
    s, body, (n_prompt, n_gen, _) = want[0]
    assert s == 200 and body["truncated"] is True and n_prompt + n_gen > 256 and n_gen == 50, want[0]
    assert want[1][1]["truncated"] is True and want[1][2][1] == 40, want[1]
    assert want[6][0] == 500 and "shared prompt" in want[6][1]["error"]["message"], want[6]
    assert want[7][0] == 400 and want[7][1]["error"]["type"] == "exceed_context_size_error", want[7]


def test_context_shift_disabled_as_llama_server(default_model_path: str) -> None:
    # without --context-shift the slot stops when full (its last token never decoded): the answer truncated
    want = _compare(default_model_path, ["--no-context-shift"], OFF)
    s, body, (n_prompt, n_gen, _) = want[0]
    assert s == 200 and body["truncated"] is True and n_prompt + n_gen == 256, want[0]


def test_context_shift_off_on_a_sliding_window_cache(default_model_path: str) -> None:
    # a sliding-window cache smaller than the context cannot shift (llama_memory_can_shift: at -c 2048 the window
    # cache holds 1024 cells), so llama-server turns --context-shift off: the slot stops full
    prompt = " ".join(f"Night {i}: calm." for i in range(268))
    req = ("POST", "/completion", {"prompt": prompt, "n_predict": 30, "temperature": 0})
    args = ["-m", default_model_path, "-c", "2048", "-np", "1", "-t", "1", "--context-shift"]
    with LlamaServer(args) as real:
        want = _summary(*raw(real, *req))
    with ours(args) as us:
        got = _summary(*raw(us, *req))
    s, body, (n_prompt, n_gen, _) = want
    assert s == 200 and body["truncated"] is True and n_prompt + n_gen == 2048, want
    assert got == want
