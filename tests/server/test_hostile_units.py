"""The pieces behind issue 28's fixes, without a server: the JSON body reader, ``id_slot`` wrap-around, the limit
flags, tool-call parsers on hostile model text, ``enforce="all"`` enums and patterns, the template sandbox's
bounds, the DRY breaker cache. (Over HTTP, beside the real llama-server: ``test_server_attack.py``.)"""

from __future__ import annotations

import json
import time

import pytest

from constrained.errors import SchemaError
from constrained.server.bodies import MAX_JSON_DEPTH, json_depth_exceeds, parse_json_body
from constrained.server.errors import HttpError
from constrained.server.main import split_limit_flags
from constrained.server.scheduler import slot_by_id
from constrained.server.task import _int32


@pytest.mark.parametrize(("raw", "col", "last"), [
    (b'{"prompt":"hi","n_predict":1,"temperature":NaN}', 44, '"temperature":N'),
    (b'{"a":[Infinity]}', 7, '"a":[I'),
    (b"[1,NaN]", 4, "1,N"),
    (b'[12.5e3, NaN]', 10, "12.5e3, N"),
    (b'{"NaN":"Infinity","x":NaN}', 23, '"x":N'),
])
def test_non_finite_literals_are_nlohmann_parse_errors(raw: bytes, col: int, last: str) -> None:
    with pytest.raises(HttpError) as e:
        parse_json_body(raw)
    assert e.value.status == 500 and e.value.type == "server_error"
    assert e.value.message == (f"[json.exception.parse_error.101] parse error at line 1, column {col}: syntax error "
                               f"while parsing value - invalid literal; last read: '{last}'")


def test_minus_infinity_is_an_invalid_number() -> None:
    with pytest.raises(HttpError) as e:
        parse_json_body(b'{"t":-Infinity}')
    assert "invalid number; expected digit after '-'; last read: '-I'" in e.value.message
    assert "column 7" in e.value.message


def test_strings_holding_nan_parse() -> None:
    assert parse_json_body(b'{"a":"NaN","b":"-Infinity"}') == {"a": "NaN", "b": "-Infinity"}


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 2000, 200_000])
def test_deep_json_is_a_400(depth: int) -> None:
    with pytest.raises(HttpError) as e:
        parse_json_body(b"[" * depth + b"]" * depth)
    assert e.value.status == 400 and "nested too deeply" in e.value.message


def test_depth_counts_outside_strings_only() -> None:
    n = MAX_JSON_DEPTH
    ok = b"[" * n + b'"' + b"[{" * 5000 + b'\\"]"' + b"]" * n
    assert not json_depth_exceeds(ok)
    assert parse_json_body(ok) is not None
    assert json_depth_exceeds(b"[" * (n + 1) + b"]" * (n + 1))
    # many brackets, shallow
    assert not json_depth_exceeds(b"[" + b"[],{}," * 100_000 + b"1]")


@pytest.mark.parametrize(("id_slot", "n", "want"), [
    (99, 4, 3), (-5, 4, 3), (-5, 3, 2), (0, 4, 0), (3, 4, 3), (4, 4, 0), (-1 - 2 ** 31, 4, 3), (7, 2, 1)])
def test_slot_by_id_wraps_as_size_t(id_slot: int, n: int, want: int) -> None:
    assert slot_by_id(id_slot, n) == want
    assert slot_by_id(id_slot, n) == (id_slot + 2 ** 64) % 2 ** 64 % n


@pytest.mark.parametrize(("v", "want"), [
    (2 ** 40, 0), (2 ** 40 + 5, 5), (2 ** 64 - 1, -1), (-2 ** 63, 0), (2 ** 31, -2 ** 31), (1.7, 1), (-1.7, -1),
    (True, 1), (False, 0), ("3", -1), (None, -1), ([1], -1), (float("nan"), -1)])
def test_id_slot_read_as_json_value_int(v: object, want: int) -> None:
    assert _int32(v, -1) == want


def test_limit_flags() -> None:
    assert split_limit_flags(["--max-messages=10", "-c", "8", "--max-dry-breakers", "0"]) == (
        ["-c", "8"], {"max_messages": 10, "max_dry_breakers": 0})
    from constrained.errors import FlagError

    for bad in (["--max-body-size"], ["--max-body-size", "x"], ["--max-messages", "-1"]):
        with pytest.raises(FlagError):
            split_limit_flags(bad)


# ------------------------------------------------------------------ tool-call parsers (finding 10)
def _setup():  # noqa: ANN202
    from constrained.chat.tools import tool_call_setup_for_template

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    return tool_call_setup_for_template(None, tools, "auto", None)


