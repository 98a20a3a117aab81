"""Validate a generated result against its JSON schema with ``jsonschema``: every problem with its path, never an
exception for a bad document, and never a hang.

JSON-Schema ``pattern`` / ``patternProperties`` regexes are matched with RE2 (``google-re2``: linear time, no
backtracking), so ``^(a+)+$`` on a long run of ``a`` answers at once. A pattern RE2 cannot run (lookaround,
backreferences: ECMAScript features without a linear-time algorithm) is matched by Python's ``re`` in a child
process killed after :data:`PATTERN_TIMEOUT` seconds; a match that does not finish in time is reported as an issue
("could not be checked"), never waited for. Schemas nested too deeply for ``jsonschema``'s recursion are validated
on a thread with a larger stack, and failing that refused with a :class:`~constrained.errors.SchemaError`.

Example:
    >>> validate('{"n": "x"}', {"type": "object", "properties": {"n": {"type": "integer"}}})
    [ValidationIssue(path='$.n', message="'x' is not of type 'integer'", keyword='type')]
    >>> validate('{"n": 1', {})[0].message.startswith("not valid JSON")
    True
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import SchemaError

__all__ = ["ValidationIssue", "validate"]

_NOT_JSON = object()


@dataclass(frozen=True)
class ValidationIssue:
    """One reason the document does not satisfy the schema.

    ``path`` is the JSONPath of the offending value (``$`` is the whole document, ``$.items[2]`` ...);
    ``keyword`` the schema keyword that failed (empty when the text is not JSON).
    """

    path: str
    message: str
    keyword: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _parse(text: str | bytes) -> tuple[Any, ValidationIssue | None]:
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        return json.loads(text, parse_constant=_reject), None
    except (ValueError, RecursionError) as e:
        return _NOT_JSON, ValidationIssue("$", f"not valid JSON: {e}")


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unresolvable() -> type[Exception]:
    try:
        from referencing.exceptions import Unresolvable
    except ImportError:  # pragma: no cover - jsonschema < 4.18
        import jsonschema

        return jsonschema.RefResolutionError
    return Unresolvable


PATTERN_TIMEOUT = 2.0
"""Seconds a pattern RE2 cannot run (lookaround, backreference) may take in Python's ``re`` before it is given up."""

_RECURSION_LIMIT = 60_000            # for the retry of a deeply nested schema, on a thread with a large stack
_BIG_STACK = 512 << 20


class PatternTimeout(Exception):
    """A pattern match RE2 could not run and Python's backtracking ``re`` did not finish in time."""


@functools.lru_cache(maxsize=1024)
def _re2(pattern: str) -> Any:
    """The pattern compiled by RE2, or None when RE2 is not installed or lacks a feature it uses."""
    try:
        import re2
    except ImportError:  # pragma: no cover - google-re2 is a dependency
        return None
    opts = re2.Options()
    opts.log_errors = False
    try:
        return re2.compile(pattern, opts)
    except Exception:   # re2.error: lookaround, backreference, a repeat count above 1000...
        return None


_CHILD = ("import json, re, sys\n"
          "p, s = json.loads(sys.stdin.read())\n"
          "try:\n    print(json.dumps(re.search(p, s) is not None))\n"
          "except Exception as e:\n    print(json.dumps(type(e).__name__ + ': ' + str(e)))\n")


