"""``uniqueItems`` on open string items, checked by the matcher (``constrained.grammar.unique_items``).

The oracle is jsonschema's validator (the schema's own dialect): every document a matcher with the check produces
is valid; over documents drawn from the grammar without the check, the check refuses exactly those jsonschema
rejects. The check rides with the grammar object: mask, allows, accept (token, piece, bytes), rollback, fork,
reset, the bitmask fill, lazy and structural-tag grammars.
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest

from constrained.grammar import Grammar
from constrained.grammar.bitmask import allocate_token_bitmask, fill_next_token_bitmask, unpack_bitmask
from constrained.grammar.unique_items import UniqueItemsMatcher
from constrained.json_schema import convert_json_schema
from constrained.vocab import Vocabulary
from oracle.cases.json_schema_corpus import check_sound

# single bytes, and tokens that complete one or several items at once (and open arrays)
PIECES = [bytes([i]) for i in range(128)] + [
    b'"a"', b'","', b'"]', b'["', b'["a","a"]', b'", "', b'a"', b'"b', b'[]', b'{"', b'":', b'"}', b' ["a"',
    b'"],', b'["a","b"]', b'ab', b'["a"]}', b'"a","a"', b'"]]', b'[["', b'x","x']
EOG = len(PIECES)
VOCAB = Vocabulary(PIECES + [b"</s>"], eog_ids=[EOG])

SCHEMA = {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 2},
    "plain": {"type": "array", "items": {"type": "string", "maxLength": 1}},
    "nested": {"type": "array", "items": {"type": "array", "items": {"type": "string", "minLength": 1},
                                          "uniqueItems": True}},
    "ids": {"type": "array", "items": {"type": "string", "pattern": "^[ab][ab0-9]*$"}, "uniqueItems": True},
    "objs": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string", "maxLength": 1}},
                                        "required": ["k"]}, "uniqueItems": True},
}, "required": ["tags", "plain", "nested"], "additionalProperties": False}

UNIQUE = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


def _walk(m, rng: random.Random, steps: int = 300) -> bytes | None:  # noqa: ANN001
    """A random generation through ``m``'s mask (every allowed token equally likely, the end more likely late);
    checks mask == allows on every token and that the masked-out tokens are refused."""
    text = b""
    for step in range(steps):
        mask = m.mask()
        assert [bool(mask[t]) for t in range(EOG + 1)] == [m.allows(t) for t in range(EOG + 1)], text
        ids = [int(t) for t in np.flatnonzero(mask) if t != EOG]
        if mask[EOG] and (step > 50 or rng.random() < 0.2 or not ids):
            assert m.accept_token(EOG)
            return text
        assert ids, f"dead end after {text!r}"
        refused = [t for t in range(EOG) if not mask[t]]
        if refused:
            t = rng.choice(refused)
            f = m.fork()
            assert not f.accept_token(t) and f.num_accepted == m.num_accepted
        t = rng.choice(ids)
        assert m.accept_token(t)
        text += PIECES[t]
    return None


def test_conversion_names_the_checked_arrays() -> None:
    conv = convert_json_schema(SCHEMA, enforce="all")
    assert set(conv.unique_rules) == {"root-tags-unique", "root-nested-item-unique", "root-ids-unique",
                                      "root-objs-unique"}
    assert conv.unenforced == ()
    g = Grammar.from_json_schema(SCHEMA, enforce="all")
    assert g.unique_rules == conv.unique_rules and isinstance(g.matcher(VOCAB), UniqueItemsMatcher)
    # items whose language ends (maxLength, pattern, format): a refusal could strand a generation, still reported
    for items in ({"type": "string", "maxLength": 8}, {"type": "string", "pattern": "^[a-z]{2}$"},
                  {"type": "string", "pattern": "^a+b$"}, {"type": "string", "format": "date"}, {"type": "integer"},
                  {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}}},
                  {"type": "object", "maxProperties": 3}):
        c = convert_json_schema({"type": "array", "items": items, "uniqueItems": True}, enforce="all")
        assert [k.keyword for k in c.unenforced] == ["uniqueItems"] and c.unique_rules == ()
    # endless from every prefix: a pattern ending in a loop, an open object
    for items in ({"type": "string", "pattern": "^[a-z][a-z0-9-]*$"}, {"type": "string", "format": "uri"},
                  {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}):
        c = convert_json_schema({"type": "array", "items": items, "uniqueItems": True}, enforce="all")
        assert c.unenforced == () and c.unique_rules == ("root-unique",), items
    assert convert_json_schema(UNIQUE).unique_rules == ()          # llama.cpp mode: its grammar, its report


@pytest.mark.parametrize("seed", range(3))
def test_generations_are_valid(seed: int) -> None:
    """Random generations through the mask (single bytes and multi-item tokens): jsonschema accepts every one."""
    g = Grammar.from_json_schema(SCHEMA, enforce="all")
    v = jsonschema.Draft202012Validator(SCHEMA)
    rng = random.Random(seed)
    done = 0
    for _ in range(12):
        text = _walk(g.matcher(VOCAB), rng)
        if text is not None:
            assert v.is_valid(json.loads(text)), text
            done += 1
    assert done >= 6


def test_the_check_refuses_exactly_the_repeats() -> None:
    """Documents drawn without the check (the grammar alone): the checked matcher accepts exactly the valid ones,
    and refuses the others at the token that completes the repeat."""
    g = Grammar.from_json_schema(SCHEMA, enforce="all")
    plain = Grammar.from_gbnf(g.source)
    v = jsonschema.Draft202012Validator(SCHEMA)
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(80):
        p, m, text, alive = plain.matcher(VOCAB), g.matcher(VOCAB), b"", True
        for step in range(200):
            mask = p.mask()
            ids = [int(t) for t in np.flatnonzero(mask) if t != EOG]
            if mask[EOG] and (step > 30 or rng.random() < 0.3 or not ids):
                break
            t = rng.choice(ids)
            assert p.accept_token(t)
            text += PIECES[t]
            if alive and not m.accept_token(t):
                alive = False
        else:
            continue
        valid = v.is_valid(json.loads(text))
        assert alive == valid == g.matcher(VOCAB).accept_bytes(text), text
        seen[valid] += 1
    assert seen[True] >= 10 and seen[False] >= 10


def test_rollback_fork_reset_and_pieces() -> None:
    m = Grammar.from_json_schema(UNIQUE, enforce="all").matcher(VOCAB)
    assert m.accept_bytes(b'["a"')
    f = m.fork()
    assert not m.accept_bytes(b',"a"') and m.accept_bytes(b',"a') and not m.allows(PIECES.index(b'"]'))
    m.rollback(1)
    assert m.accept_piece(44, b',"b"') and m.accept_bytes(b']') and m.can_end()
    m.rollback(2)
    assert (m.mask() == f.mask()).all() and not f.accept_token(PIECES.index(b'"a","a"'))
    assert not m.accept_bytes(b',"\\u0061"')           # the same string, escaped
    m.reset()
    assert not m.accept_token(PIECES.index(b'["a","a"]')) and m.accept_token(PIECES.index(b'["a","b"]'))


def test_nested_and_sibling_arrays() -> None:
    """The check follows the array it belongs to: a non-unique sibling and an inner unique array are judged
    apart; JSON's equality (escapes) is the validators'."""
    m = Grammar.from_json_schema(SCHEMA, enforce="all").matcher(VOCAB)
    assert m.accept_bytes(b'{"tags": ["x", "y"], "plain": ["a", "a"], "nested": [["a", "b"], ["a"')
    assert not m.accept_bytes(b', "b", "a"') and m.accept_bytes(b', "c"], ["a", "b"]]')
    assert m.accept_bytes(b', "ids": ["a1", "b"') and not m.accept_bytes(b', "a1"') and m.accept_bytes(b', "a10"]')
    assert m.accept_bytes(b', "objs": [{"k": "a"}, {"k": "b"}, {"k": "a", "x": 1}')
    assert not m.accept_bytes(b', {"k": "a"}') and not m.accept_bytes(b', {"k": "a", "x": 1.0}')   # 1 == 1.0
    assert m.accept_bytes(b', {"k": "a", "y": {}}]}') and m.can_end()


def test_bitmask_lazy_and_structural_tag() -> None:
    g = Grammar.from_json_schema(UNIQUE, enforce="all")
    m = g.matcher(VOCAB)
    assert m.accept_bytes(b'["a",')
    bits = allocate_token_bitmask(1, len(VOCAB))
    fill_next_token_bitmask(m, bits)
    allowed = unpack_bitmask(bits[0], len(VOCAB))
    assert (allowed == m.mask()).all() and not allowed[PIECES.index(b'"a"')] and allowed[PIECES.index(b'"b')]
    lazy = g.matcher(VOCAB, trigger_patterns=[r"\["])
    assert all(lazy.accept_token(c) for c in b'say ["a",') and lazy.triggered
    assert not lazy.allows(PIECES.index(b'"a"')) and not lazy.mask()[PIECES.index(b'"a"')]
    assert lazy.accept_token(PIECES.index(b'"b')) and lazy.accept_token(PIECES.index(b'"]')) and lazy.can_end()
    st = Grammar.from_structural_tag({"structures": [{"begin": "<f>", "schema": UNIQUE, "end": "</f>"}],
                                      "triggers": ["<f>"]}, enforce="all")
    assert st.unique_rules
    sm = st.matcher(VOCAB)
    assert all(sm.accept_token(c) for c in b'hi <f>["a",')
    assert not sm.accept_token(PIECES.index(b'"a"')) and all(sm.accept_token(c) for c in b'"b"]</f>')


@pytest.mark.parametrize("uri", [None, "http://json-schema.org/draft-04/schema#",
                                 "http://json-schema.org/draft-07/schema#",
                                 "https://json-schema.org/draft/2019-09/schema"])
def test_harness_applies_the_check(uri: str | None) -> None:
    """``check_sound`` draws documents from the grammar and drops those the matcher refuses: none of them is
    valid (the check refuses only repeats), the rest are, in every dialect."""
    schema = {"type": "object", "properties": {"a": {**UNIQUE, "minItems": 3}, "b": {"type": "array", "items": {
        "type": "object", "properties": {"k": {**UNIQUE, "items": {"type": "string", "minLength": 1}}}}}}}
    if uri:
        schema["$schema"] = uri
    out = check_sound(schema, "all", 60)
    assert out.report == () and out.misses == [] and out.check_refused >= 5 and out.over_refused == 0
    assert out.checked + out.check_refused == 60
