"""Validate a generated result against its JSON schema with ``jsonschema``: every problem with its path, never an
exception for a bad document.

Example:
    >>> validate('{"n": "x"}', {"type": "object", "properties": {"n": {"type": "integer"}}})
    [ValidationIssue(path='$.n', message="'x' is not of type 'integer'", keyword='type')]
    >>> validate('{"n": 1', {})[0].message.startswith("not valid JSON")
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import SchemaError

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


def validate(document: Any, schema: Any, *, parse: bool | None = None) -> list[ValidationIssue]:
    """Check ``document`` against ``schema`` (dict, JSON text or a pydantic model class).

    A ``str``/``bytes`` document is parsed as JSON text (``parse=False`` validates it as a JSON string value
    instead); anything else is taken as the parsed value. Returns the issues sorted by path (empty = valid).

    Raises SchemaError only when the schema itself is not a valid JSON schema.
    """
    import jsonschema

    from .json_schema._json import load

    value = load(schema)
    if parse is None:
        parse = isinstance(document, (str, bytes, bytearray))
    if parse:
        document, issue = _parse(document)
        if issue is not None:
            return [issue]
    if isinstance(value, bool):
        return [] if value else [ValidationIssue("$", "the schema false accepts nothing", "false")]
    cls = jsonschema.validators.validator_for(value, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(value)
    except jsonschema.SchemaError as e:
        raise SchemaError(f"not a valid JSON schema: {e.message}", path="#/" + "/".join(map(str, e.path))) from None
    validator = cls(value, format_checker=cls.FORMAT_CHECKER)
    issues = []
    try:
        for err in validator.iter_errors(document):
            issues.append(ValidationIssue(err.json_path, err.message, str(err.validator)))
    except (_unresolvable(), RecursionError) as e:  # an unresolvable $ref
        raise SchemaError(f"the schema cannot be used for validation: {e}", path="#") from None
    issues.sort(key=lambda i: (i.path, i.keyword, i.message))
    return issues
