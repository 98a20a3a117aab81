"""A chat template that raises (``raise_exception``: roles that do not alternate, say) under ``--jinja``: for every
template of the sdist's models/templates/ and a few conversations that some of them refuse, with and without
tools, ``chat_params`` fails where llama.cpp's ``common_chat_templates_apply`` fails (through
``oracle/shims/render_shim.cpp``) and renders where it renders; an autoparser template's failure is llama-server's
HTTP 400 ``Unable to generate parser for this template. Automatic parser generation failed: ...`` (the detail after
the prefix is ours: llama.cpp's jinja adds the failing source position)."""

from __future__ import annotations

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.autoparser_prompt import specialized_handler
from constrained.server.chat_api import chat_params
from constrained.server.errors import HttpError
from oracle.render import chat_apply
from oracle.sdist import llama_cpp_source

PREFIX = "Unable to generate parser for this template. Automatic parser generation failed: "
TEMPLATES = sorted(p.name for p in (llama_cpp_source() / "models" / "templates").glob("*.jinja"))
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}, {"role": "user", "content": "b"}],
]


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_errors_as_llama_server(name: str) -> None:
    src = (llama_cpp_source() / "models" / "templates" / name).read_text(encoding="utf-8")
    t = ChatTemplates(src, bos_token="<bos>", eos_token="<eos>")
    for msgs in CONVERSATIONS:
        for tools in (None, TOOLS):
            body = {"messages": msgs, **({"tools": tools} if tools else {})}
            theirs = chat_apply(src, body, "<bos>", "<eos>")
            try:
                chat_params(dict(body), t, jinja=True)
                mine = None
            except HttpError as e:
                mine = e
            if "error" not in theirs:
                assert mine is None, (name, msgs, mine and mine.message)
            elif theirs["error"].startswith(PREFIX) and specialized_handler(src) is None:
                assert mine is not None and mine.status == 400 and mine.message.startswith(PREFIX), (name, msgs)
            else:
                assert mine is not None, (name, msgs, theirs["error"][:120])
