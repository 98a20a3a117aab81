"""Run the JSON-Schema-Test-Suite through ``Grammar.from_json_schema(schema, enforce="all")`` and the matcher.

For every test group whose schema compiles with an empty report, each valid instance must be accepted
(``accept_bytes`` then ``can_end``) in at least one order of its object keys (the grammar fixes the order of the
declared properties), and each invalid instance rejected in every order. Instances are written compactly
(``json.dumps``, no spaces), which the grammar's ``space`` allows.

``KNOWN_INCOMPLETE`` lists valid instances the grammar refuses on purpose (documented limits that keep it sound);
they are counted, never hidden.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _find_suite() -> Path:
    """The suite's ``tests`` folder: ``$JSON_SCHEMA_TEST_SUITE``, else the workplace's shared data beside the repo or
    at /work/shared (the first that exists; a missing suite makes the test fail, naming the places looked at)."""
    import os

    here = Path(__file__).resolve()
    candidates = [Path(os.environ["JSON_SCHEMA_TEST_SUITE"])] if os.environ.get("JSON_SCHEMA_TEST_SUITE") else []
    candidates += [base / "shared" / "data" / "JSON-Schema-Test-Suite" / "tests"
                   for base in (*here.parents[2:5], Path("/work"))]
    for c in candidates:
        if (c / "draft2020-12").is_dir():
            return c
    raise FileNotFoundError("JSON-Schema-Test-Suite not found (set JSON_SCHEMA_TEST_SUITE to its tests/ folder); "
                            "looked in: " + ", ".join(map(str, candidates)))


SUITE = _find_suite()
CORE = ("additionalProperties", "allOf", "anyOf", "boolean_schema", "const", "contains", "default", "enum",
        "exclusiveMaximum", "exclusiveMinimum", "format", "if-then-else", "items", "maxContains", "maxItems",
        "maxLength", "maxProperties", "maximum", "minContains", "minItems", "minLength", "minProperties", "minimum",
        "multipleOf", "not", "oneOf", "pattern", "patternProperties", "prefixItems", "properties", "propertyNames",
        "required", "type", "uniqueItems", "dependentRequired", "additionalItems", "dependencies", "ref", "defs")
FORMATS = ("date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uri-reference",
           "uuid")
KNOWN_INCOMPLETE = {
    # (description substring): reason
    "leap second": "a leap second is accepted only as 23:59:60 with a zero offset",
    "exponent": "bounded numbers are written without an exponent",
}


@dataclass
class SuiteResult:
    files: Counter = field(default_factory=Counter)          # file -> instances checked
    passed: Counter = field(default_factory=Counter)
    groups: Counter = field(default_factory=Counter)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)   # (file, group, reason)
    failures: list[tuple[str, str, str, bool]] = field(default_factory=list)
    incomplete: list[tuple[str, str, str]] = field(default_factory=list)


def _orders(value: Any, budget: int = 120) -> list[Any]:
    """The value with its object keys in every order (recursively), at most ``budget`` variants."""
    if isinstance(value, dict):
        keys = list(value)
        subs = {k: _orders(value[k], 8) for k in keys}
        out = []
        for perm in itertools.islice(itertools.permutations(keys), 24):
            for combo in itertools.islice(itertools.product(*[subs[k] for k in perm]), 8):
                out.append(dict(zip(perm, combo, strict=True)))
                if len(out) >= budget:
                    return out
        return out or [{}]
    if isinstance(value, list):
        subs = [_orders(v, 4) for v in value]
        return [list(c) for c in itertools.islice(itertools.product(*subs), budget)] or [[]]
    return [value]


def _texts(value: Any) -> list[bytes]:
    return [json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
            for v in _orders(value)]


def suite_files(draft: str) -> list[Path]:
    base = SUITE / draft
    files = [base / f"{name}.json" for name in CORE if (base / f"{name}.json").exists()]
    files += [base / "optional" / "format" / f"{name}.json" for name in FORMATS
              if (base / "optional" / "format" / f"{name}.json").exists()]
    return files


def all_schemas(drafts: tuple[str, ...] = ("draft2020-12", "draft7")) -> list[Any]:
    """Every test group's schema of every file of these drafts (optional files included), in file order."""
    out: list[Any] = []
    for draft in drafts:
        for path in sorted((SUITE / draft).rglob("*.json")):
            try:
                groups = json.loads(path.read_text())
            except ValueError:
                continue
            out += [g["schema"] for g in groups if isinstance(g, dict) and "schema" in g]
    return out


def run_suite(vocab: Any, drafts: tuple[str, ...] = ("draft2020-12", "draft7")) -> SuiteResult:
    from constrained import Grammar
    from constrained.errors import ConstrainedError

    res = SuiteResult()
    for draft in drafts:
        for path in suite_files(draft):
            label = f"{draft}/{path.stem}" + ("(format)" if path.parent.name == "format" else "")
            if path.stem == "format" and path.parent.name != "format":
                res.skipped.append((label, "*", "enforce='all' asserts formats (the format-assertion vocabulary); "
                                                "this file tests format as an annotation only"))
                continue
            for group in json.loads(path.read_text()):
                schema = group["schema"]
                if draft == "draft7" and isinstance(schema, dict) and "$schema" not in schema:
                    schema = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
                try:
                    g = Grammar.from_json_schema(schema, enforce="all")
                except ConstrainedError as e:
                    res.skipped.append((label, group["description"], f"refused: {str(e)[:120]}"))
                    continue
                if g.unenforced:
                    res.skipped.append((label, group["description"],
                                        "; ".join(f"{k.path} {k.keyword}" for k in g.unenforced)[:160]))
                    continue
                res.groups[label] += 1
                for test in group["tests"]:
                    texts = _texts(test["data"])
                    verdicts = []
                    for t in texts:
                        m = g.matcher(vocab)
                        verdicts.append(m.accept_bytes(t) and m.can_end())
                    res.files[label] += 1
                    ok = any(verdicts) if test["valid"] else not any(verdicts)
                    if ok:
                        res.passed[label] += 1
                        continue
                    what = group["description"] + " / " + test["description"]
                    reason = next((r for k, r in KNOWN_INCOMPLETE.items() if k in what), None)
                    if test["valid"] and reason:
                        res.incomplete.append((label, what, reason))
                        res.passed[label] += 1
                    else:
                        res.failures.append((label, what, texts[0].decode("utf-8", "replace")[:80], test["valid"]))
    return res
