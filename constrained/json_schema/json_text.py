"""JSON values as llama.cpp's ``common_json`` (nlohmann::ordered_json) sees them.

Loading (dict, JSON text, bytes or a pydantic model class), nlohmann's number model (int64 / uint64 / double, an
integer literal out of those ranges becomes a double), its compact ``dump()`` (Grisu2-style shortest doubles printed
with nlohmann's own layout), and the C++ integer conversions the schema builder relies on (``get<int>``,
``get<int64_t>``, a double cast to ``int64_t``).

Strings inside the converter are *byte strings* held in ``str`` (one character per UTF-8 byte, ``latin-1``), because
llama.cpp works on bytes: rule names, regex patterns and the ``std::map`` order are all bytewise. ``b()`` and ``u()``
convert between the two.

Example:
    >>> dump({"a": [1, 2.0, 1e15, "x\\n"]})
    '{"a":[1,2.0,1e+15,"x\\\\n"]}'
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import SchemaError

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
INT_MAX = (1 << 31) - 1

MAX_JSON_VALUES = 500_000
"""Most JSON values (objects, arrays, scalars) in a schema: a dict that shares sub-dicts is counted expanded, as its
JSON text would be."""
MAX_JSON_DEPTH = 400
"""Deepest nesting of JSON values accepted (deeper input is refused with a SchemaError, never a RecursionError)."""


def b(text: str) -> str:
    """A Unicode string as its UTF-8 bytes, one ``str`` character per byte."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1")


def u(raw: str) -> str:
    """Back from bytes-in-``str`` to Unicode; bytes that are not valid UTF-8 are kept as surrogate escapes."""
    return raw.encode("latin-1").decode("utf-8", "surrogateescape")


def wrap_int(value: int, bits: int) -> int:
    """Two's complement truncation, as a C++ integral conversion does on gcc."""
    mask = (1 << bits) - 1
    value &= mask
    return value - (1 << bits) if value >> (bits - 1) else value


def double_to_int64(value: float) -> int:
    """``(int64_t) d`` on x86-64 (``cvttsd2si``): out of range or NaN gives INT64_MIN."""
    if math.isnan(value) or not (-9.223372036854775808e18 <= value < 9.223372036854775808e18):
        return INT64_MIN
    return int(value)