@pytest.mark.parametrize("depth", [300, 3000, 50_000])
@pytest.mark.parametrize("shape", ["object", "array"])
def test_deep_tool_arguments_are_a_parse_error(depth: int, shape: str) -> None:
    from constrained.chat.tool_stream import ToolCallParser
    from constrained.chat.tools import parse_reply

    deep = ('{"a":' * depth + "1" + "}" * depth) if shape == "object" else ('{"a":' + "[" * depth + "]" * depth + "}")
    text = '<tool_call>\n{"name": "f", "arguments": ' + deep + "}\n</tool_call>"
    r = parse_reply(text, _setup())
    assert r.parse_error or r.tool_calls        # answered, never a RecursionError
    p = ToolCallParser(_setup(), "")
    step = max(1, len(text) // 40)
    for i in range(0, len(text), step):
        p.update(text[i:i + step], True)
    msg, _ = p.update("", False)
    json.dumps(msg).encode()
    if depth >= 3000:
        assert msg.get("parse_error")


def test_lone_surrogate_arguments_encode() -> None:
    from constrained.chat.tools import parse_reply
    from constrained.server.jsonout import dumps

    text = '<tool_call>\n{"name": "f", "arguments": {"a": "\\ud800x", "b": "\\udfff"}}\n</tool_call>'
    r = parse_reply(text, _setup())
    for c in r.tool_calls:
        c.arguments.encode("utf-8")
    assert dumps({"a": "\ud800"}) == '{"a":"\ufffd\ufffd\ufffd"}'.encode()


def test_many_tool_calls_bounded() -> None:
    from constrained.chat.tools import parse_reply

    text = "".join('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n' for _ in range(5000))
    t0 = time.monotonic()
    r = parse_reply(text, _setup())
    assert len(r.tool_calls) == 5000
    assert time.monotonic() - t0 < 30


# ------------------------------------------------------------------ enforce="all" (finding 11)
@pytest.mark.parametrize("schema", [
    {"enum": list(range(5000))}, {"enum": [{"a": i} for i in range(1000)]}, {"enum": [1.5 * i for i in range(2000)]},
    {"enum": [f"v{i}" for i in range(5000)]}])
def test_big_enums_convert_fast(schema: dict) -> None:
    from constrained.json_schema import convert_json_schema

    t0 = time.monotonic()
    a = convert_json_schema(schema, enforce="all")
    assert time.monotonic() - t0 < 10
    assert a.gbnf and not a.unenforced


def test_big_enum_still_enforced() -> None:
    from constrained import Grammar, Vocabulary

    v = Vocabulary([b"1", b"2", b"0", b".", b"5", b"x"], eog_ids=[5])
    g = Grammar.from_json_schema({"enum": list(range(100))}, enforce="all")
    m = g.matcher(v)
    assert m.accept_token(0) and m.accept_token(0)   # "11"
    assert not m.allows(0)                            # "111" is not in the enum


@pytest.mark.parametrize("pattern", ["((", "a)", "[a", "*a", "a{2,1}"])
def test_invalid_pattern_is_a_schema_error(pattern: str) -> None:
    from constrained.json_schema import convert_json_schema

    with pytest.raises(SchemaError, match="not a valid regular expression"):
        convert_json_schema({"type": "string", "pattern": pattern}, enforce="all")


# ------------------------------------------------------------------ operator templates (finding 12)
@pytest.mark.parametrize("src", [
    "{{ 10 ** 10000000 }}", "{{ 'a' * 10**8 }}", "{{ [1, 2] * 10**9 }}", "{{ 2 ** 100000 }}", "{{ (10 ** 1000) * (10 ** 1000) }}",
    "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
])
def test_template_growth_bounded(src: str) -> None:
    from constrained.chat.jinja_env import environment

    t0 = time.monotonic()
    with pytest.raises(OverflowError):
        environment().from_string(src).render()
    assert time.monotonic() - t0 < 5


def test_template_small_arithmetic_unchanged() -> None:
    from constrained.chat.jinja_env import environment

    assert environment().from_string("{{ 2 ** 10 }} {{ 'ab' * 3 }} {{ 3 * 4 }} {{ 2.5 ** 2 }} {{ ([0] * 2)|length }}"
                                     ).render() == "1024 ababab 12 6.25 2"


# ------------------------------------------------------------------ DRY breakers (finding 5)
def test_dry_breaker_cache_is_bounded() -> None:
    from constrained import Vocabulary
    from sampler import dry

    v = Vocabulary([b"a", b"b\n", b":x", b"ab", b"\"", b"zz"], eog_ids=[5])
    first = dry.process_breakers(v, ("q0",))
    for i in range(dry.CACHE_SIZE * 3):
        dry.process_breakers(v, (f"q{i}", "\n"))
    assert len(dry._cache[v]) == dry.CACHE_SIZE
    assert dry.process_breakers(v, ("q0",)) == first == {}
    assert dry.process_breakers(v, ("\n", ":")) == {1: [()], 2: [()]}


def test_dry_breaker_cache_is_bounded_by_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    # the soak's growth: tables of ~20,000 heads each (a breaker "s1": every token ending in "s" heads it); the
    # cache keeps at most CACHE_ENTRIES heads in all (always the newest table), and equal tail lists are shared
    from constrained import Vocabulary
    from sampler import dry

    words = [f"w{i}s".encode() for i in range(500)] + [b"\n"]
    v = Vocabulary(words, eog_ids=[len(words) - 1])
    monkeypatch.setattr(dry, "CACHE_ENTRIES", 1200)
    tables = [dry.process_breakers(v, (f"q{k}", "s")) for k in range(1, 10)]
    assert len(tables[0]) >= 500
    kept = dry._cache[v]
    assert sum(len(t) for t in kept.values()) <= 1200 and len(kept) == 2
    assert next(reversed(kept.values())) is tables[-1]
    lists = {id(x) for x in tables[0].values()}
    assert len(lists) == 1                                   # 500 heads, one shared tail list
    assert dry.process_breakers(v, ("q1", "s")) == tables[0]      # rebuilt the same after eviction
