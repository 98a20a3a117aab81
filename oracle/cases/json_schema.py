"""Readers for the oracle tests of the JSON schema converter: llama.cpp's own test cases, parsed at test time from
``tests/test-json-schema-to-grammar.cpp`` of the sdist, and the comparison of our result with the C++ shim's.

Example:
    >>> cases = upstream_cases()          # doctest: +SKIP
    >>> len(cases), cases[0].name         # doctest: +SKIP
    (81, 'min 0')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from constrained.errors import SchemaError
from constrained.json_schema import convert_json_schema
from constrained.json_schema._gbnf import inverted_repetitions, productive_rules, read_gbnf
from oracle.schema import OTHER_EXCEPTION, oracle_convert
from oracle.sdist import llama_cpp_source

_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0", "?": "?"}


@dataclass(frozen=True)
class UpstreamCase:
    success: bool
    name: str
    schema: str
    expected: str


def _tokens(src: str) -> list[tuple[str, str]]:
    """C++ tokens: ("str", value) for string literals (raw and escaped), ("id", name), ("p", punctuation)."""
    out: list[tuple[str, str]] = []
    i = 0
    n = len(src)
    while i < n:
        c = src[i]
        if c.isspace():
            i += 1
        elif src.startswith("//", i):
            i = src.index("\n", i)
        elif src.startswith("/*", i):
            i = src.index("*/", i) + 2
        elif c == "R" and i + 1 < n and src[i + 1] == '"':
            j = src.index("(", i)
            delim = src[i + 2:j]
            end = src.index(")" + delim + '"', j)
            out.append(("str", src[j + 1:end]))
            i = end + len(delim) + 2
        elif c == '"':
            j = i + 1
            buf = []
            while src[j] != '"':
                if src[j] == "\\":
                    buf.append(_SIMPLE_ESCAPES[src[j + 1]])
                    j += 2
                else:
                    buf.append(src[j])
                    j += 1
            out.append(("str", "".join(buf)))
            i = j + 1
        elif c.isalnum() or c == "_":
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            out.append(("id", src[i:j]))
            i = j
        else:
            out.append(("p", c))
            i += 1
    # adjacent string literals concatenate
    merged: list[tuple[str, str]] = []
    for tok in out:
        if tok[0] == "str" and merged and merged[-1][0] == "str":
            merged[-1] = ("str", merged[-1][1] + tok[1])
        else:
            merged.append(tok)
    return merged


def upstream_cases() -> list[UpstreamCase]:
    """Every ``test({STATUS, name, schema, grammar})`` of test-json-schema-to-grammar.cpp's ``test_all`` body."""
    src = (llama_cpp_source() / "tests" / "test-json-schema-to-grammar.cpp").read_text()
    body = src[src.index("static void test_all"):src.index("int main")]
    toks = _tokens(body)
    cases = []
    for k in range(len(toks) - 2):
        if toks[k] == ("id", "test") and toks[k + 1] == ("p", "(") and toks[k + 2] == ("p", "{"):
            fields = []
            j = k + 3
            while toks[j] != ("p", "}"):
                if toks[j][0] in ("str", "id"):
                    fields.append(toks[j])
                j += 1
            status, name, schema, expected = fields
            cases.append(UpstreamCase(status[1] == "SUCCESS", name[1], schema[1], expected[1]))
    return cases


def trim(text: str) -> str:
    """The C++ test's own normalisation: strip, then drop indentation at line starts."""
    s = text.strip(" \n\r\t")
    return re.sub(r"(^|\n)[ \t]+", r"\1", s)


def ours(schema: Any) -> tuple[int, str]:
    """(0, grammar) or (1, the SchemaError message), shaped like the oracle's (status, text)."""
    try:
        return 0, convert_json_schema(schema).gbnf
    except SchemaError as e:
        return 1, str(e)