def is_integer(value: Any) -> bool:
    """nlohmann ``is_number_integer()``: a signed or unsigned 64-bit integer (bools are not numbers)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return is_integer(value) or isinstance(value, float)


def value_type(v: Any, fraction: str = "number") -> str:
    """The JSON type of a value, an integer-valued float counting as "integer" (``fraction`` names the others).

    >>> value_type(2.0), value_type(2.5), value_type(2.5, "fraction"), value_type([])
    ('integer', 'number', 'fraction', 'array')
    """
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return fraction
    return "string" if isinstance(v, str) else "array" if isinstance(v, list) else "object"


def _parse_int(text: str) -> int | float:
    value = int(text)
    return value if INT64_MIN <= value <= UINT64_MAX else _parse_float(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number overflow parsing '{text}'")  # nlohmann refuses it too
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _Overflow(Exception):
    """An integer beyond a double (caught by ``load``, which finds its path)."""


def path_of(value: Any, target: Any, path: str = "#", depth: int = 0) -> str | None:
    if value is target:
        return path
    if depth > MAX_JSON_DEPTH:
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for k, v in items:
        found = path_of(v, target, f"{path}/{k}", depth + 1)
        if found is not None:
            return found
    return None


def normalize(value: Any, depth: int = 0, budget: list[int] | None = None, exact: bool = False) -> Any:
    """A Python value as the JSON value nlohmann would hold after parsing its dump (ints out of the 64-bit ranges
    become doubles). Raises SchemaError for anything that is not JSON, or larger than the limits."""
    if budget is None:
        budget = [MAX_JSON_VALUES]
    budget[0] -= 1
    if budget[0] < 0:
        raise SchemaError(f"JSON schema is too large (more than {MAX_JSON_VALUES} JSON values)", path="#")
    if depth > MAX_JSON_DEPTH:
        raise SchemaError(f"JSON schema nesting is deeper than {MAX_JSON_DEPTH} levels", path="#")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if exact or INT64_MIN <= value <= UINT64_MAX:
            return value
        budget.append(value)  # remembered: the schema holds an integer nlohmann reads as a double
        try:
            return float(value)  # nlohmann reads an integer beyond 64 bits as a double
        except OverflowError:
            raise _Overflow(value) from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SchemaError(f"JSON schema contains {value!r}, which is not JSON", path="#")
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise SchemaError(f"JSON schema is not valid JSON: a string is not valid Unicode ({e})",
                              path="#") from None
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SchemaError(f"JSON schema object keys must be strings, got {k!r}", path="#")
            out[normalize(k, depth + 1, budget, exact)] = normalize(v, depth + 1, budget, exact)
        return out
    if isinstance(value, (list, tuple)):
        return [normalize(v, depth + 1, budget, exact) for v in value]
    raise SchemaError(f"JSON schema contains a {type(value).__name__}, which is not JSON", path="#")


def load(schema: Any, exact: bool = False, widened: list[int] | None = None) -> Any:
    """A schema given as a dict (any JSON value), JSON text (str or bytes) or a pydantic model class, as a
    normalised JSON value (``exact``: integers kept as they are; ``widened`` receives the integers read as doubles).

    >>> load('{"type": "integer", "maximum": 99999999999999999999}')
    {'type': 'integer', 'maximum': 1e+20}
    """
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()  # a pydantic v2 model class; pydantic itself is never imported here
    elif hasattr(schema, "json_schema") and callable(schema.json_schema) and not isinstance(schema, (dict, str)):
        schema = schema.json_schema()  # a pydantic TypeAdapter
    if isinstance(schema, (bytes, bytearray)):
        try:
            schema = bytes(schema).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemaError(f"JSON schema is not valid UTF-8: {e}", path="#") from None
    if isinstance(schema, str):
        try:
            def parse_int(text: str) -> int | float:
                value = _parse_int(text)
                if isinstance(value, float) and widened is not None:
                    widened.append(int(text))
                return value

            schema = json.loads(schema, parse_int=int if exact else parse_int, parse_float=_parse_float,
                                parse_constant=_reject_constant)
        except (ValueError, RecursionError) as e:
            raise SchemaError(f"JSON schema is not valid JSON: {e}", path="#") from None
    budget = [MAX_JSON_VALUES]
    try:
        out = normalize(schema, budget=budget, exact=exact)
        if widened is not None:
            widened.extend(budget[1:])
        return out
    except _Overflow as e:
        where = path_of(schema, e.args[0]) or "#"
        digits = len(str(abs(e.args[0])))
        raise SchemaError(f"JSON schema error at {where}: a {digits}-digit integer is beyond a double (nlohmann reads "
                          "integers beyond 64 bits as doubles: 'number overflow')", path=where) from None


# ---- nlohmann dump() ----------------------------------------------------------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def dump_string(s: str) -> str:
    out = []
    for ch in s:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def dump_float(x: float) -> str:
    """nlohmann ``dump_float``: shortest round-trip digits laid out by ``format_buffer(min_exp=-4, max_exp=15)``."""
    if not math.isfinite(x):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    x = abs(x)
    if x == 0:
        return sign + "0.0"
    digits, n = _shortest_digits(x)
    k = len(digits)
    if k <= n <= 15:
        body = digits + "0" * (n - k) + ".0"
    elif 0 < n <= 15:
        body = digits[:n] + "." + digits[n:]
    elif -4 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mant = digits if k == 1 else digits[0] + "." + digits[1:]
        body = f"{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    return sign + body


def _shortest_digits(x: float) -> tuple[str, int]:
    """(digits, n) with x = 0.digits * 10**n, from nlohmann's Grisu2 (see _grisu)."""
    from ._grisu import grisu2

    return grisu2(x)


def dump(value: Any) -> str:
    """nlohmann ``ordered_json::dump()`` (compact, UTF-8 kept as is), as a Unicode string."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return dump_float(value)
    if isinstance(value, str):
        return dump_string(value)
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return "{" + ",".join(dump_string(k) + ":" + dump(v) for k, v in value.items()) + "}"
