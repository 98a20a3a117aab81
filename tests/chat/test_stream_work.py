"""The streaming reply parsers are incremental: one stream's parse work is linear in its reply (issue 28, finding 4).

``ToolCallParser`` (every tool-call format that streams), ``AutoChatParser`` and ``ResponseFormatParser`` count
their work in ``steps`` (parser calls plus characters scanned). A full re-parse per update, as before, costs the
square of the reply (a 600-key argument took 13.7 s); here every big argument (a thousand keys or integers, a deep
nesting, 60,000-character strings, long whitespace, 150 calls) is streamed three characters per update and its work
bounded by a linear function of the reply's length, its update count and its nesting depth (a re-parse per update
would pass the bound from a few hundred characters on: its work grows as length x updates). The messages are those
of a parse from scratch of each prefix (sampled), and the deltas add up to the final message.
"""

from __future__ import annotations

import json
import sys

import pytest

from constrained.chat.peg import MessageStream, parse_message
from constrained.chat.reply_parsers import AutoChatParser, ReplySpec, ResponseFormatParser
from constrained.chat.tool_formats import FORMATS
from constrained.chat.tool_stream import ToolCallParser, _peg_for
from constrained.chat.tools import tool_call_setup

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("f", "get_weather")]
CHUNK = 3


def _bound(chars: int, updates: int, depth: int) -> int:
    """Linear work: per character scanned, per update, and per update and level of unfinished nesting."""
    return 40 * chars + 60 * updates + 8 * updates * depth


def _deep(d: int) -> object:
    v: object = 1
    for _ in range(d):
        v = {"a": v, "b": [1, "x", {"c": None}]}
    return v


SHAPES = {
    "keys": (lambda: json.dumps({f"k{i}": i for i in range(1000)}), 1),
    "ints": (lambda: json.dumps({"a": list(range(1000))}), 1),
    "deep": (lambda: json.dumps(_deep(60)), 60),
    "string": (lambda: json.dumps({"s": 'x\\"y\\u00e9' * 5000}), 1),
    "whitespace": (lambda: "{" + " \n" * 4000 + '"a": [' + " " * 5000 + "1]}", 1),
    "floats": (lambda: json.dumps({"a": [i / 7 for i in range(500)], "e": "1" * 2000}), 1),
}


def _call(fmt: str, args: str, name: str = "f") -> str:
    f = FORMATS[fmt]
    body = f'{{"{f.name_field}": "{name}", "{f.args_field}": {args}'
    if f.id_field:
        body += f', "{f.id_field}": "a1B2c3D4e"'
    return body + "}"


def _reply(fmt: str, calls: list[str]) -> str:
    f = FORMATS[fmt]
    head = (f.reasoning[0] + "Let me think.\n" + f.reasoning[1]) if f.reasoning else ""
    if f.section_start:
        return head + "Calling." + f.section_start + "[" + ", ".join(calls) + "]"
    if f.per_call_start:
        return head + "Calling." + "".join(f.per_call_start + c + "\n" + f.per_call_end + "\n" for c in calls)
    return head + calls[0]


def _stream(p, text: str) -> tuple[dict, list[dict], int]:  # noqa: ANN001
    deltas, updates = [], 0
    for i in range(0, len(text), CHUNK):
        _, d = p.update(text[i:i + CHUNK], True)
        deltas += d
        updates += 1
    msg, d = p.update("", False)
    return msg, deltas + d, updates + 1


def _joined_args(deltas: list[dict]) -> dict[int, str]:
    out: dict[int, str] = {}
    for d in deltas:
        for tc in d.get("tool_calls", []):
            out[tc["index"]] = out.get(tc["index"], "") + tc.get("function", {}).get("arguments", "")
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_big_argument_work_is_linear(fmt: str, shape: str) -> None:
    make, depth = SHAPES[shape]
    args = make()
    text = _reply(fmt, [_call(fmt, args)])
    setup = tool_call_setup(TOOLS, "auto", None, fmt=fmt)
    p = ToolCallParser(setup, FORMATS[fmt].generation_prompt)
    msg, deltas, updates = _stream(p, text)
    assert not msg.get("parse_error"), msg.get("parse_error")
    assert [json.loads(c["function"]["arguments"]) for c in msg["tool_calls"]] == [json.loads(args)]
    assert _joined_args(deltas) == {0: msg["tool_calls"][0]["function"]["arguments"]}
    assert 0 < p.steps <= _bound(len(text), updates, depth), (p.steps, len(text), updates)