def accepted_by_llama(vm, eos: int, gbnf: str, doc: str) -> bool | None:  # noqa: ANN001
    """True/False: llama.cpp's grammar sampler accepts the whole document token by token, then allows end of
    generation; None: the vocabulary does not spell the document back exactly."""
    from oracle.llama import CGrammar

    data = doc.encode("utf-8", "surrogatepass")
    toks = vm.tokenize(data, False)
    if b"".join(vm.piece(t) for t in toks) != data:
        return None
    with CGrammar(vm, gbnf) as g:
        for t in toks:
            if not g.allows(t):
                return False
            g.accept(t)
        return g.allows(eos)


def check_documents(vm, eos: int, schema: Any, rng: Any, n: int = 3, budget: int = 12) -> tuple[int, int]:  # noqa: ANN001
    """Draw ``n`` documents from our grammar for ``schema``; each must be accepted by llama.cpp's grammar sampler
    and, when the schema has no unenforced keyword, validate with jsonschema. Returns (accepted, validated)."""
    from constrained.json_schema._gbnf import read_gbnf, sample
    from constrained.json_schema.validation import validate
    from oracle.llama import CGrammar

    try:
        conv = convert_json_schema(schema)
    except SchemaError:
        return 0, 0
    try:
        CGrammar(vm, conv.gbnf).free()
    except ValueError:  # llama.cpp refuses it (e.g. left recursion): nothing to draw from
        return 0, 0
    rules = read_gbnf(conv.gbnf)
    accepted = validated = 0
    for _ in range(n):
        doc = sample(rules, rng, budget=budget)
        verdict = accepted_by_llama(vm, eos, conv.gbnf, doc)
        if verdict is None:
            continue
        assert verdict, f"llama.cpp rejects a document of our grammar\nschema: {schema}\ndoc: {doc!r}"
        accepted += 1
        if not conv.unenforced:
            try:
                issues = validate(doc, schema)
            except SchemaError:  # llama.cpp converts it, but it is not a valid JSON schema
                continue
            assert not issues, f"no unenforced keyword reported, yet\nschema: {schema}\ndoc: {doc!r}\n{issues}"
            validated += 1
    return accepted, validated


# ---- ours against llama.cpp's converter (the oracle tests and scripts/json_schema_sweep.py) ----------------

WARNING_PREFIX = "WARNING: JSON schema conversion was incomplete: "
COUNTS: dict[str, int] = {}


def count(key: str) -> None:
    """Add one to ``COUNTS[key]``."""
    COUNTS[key] = COUNTS.get(key, 0) + 1


def schema_text(schema: object) -> str:
    """A schema as the JSON text both converters read (a string is taken as it is)."""
    return schema if isinstance(schema, str) else json.dumps(schema, ensure_ascii=False)


def _never_send_to_oracle(message: str) -> bool:
    """Schemas on which llama.cpp would crash the test process (stack overflow) or that exceed our limits."""
    return "recurse forever" in message or "too deeply" in message or "too large" in message


def compare_with_oracle(schema: object) -> str:
    """Ours vs llama.cpp's converter: 'same' (text or error), or the checked reason we differ."""
    text = schema_text(schema)
    status, result = ours(text)
    if status == 1 and _never_send_to_oracle(result):
        return "crash-avoided"
    o = oracle_convert(text)
    if o.status == OTHER_EXCEPTION:  # nlohmann could not parse the JSON text
        assert status == 1 and result.startswith("JSON schema is not valid JSON"), (text, o.text, result)
        return "same"
    if status == 1 and "never finishes loading" in result:
        # llama.cpp returns a grammar with a {m,n}, n < m, that its own grammar parser loops on
        assert o.ok and inverted_repetitions(read_gbnf(o.text)), (text, o.text)
        return "hang-refused"
    if status == 1 and "the grammar accepts nothing" in result:
        # llama.cpp returns a grammar here: it must be one that accepts nothing
        assert o.ok, (text, o.text)
        assert "root" not in productive_rules(read_gbnf(o.text)), (text, o.text)
        return "empty-refused"
    assert (o.status, o.text) == (status, result), f"\nschema: {text}\nllama.cpp: {o.text}\nours:      {result}"
    if o.ok:
        conv = convert_json_schema(text)
        expected_warning = (WARNING_PREFIX + "; ".join(conv.warnings) + "\n") if conv.warnings else ""
        assert o.warnings == expected_warning, (text, o.warnings, conv.warnings)
    return "same"
