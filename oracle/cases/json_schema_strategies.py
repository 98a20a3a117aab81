"""Hypothesis strategies for JSON schemas over the keywords llama.cpp's converter supports (and some it ignores or
refuses), for the oracle tests of ``constrained.json_schema``.

Example:
    >>> from hypothesis import given
    >>> @given(schemas())                  # doctest: +SKIP
    ... def test(s): ...
"""

from __future__ import annotations

from hypothesis import strategies as st

NAMES = ["a", "b", "c", "id", "name", "x-y", "é", "x y", "root", "string", "value", "*", "", 'q"t', "a\\b",
         "1", "日本", "additional", "item", "kv"]
PATTERNS = ["^[a-z]+$", "^[0-9]{3}-[0-9]{4}$", "^(ab|cd)*e?$", "^a.b$", "^[^\"\\\\]{1,5}$", "^\\d+$", "^x$",
            "[0-9]+", "^(a$", "^$", "^(?:ab)+$", "^a{2,}b{,3}$", "^\\.\\*a\\-b$", "^[\\x41-\\x5A]+$",
            "^(?=a)a$", "^a*?$", "^(a|b|)c$", "^\"q\"$", "^é+ñ$", "^[a-c]{0}$", "^]$", "^a{x}$"]
FORMATS = ["date", "time", "date-time", "uuid", "uuid4", "uuid7", "email", "uri"]
TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]

_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
)
json_values = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)), max_leaves=6)

_bound = st.one_of(st.integers(-10**6, 10**6), st.integers(-10**19, 10**19),
                   st.floats(-1e7, 1e7, allow_nan=False), st.sampled_from([0, 1, 9, 10, 99, 100, -1, -10, 2**63 - 1]))
_count = st.one_of(st.integers(0, 6), st.sampled_from([-1, 1.5, "2", 2**32 + 1]))


@st.composite
def _integer(draw: st.DrawFn) -> dict:
    s: dict = {"type": "integer"}
    for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        if draw(st.integers(0, 3)) == 0:
            s[k] = draw(_bound)
    return s


@st.composite
def _number(draw: st.DrawFn) -> dict:
    s: dict = {"type": "number"}
    if draw(st.booleans()):
        s["minimum"] = draw(_bound)
    return s


@st.composite
def _string(draw: st.DrawFn) -> dict:
    s: dict = {} if draw(st.integers(0, 4)) == 0 else {"type": "string"}
    if draw(st.integers(0, 2)) == 0:
        s["pattern"] = draw(st.sampled_from(PATTERNS))
    if draw(st.integers(0, 3)) == 0:
        s["format"] = draw(st.sampled_from(FORMATS))
    if draw(st.integers(0, 2)) == 0:
        s["minLength"] = draw(_count)
    if draw(st.integers(0, 2)) == 0:
        s["maxLength"] = draw(_count)
    return s


def _leaves(refs: int) -> st.SearchStrategy:
    options = [
        st.sampled_from([{"type": t} for t in TYPES] + [{}, {"description": "x"}]),
        _integer(), _number(), _string(),
        json_values.map(lambda v: {"const": v}),
        st.lists(json_values, min_size=1, max_size=4).map(lambda v: {"enum": v}),
    ]
    if refs:
        options.append(st.integers(0, refs - 1).map(lambda i: {"$ref": f"#/$defs/d{i}"}))
    return st.one_of(*options)


def _composites(inner: st.SearchStrategy) -> st.SearchStrategy:
    @st.composite
    def obj(draw: st.DrawFn) -> dict:
        props = draw(st.dictionaries(st.sampled_from(NAMES), inner, max_size=4))
        s: dict = {} if draw(st.integers(0, 4)) == 0 else {"type": "object"}
        if props or draw(st.booleans()):
            s["properties"] = props
        names = list(props) + ["zz"]
        if draw(st.booleans()):
            s["required"] = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
        ap = draw(st.integers(0, 4))
        if ap == 1:
            s["additionalProperties"] = False
        elif ap == 2:
            s["additionalProperties"] = True
        elif ap == 3:
            s["additionalProperties"] = draw(inner)
        return s

    @st.composite
    def arr(draw: st.DrawFn) -> dict:
        s: dict = {"type": "array"}
        k = draw(st.integers(0, 3))
        if k == 1:
            s["items"] = draw(inner)
        elif k == 2:
            s["prefixItems"] = draw(st.lists(inner, max_size=3))
        elif k == 3:
            s["items"] = draw(st.lists(inner, max_size=3))
        if draw(st.booleans()):
            s["minItems"] = draw(_count)
        if draw(st.booleans()):
            s["maxItems"] = draw(_count)
        if draw(st.integers(0, 5)) == 0:
            s["uniqueItems"] = True
        return s

    @st.composite
    def alts(draw: st.DrawFn) -> dict:
        key = draw(st.sampled_from(["anyOf", "oneOf", "allOf"]))
        return {key: draw(st.lists(inner, min_size=1, max_size=3))}

    @st.composite
    def typed_union(draw: st.DrawFn) -> dict:
        s = draw(st.one_of(_integer(), _string(), obj()))
        s["type"] = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3))
        return s

    return st.one_of(obj(), arr(), alts(), typed_union())


@st.composite
def schemas(draw: st.DrawFn, max_leaves: int = 8, broken: bool = True) -> dict:
    """A schema, sometimes with $defs referenced by $ref (cycles included), sometimes malformed."""
    n_refs = draw(st.integers(0, 2))
    node = st.recursive(_leaves(n_refs), _composites, max_leaves=max_leaves)
    root = draw(node)
    if n_refs:
        root = dict(root) if "$defs" not in root else root
        root["$defs"] = {f"d{i}": draw(node) for i in range(n_refs)}
    if broken and draw(st.integers(0, 9)) == 0:
        key, bad = draw(st.sampled_from([("type", 123), ("enum", []), ("minLength", -1), ("properties", []),
                                         ("additionalProperties", 1), ("anyOf", {}), ("allOf", []),
                                         ("$ref", "http://x"), ("$ref", "#/nope"), ("format", 3),
                                         ("pattern", 1), ("items", True), ("type", "float")]))
        root = dict(root)
        root[key] = bad
    return root


_KEYS = ["type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
         "anyOf", "oneOf", "allOf", "enum", "const", "pattern", "format", "minLength", "maxLength", "minimum",
         "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "$defs", "not", "x"]
_chaos_leaf = st.one_of(json_values, st.sampled_from(TYPES), st.sampled_from(PATTERNS), st.sampled_from(FORMATS),
                        st.sampled_from(["#/$defs/a", "#/$defs/b", "#/properties/a", "#/items/0", "#"]))


def chaos() -> st.SearchStrategy:
    """Any JSON built from schema keywords with arbitrary values: for 'never anything but a SchemaError'."""
    return st.recursive(
        _chaos_leaf,
        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                st.dictionaries(st.sampled_from(_KEYS + NAMES[:4]), inner, max_size=4)),
        max_leaves=12)