@functools.lru_cache(maxsize=4096)
def _search_slow(pattern: str, text: str) -> bool:
    try:
        out = subprocess.run([sys.executable, "-I", "-S", "-c", _CHILD], input=json.dumps([pattern, text]),
                             capture_output=True, text=True, timeout=PATTERN_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise PatternTimeout(f"pattern {pattern!r} could not be checked within {PATTERN_TIMEOUT} s (it needs "
                             "backtracking: lookaround or backreferences)") from None
    try:
        res = json.loads(out.stdout)
    except ValueError:
        raise PatternTimeout(f"pattern {pattern!r} could not be checked: {out.stderr.strip()[-200:]}") from None
    if isinstance(res, str):
        raise PatternTimeout(f"pattern {pattern!r} could not be checked: {res}")
    return bool(res)


def pattern_search(pattern: str, text: str) -> bool:
    """``re.search(pattern, text) is not None`` in linear time (RE2), or bounded by :data:`PATTERN_TIMEOUT`.

    Raises:
        PatternTimeout: RE2 cannot run the pattern and Python's ``re`` did not answer in time.

    >>> pattern_search("^(a+)+$", "a" * 40 + "!")
    False
    """
    rx = _re2(pattern)
    if rx is not None:
        return rx.search(text) is not None
    return _search_slow(pattern, text)


def _keywords() -> dict[str, Any]:
    """jsonschema's ``pattern``, ``patternProperties`` and ``additionalProperties`` on :func:`pattern_search`
    (same messages; jsonschema's own call ``re.search``, which backtracks)."""
    from jsonschema.exceptions import ValidationError

    def search(p: str, text: str) -> bool | ValidationError:
        try:
            return pattern_search(p, text)
        except PatternTimeout as e:
            return ValidationError(str(e))

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string"):
            r = search(patrn, instance)
            if isinstance(r, ValidationError):
                yield r
            elif not r:
                yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, pp: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for p, subschema in pp.items():
            for k, v in instance.items():
                r = search(p, k)
                if isinstance(r, ValidationError):
                    yield r
                elif r:
                    yield from validator.descend(v, subschema, path=k, schema_path=p)

    def additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = []
        for k in instance:
            if k in properties:
                continue
            hit = False
            for p in patterns:
                r = search(p, k)
                if isinstance(r, ValidationError):
                    yield r
                    hit = True
                    break
                if r:
                    hit = True
                    break
            if not hit:
                extras.append(k)
        if validator.is_type(ap, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], ap, path=extra)
        elif not ap and extras:
            if "patternProperties" in schema:
                verb = "does" if len(extras) == 1 else "do"
                joined = ", ".join(repr(each) for each in sorted(extras))
                pats = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
                yield ValidationError(f"{joined} {verb} not match any of the regexes: {pats}")
            else:
                extras = sorted(extras, key=str)
                verb = "was" if len(extras) == 1 else "were"
                listed = ", ".join(repr(e) for e in extras)
                yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")

    return {"pattern": pattern, "patternProperties": pattern_properties,
            "additionalProperties": additional_properties}


@functools.lru_cache(maxsize=16)
def _linear(cls: type) -> type:
    import jsonschema

    mine = {k: v for k, v in _keywords().items() if k in cls.VALIDATORS}
    return jsonschema.validators.extend(cls, mine)


def _deep(fn: Any) -> Any:
    """Run ``fn()`` on a thread with a large stack and a high recursion limit (a schema nested deeper than the
    default limit allows for jsonschema's recursion)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e

    with _DEEP_LOCK:
        old_stack = threading.stack_size(_BIG_STACK)
        old_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old_limit, _RECURSION_LIMIT))
        try:
            t = threading.Thread(target=run, name="constrained-validate")
            t.start()
            t.join()
        finally:
            threading.stack_size(old_stack)
            sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"]
    return box["value"]


_DEEP_LOCK = threading.Lock()


def validate(document: Any, schema: Any, *, parse: bool | None = None) -> list[ValidationIssue]:
    """Check ``document`` against ``schema`` (dict, JSON text or a pydantic model class).

    A ``str``/``bytes`` document is parsed as JSON text (``parse=False`` validates it as a JSON string value
    instead); anything else is taken as the parsed value. Returns the issues sorted by path (empty = valid).
    Patterns are matched in linear time (see the module docstring): validation never hangs.

    Raises SchemaError only when the schema itself is not a valid JSON schema or cannot be used.
    """
    from .json_text import load

    value = load(schema)
    if parse is None:
        parse = isinstance(document, (str, bytes, bytearray))
    if parse:
        document, issue = _parse(document)
        if issue is not None:
            return [issue]
    if isinstance(value, bool):
        return [] if value else [ValidationIssue("$", "the schema false accepts nothing", "false")]
    try:
        return _validate(document, value)
    except RecursionError:
        pass
    try:
        return _deep(lambda: _validate(document, value))
    except RecursionError:
        raise SchemaError("the schema is nested too deeply to be used for validation", path="#") from None


def _validate(document: Any, value: Any) -> list[ValidationIssue]:
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(value, default=jsonschema.Draft202012Validator)
    except (AttributeError, TypeError, ValueError) as e:     # "$schema": 5
        raise SchemaError(f"not a valid JSON schema: $schema: {e}", path="#/$schema") from None
    try:
        cls.check_schema(value)
    except jsonschema.SchemaError as e:
        raise SchemaError(f"not a valid JSON schema: {e.message}", path="#/" + "/".join(map(str, e.path))) from None
    except (OverflowError, ValueError, TypeError) as e:     # a pattern Python's re cannot compile at all
        raise SchemaError(f"not a valid JSON schema: {e}", path="#") from None
    validator = _linear(cls)(value, format_checker=cls.FORMAT_CHECKER)
    issues = []
    try:
        for err in validator.iter_errors(document):
            issues.append(ValidationIssue(err.json_path, err.message, str(err.validator)))
    except _unresolvable() as e:  # an unresolvable $ref
        raise SchemaError(f"the schema cannot be used for validation: {e}", path="#") from None
    except (OverflowError, ValueError, TypeError) as e:
        raise SchemaError(f"the schema cannot be used for validation: {type(e).__name__}: {e}", path="#") from None
    issues.sort(key=lambda i: (i.path, i.keyword, i.message))
    return issues
