"""The reasoning budget, whole generations: ``constrained serve`` against the real llama-server over HTTP.

Thinking templates whose generation prompt opens the thinking block (so the budget counts from the first token:
the prefill tokens are fed to the budget sampler), one ``--reasoning-budget`` / ``--reasoning-budget-message``
setting per server pair, and requests that override it (``reasoning_budget_tokens``, ``thinking_budget_tokens``,
``reasoning_budget_message``), with tools for Qwen3-0.6B (our format for it is llama-server's; a lazy grammar: the budget
sampler exists even unlimited, and the grammar waits while it counts), ``enable_thinking: false`` (the prompt closes
the thinking block: the budget starts DONE), streamed and not, greedy and sampled: the bodies, or every SSE event, are
identical (``__verbose`` tokens included; ids dropped). With a budget of 0 the first generated tokens are the rest
of the forced message and end tag (tokenized by the real server): the prefill's tokens after the start tag are
accepted while forcing, as in common_sampler_init.
"""

from __future__ import annotations

import pytest

from oracle.cases.server import ours
from oracle.cases.server_tools import WEATHER, comparable, post, verbose_of
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

# template, extra flags, the first end tag, with tools (only where our tool format is llama-server's), whether the
# prefill starts the budget on the default model's vocabulary (DeepSeek R1's "<｜Assistant｜><think>\n" tokenizes
# "<think>" apart from the start tag's own tokens: the budget never starts, on both servers)
SETTINGS = [
    ("Qwen-QwQ-32B.jinja", ["--reasoning-budget", "3"], "</think>", False, True),
    ("Qwen3.5-4B.jinja", ["--reasoning-budget", "4", "--reasoning-budget-message", " Time is up."], "\n</think>", False,
     True),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", [], "</think>", False, False),
    ("Qwen-Qwen3-0.6B.jinja", ["--reasoning-budget", "2"], "</think>", True, False),
]


# each override once, greedy and not streamed or sampled and streamed (budget 0 greedy: the forced tokens are
# checked); 16 tokens hold a budget of 6, the longest message and the end tag
EXTRAS = [({}, False), ({"reasoning_budget_tokens": 0}, False), ({"reasoning_budget_tokens": 6}, True),
          ({"thinking_budget_tokens": 1, "reasoning_budget_message": "Stop."}, True),
          ({"reasoning_budget_tokens": -1}, False), ({"chat_template_kwargs": {"enable_thinking": False}}, True)]


def _bodies(tools: bool) -> list[dict]:
    q = [{"role": "user", "content": "What is the weather in Paris? Think first."}]
    out = []
    for extra, stream in EXTRAS:
        b = {"messages": q, "max_tokens": 16, "temperature": 0.8 if stream else 0.0, "seed": 5, "stream": stream,
             "verbose": True, "return_tokens": True, "cache_prompt": False, **extra}
        if tools:
            b["tools"] = [WEATHER]     # a lazy grammar: the budget sampler exists even unlimited
        out.append(b)
    return out


@pytest.mark.parametrize("template,flags,end,tools,counts", SETTINGS, ids=[s[0][:20] for s in SETTINGS])
def test_reasoning_budget_as_llama_server(template: str, flags: list[str], end: str, tools: bool, counts: bool,
                                          default_model_path: str) -> None:
    path = str(llama_cpp_source() / "models" / "templates" / template)
    args = ["-m", default_model_path, "-c", "2048", "--jinja", "--chat-template-file", path, *flags]
    bodies = _bodies(tools)
    with LlamaServer(args) as srv:
        theirs = [post(srv, b) for b in bodies]
        tok = {s: srv.post("/tokenize", {"content": s, "parse_special": True})["tokens"]
               for s in (end, "Stop.", " Time is up.")}
    with ours(args) as srv:
        mine = [post(srv, b) for b in bodies]
    n_forced = 0
    for b, a, m in zip(bodies, theirs, mine, strict=True):
        assert a["status"] == m["status"] == 200, (b, a, m)
        assert comparable(m) == comparable(a), (template, flags, b)
        if counts and not b["stream"] and b.get("reasoning_budget_tokens") == 0:
            msg = b.get("reasoning_budget_message", " Time is up." if "--reasoning-budget-message" in flags else "")
            forced = (tok[msg] if msg else []) + tok[end]
            # budget 0: forcing starts inside the prefill (the generation prompt's tokens after the start tag
            # already advance it), the generated tokens are the rest of the forced sequence
            toks = verbose_of(a)["tokens"]
            assert any(toks[:len(forced) - j] == forced[j:] for j in range(len(forced))), (template, b, toks)
            n_forced += 1
    assert n_forced == int(counts)
