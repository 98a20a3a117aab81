"""The chat reply parsers under the request options that change them, against llama.cpp's ``common_chat_parse``.

For all 70 templates of the sdist's models/templates/, each request shape (one user message; a prefill with reasoning
only, continued inside the reasoning; a prefill with reasoning and content) with each option (llama-server's defaults, ``enable_thinking`` off through
``chat_template_kwargs``, ``reasoning_format: "none"``) builds the reply parser ``chat_params`` builds
(:func:`constrained.server.chat_api.parser_for`), and the C++ shim (``oracle/render_shim.cpp``:
``oaicompat_chat_params_parse``'s inputs, ``common_chat_templates_apply``, ``common_chat_parse`` on the generation
prompt + the text) reads the same replies: the finals and streamed prefixes of ``tests/chat/test_autoparser_parse.py``
plus a streamed MiniMax-M3 reasoning block. The message is identical (an empty partial message is no update; where
llama.cpp throws, ours answers a final reply as content with ``parse_error`` and a partial one with no update).

With a prefill the generation prompt carries the continuation, so the message starts with the prefilled content
(reasoning templates and content-only ones alike; ``tests/server/test_reasoning_prefill_server.py`` checks it against the
real binary). With tools and ``tool_choice: "none"`` the template's own parser reads the reply too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.reply_parsers import ContentParser
from constrained.server.chat_api import chat_params, parser_for
from oracle.render import chat_parse_body
from oracle.sdist import llama_cpp_source
from tests.chat.test_autoparser_parse import FINALS, STREAMED, reply_mismatches
from tests.chat.test_template_tools import TOOLS

TEMPLATES = sorted(p.name for p in (Path(llama_cpp_source()) / "models" / "templates").glob("*.jinja"))
_USER = {"role": "user", "content": "Hi"}
SHAPES = {"user": [_USER],
          "prefill-reasoning": [_USER, {"role": "assistant", "content": "", "reasoning_content": "Let me"}],
          "prefill-content": [_USER, {"role": "assistant", "content": "Wh", "reasoning_content": "Let me"}]}
OPTIONS = {"defaults": {}, "thinking-off": {"chat_template_kwargs": {"enable_thinking": False}},
           "reasoning-format-none": {"reasoning_format": "none"}}
_MM_STREAM = "<mm:think>\nI think.\n</mm:think>\n\nHello"
TEXTS = ([(x, False) for x in FINALS] + [(STREAMED[:i], True) for i in range(1, len(STREAMED))]
         + [(_MM_STREAM[:i], True) for i in range(1, len(_MM_STREAM))])


@pytest.mark.parametrize("name", TEMPLATES, ids=[n[:-6] for n in TEMPLATES])
def test_reply_parse_with_options_as_llama_cpp(name: str) -> None:
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    t = ChatTemplates(src)
    mismatches = []
    for shape, msgs in SHAPES.items():
        for option, extra in OPTIONS.items():
            body = {"messages": msgs, **extra}
            factory = parser_for(chat_params(dict(body), t, jinja=True)) or ContentParser
            found = reply_mismatches(factory, TEXTS, chat_parse_body(src, body, TEXTS))
            mismatches += [(shape, option, *m) for m in found]
    assert not mismatches, mismatches[:3]


@pytest.mark.parametrize("name", TEMPLATES, ids=[n[:-6] for n in TEMPLATES])
def test_reply_parse_with_tools_none_as_llama_cpp(name: str) -> None:
    # tools with tool_choice "none": no tool-call parser, the template's own reads the reply (reasoning split), with
    # llama-server's tool handling and with ours (a template without tool support gets our generic format's prompt)
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    t = ChatTemplates(src)
    body = {"messages": [_USER], "tools": TOOLS, "tool_choice": "none"}
    want = chat_parse_body(src, body, TEXTS)
    for compat in (True, False):
        factory = parser_for(chat_params(dict(body, llama_server_compat=compat), t, jinja=True)) or ContentParser
        assert not reply_mismatches(factory, TEXTS, want), compat
