"""``response_format`` on ``--jinja`` templates against llama.cpp's own code (``common_chat_templates_apply`` and
``common_chat_parse`` through ``oracle/shims/render_shim.cpp``): for every autoparser template of the sdist's
models/templates/ (the specialised handlers' are not reproduced), ``reasoning_format`` deepseek and none, the
grammar of ``constrained.server.chat_api.chat_params`` is llama-server's text (the generation prompt up to the
thinking tag, the reasoning block with its ``until`` rule, the schema's JSON bare or fenced, rules named under
``response-format-schema``), and the reply parser gives llama-server's content and reasoning for every prefix of
several replies (partial parses) and for the whole (the final one), or fails where it fails."""

from __future__ import annotations

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.autoparser_prompt import specialized_handler
from constrained.server.chat_api import chat_params, parser_for
from oracle.render import chat_apply, chat_parse_body
from oracle.sdist import llama_cpp_source

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "tags": {"type": "array", "items": {
    "enum": ["x", "y"]}}}, "required": ["a"]}
REPLIES = ['<think>\nhm\n</think>\n\n{"a": 1}', '{"a": 2} ', 'hm</think>```json\n{"a": 3}\n```', "<think>\nhm",
           '\n</think>{"a":', "junk", 'ok\n</think>\n\n{"a": 4, "tags": ["x", {"b": "x\\"y"}]}  ',
           ' ```json\n{"a": 5}\n``` ']
TEMPLATES = [p.name for p in sorted((llama_cpp_source() / "models" / "templates").glob("*.jinja"))
             if specialized_handler(p.read_text(encoding="utf-8")) is None]


def _pick(msg: dict) -> dict:
    return {k: v for k, v in msg.items() if k in ("content", "reasoning_content") and v}


@pytest.mark.parametrize("name", TEMPLATES)
def test_response_format_as_llama_server(name: str) -> None:
    src = (llama_cpp_source() / "models" / "templates" / name).read_text(encoding="utf-8")
    t = ChatTemplates(src, bos_token="<bos>", eos_token="<eos>")
    n = 0
    for rf in ("deepseek", "none"):
        body = {"messages": [{"role": "user", "content": "hi"}], "json_schema": SCHEMA, "reasoning_format": rf}
        theirs_setup = chat_apply(src, body, "<bos>", "<eos>")
        if "error" in theirs_setup:
            continue
        out = chat_params(dict(body), t, jinja=True)
        assert out["grammar"] == theirs_setup["grammar"], (name, rf)
        cases = [(r[:i], True) for r in REPLIES for i in range(len(r) + 1)] + [(r, False) for r in REPLIES]
        for (text, partial), th in zip(cases, chat_parse_body(src, body, cases), strict=True):
            msg, _ = parser_for(out)().update(text, partial)
            if th["ok"]:
                assert _pick(msg) == _pick(th["msg"]), (name, rf, text, partial)
            else:                     # llama-server: HTTP 500 (final) or an SSE error (partial); ours: no update
                assert msg.get("parse_error") if not partial else not _pick(msg), (name, rf, text, partial)
            n += 1
    assert n > 0