@pytest.mark.parametrize("fmt", [f for f in sorted(FORMATS) if FORMATS[f].parallel_default])
def test_many_calls_work_is_linear(fmt: str) -> None:
    calls = [_call(fmt, json.dumps({"i": i, "s": "v" * (i % 7)}), ("f", "get_weather")[i % 2]) for i in range(150)]
    text = _reply(fmt, calls)
    p = ToolCallParser(tool_call_setup(TOOLS, "auto", True, fmt=fmt), FORMATS[fmt].generation_prompt)
    msg, deltas, updates = _stream(p, text)
    assert len(msg["tool_calls"]) == 150
    assert all(json.loads(c["function"]["arguments"])["i"] == i for i, c in enumerate(msg["tool_calls"]))
    assert len(_joined_args(deltas)) == 150
    assert p.steps <= _bound(len(text), updates, 2), (p.steps, len(text), updates)


def test_work_doubles_with_the_reply() -> None:
    """Twice the argument, twice the work (a re-parse per update: four times)."""
    steps = []
    for n in (1000, 2000):
        p = ToolCallParser(tool_call_setup(TOOLS, "auto", None, fmt="hermes"), "")
        _stream(p, _reply("hermes", [_call("hermes", json.dumps({f"k{i}": [i, "x"] for i in range(n)}))]))
        steps.append(p.steps)
    assert steps[1] < 2.3 * steps[0], steps


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_resumed_parse_equals_a_parse_from_scratch(fmt: str) -> None:
    """Every sampled prefix: the incremental message is the one a parse of the whole prefix gives."""
    args = json.dumps({"a": [1, 2.5e-3, {"b": 'q"\\u00e9\\n'}], "c": {"d": [[], {}], "e": None}, "f": True})
    text = _reply(fmt, [_call(fmt, args), _call(fmt, '{"x": "y"}', "get_weather")])
    f = FORMATS[fmt]
    setup = tool_call_setup(TOOLS, "auto", True, fmt=fmt)
    rs = (f.reasoning or ("",))[0]
    st = MessageStream(_peg_for(setup), f.generation_prompt, reasoning_start=rs)
    for i in range(1, len(text) + 1):
        got = st.update(text[i - 1], True)
        if i % 3 == 0 or i == len(text):
            want = parse_message(_peg_for(setup), f.generation_prompt, text[:i], is_partial=True, reasoning_start=rs)
            assert got == want, (i, text[:i])
    assert len(st.update("", False).tool_calls) == (2 if f.per_call_start or f.section_start else 1)


def test_reply_parsers_work_is_linear() -> None:
    spec = ReplySpec("<|im_start|>assistant\n", "tag_based", "<think>\n", "\n</think>\n\n")
    text = "<think>\n" + "hmm, " * 6000 + "\n</think>\n\n" + "the answer <is> " * 6000
    p = AutoChatParser(spec, "<|im_start|>assistant\n")
    msg, deltas, updates = _stream(p, text)
    assert msg["reasoning_content"] == "hmm, " * 6000 + "\n"
    assert "".join(d.get("content", "") for d in deltas) == msg["content"] == "the answer <is> " * 6000
    assert p.steps <= _bound(len(text), updates, 1), (p.steps, len(text), updates)
    body = json.dumps({f"k{i}": [i, {"s": "x" * (i % 5)}] for i in range(1000)})
    r = ResponseFormatParser(None, "<|im_start|>assistant\n")
    msg, deltas, updates = _stream(r, "```json\n" + body + "\n```")
    assert msg["content"] == body and "".join(d.get("content", "") for d in deltas) == body
    assert r.steps <= _bound(len(body), updates, 3), (r.steps, len(body), updates)


def test_deep_nesting_past_the_limit_stays_bounded() -> None:
    """Nesting past Python's recursion depth: a parse error at the end, and each update's failed parse costs the
    descent, not the reply (the previous checkpoints stay)."""
    text = _reply("hermes", [_call("hermes", '{"a": ' + "[" * 1500 + "1" + "]" * 1500 + "}")])
    p = ToolCallParser(tool_call_setup(TOOLS, "auto", None, fmt="hermes"), "")
    msg, _, updates = _stream(p, text)
    assert msg.get("parse_error")
    assert p.steps <= _bound(len(text), updates, sys.getrecursionlimit()), (p.steps, len(text), updates)
