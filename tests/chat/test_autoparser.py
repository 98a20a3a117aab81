"""llama-server's template autoparser against llama.cpp's own, for all 70 templates of the sdist's models/templates/.

The oracle is a C++ shim (``oracle/autoparser_shim.cpp``) over libllama-common: ``autoparser::analyze_template``
for the reasoning markers and ``common_chat_templates_support_enable_thinking`` (llama-server's default
``enable_thinking``), and ``common_chat_templates_apply`` for the prompts of conversations the recorded
``/apply-template`` cases (tests/server/test_server_templates.py) do not have: a prefill with reasoning only, with reasoning
and content, past reasoning in the history, and both together.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.autoparser import analyze_reasoning, diff_split, segmentize_markers
from constrained.chat.autoparser_prompt import supports_thinking
from constrained.server.chat_api import chat_params
from constrained.server.errors import HttpError
from oracle.autoparser import analyze, apply
from oracle.sdist import llama_cpp_source

TEMPLATES = sorted(p.name for p in (Path(llama_cpp_source()) / "models" / "templates").glob("*.jinja"))
_USER = {"role": "user", "content": "What is the best book"}
CONVERSATIONS = {
    "prefill-reasoning": [_USER, {"role": "assistant", "content": "", "reasoning_content": "Let me think"}],
    "prefill-both": [_USER, {"role": "assistant", "content": "Whill", "reasoning_content": "Let me think"}],
    "history": [{"role": "system", "content": "Book"}, _USER,
                {"role": "assistant", "content": "Dune", "reasoning_content": "Hmm"}, {"role": "user", "content": "And?"}],
    "history-prefill": [_USER, {"role": "assistant", "content": "Dune", "reasoning_content": "Hmm"},
                        {"role": "user", "content": "And?"},
                        {"role": "assistant", "content": "The", "reasoning_content": "So"}],
}


def _templates(name: str) -> ChatTemplates:
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    return ChatTemplates(src, bos_token="<bos>", eos_token="<eos>")


@pytest.mark.parametrize("name", TEMPLATES, ids=[n[:-6] for n in TEMPLATES])
def test_reasoning_markers_as_llama_cpp(name: str) -> None:
    t = _templates(name)
    want = analyze(t.source, "<bos>", "<eos>")
    r = analyze_reasoning(t)
    assert {"mode": r.mode.upper(), "start": r.start, "end": r.end, "supports_thinking": supports_thinking(t)} == want


@pytest.mark.parametrize("name", TEMPLATES, ids=[n[:-6] for n in TEMPLATES])
def test_prompts_with_reasoning_as_llama_cpp(name: str) -> None:
    t = _templates(name)
    for case, msgs in CONVERSATIONS.items():
        want = apply(t.source, msgs, "<bos>", "<eos>")
        try:
            got = {"prompt": chat_params({"messages": msgs}, t, jinja=True)["prompt"]}
        except HttpError as e:
            got = {"error": e.message}
        assert ("error" in got) == ("error" in want), (case, got, want)
        assert got.get("prompt") == want.get("prompt"), case


def test_diff_split_aligns_on_markers() -> None:
    # the examples of chat-auto-parser-helpers.h
    assert diff_split(b"<html><body><div></div></body></html>", b"<html><body><p>Something</p></body></html>") == (
        b"<html><body>", b"</body></html>", b"<div></div>", b"<p>Something</p>")
    assert diff_split(b"<html><body>Something</body></html>", b"<html><body></body></html>") == (
        b"<html><body>", b"</body></html>", b"Something", b"")
    assert segmentize_markers(b"<|tool_call|>[args]{ x }[/args]") == [
        (True, b"<|tool_call|>"), (True, b"[args]"), (False, b"{ x }"), (True, b"[/args]")]
