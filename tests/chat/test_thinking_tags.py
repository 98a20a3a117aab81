"""``constrained.chat.thinking.thinking_tags`` against llama.cpp's ``common_chat_templates_apply`` (through
``oracle/shims/render_shim.cpp``): for every template of the sdist's models/templates/, with and without tools,
the thinking start tag and end tags the reasoning-budget sampler is built from are llama-server's."""

from __future__ import annotations

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.thinking import thinking_tags
from oracle.render import chat_apply
from oracle.sdist import llama_cpp_source

TEMPLATES = sorted(p.name for p in (llama_cpp_source() / "models" / "templates").glob("*.jinja"))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "w", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.parametrize("name", TEMPLATES)
def test_thinking_tags_as_llama_server(name: str) -> None:
    src = (llama_cpp_source() / "models" / "templates" / name).read_text(encoding="utf-8")
    t = ChatTemplates(src, bos_token="<bos>", eos_token="<eos>")
    for body in ({"messages": [{"role": "user", "content": "hi"}]},
                 {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}):
        theirs = chat_apply(src, body, "<bos>", "<eos>")
        if "error" in theirs:
            continue
        want = (theirs["thinking_start_tag"], theirs["thinking_end_tags"])
        got = thinking_tags(t.for_tools() if body.get("tools") else t)
        assert got == want, (name, body.keys())


def test_some_templates_have_tags() -> None:
    n = 0
    for name in TEMPLATES:
        src = (llama_cpp_source() / "models" / "templates" / name).read_text(encoding="utf-8")
        n += bool(thinking_tags(ChatTemplates(src, bos_token="<bos>", eos_token="<eos>"))[1])
    assert n >= 15
