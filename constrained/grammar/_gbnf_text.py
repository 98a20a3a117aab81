"""Text-level pieces of the GBNF parser: byte offsets to line/column, llama.cpp's ``parse_char`` (escapes and
its lenient UTF-8 decoding), literal and class decoding, and the exact error for a literal, class or token
reference the lexer could not delimit.

The text is a latin-1 ``str`` (one character per byte of the grammar), as ``gbnf.py`` lexes it.

Example:
    >>> parse_char("\\\\x41", 0), parse_char("\\xc3\\xa9", 0)
    ((65, 4), (233, 2))
"""

from __future__ import annotations

from ..errors import GrammarLimitError, GrammarSyntaxError
from .ir import Element, ElementType

_CHAR, _CHAR_NOT = int(ElementType.CHAR), int(ElementType.CHAR_NOT)
_RNG, _CHAR_ALT = int(ElementType.CHAR_RNG_UPPER), int(ElementType.CHAR_ALT)
_U64_MAX = (1 << 64) - 1


class Fail(Exception):
    """An error at a byte offset, turned into a GrammarSyntaxError with line/column by :func:`parse_gbnf`."""

    def __init__(self, message: str, pos: int, *, limit: bool = False) -> None:
        super().__init__(message)
        self.message, self.pos, self.limit = message, pos, limit


# ---------------------------------------------------------------------------------------------- positions

def to_bytes(text: str | bytes) -> bytes:
    """The bytes llama.cpp would see for ``text`` (UTF-8; ``surrogateescape`` round-trips decoded bytes)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def error_at(data: bytes, pos: int, message: str, *, limit: bool = False) -> GrammarSyntaxError:
    """A GrammarSyntaxError (or GrammarLimitError) for byte offset ``pos`` of ``data``: 1-based line and
    column (in characters; ``\\n``, ``\\r\\n`` and ``\\r`` end lines as in llama.cpp), source line and caret."""
    pos = max(0, min(pos, len(data)))
    head = data[:pos]
    line_start = max(head.rfind(b"\n"), head.rfind(b"\r")) + 1
    line = 1 + head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n")
    end = len(data)
    for sep in (b"\n", b"\r"):
        k = data.find(sep, pos)
        if k != -1:
            end = min(end, k)
    column = len(data[line_start:pos].decode("utf-8", "replace")) + 1
    source_line = data[line_start:end].decode("utf-8", "replace")
    cls = GrammarLimitError if limit else GrammarSyntaxError
    return cls(message, line=line, column=column, source_line=source_line)


def at(text: str, pos: int) -> str:
    """llama.cpp's ``"... at " + src`` suffix, shortened."""
    rest = text[pos:pos + 32]
    if not rest:
        return "at end of input"
    shown = rest.encode("latin-1").decode("utf-8", "replace")
    return f"at {shown!r}" + ("..." if len(text) - pos > 32 else "")


# ---------------------------------------------------------------------------------------------- characters

_UTF8_LEN = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}


def decode_utf8(text: str, i: int) -> tuple[int, int]:
    # as decode_utf8(const char *): no validation, stops at the end of the text
    b = ord(text[i])
    n = _UTF8_LEN[b >> 4]
    value = b & ((1 << (8 - n)) - 1)
    end = min(i + n, len(text))
    j = i + 1
    while j < end:
        value = (value << 6) + (ord(text[j]) & 0x3F)
        j += 1
    return value, j


def parse_hex(text: str, start: int, size: int) -> tuple[int, int]:
    # as parse_hex
    digits = text[start:start + size]
    if len(digits) != size or not _HEX.issuperset(digits):
        raise Fail(f"expecting {size} hex chars {at(text, start)}", start)
    return int(digits, 16), start + size


def parse_char(text: str, i: int) -> tuple[int, int]:
    # as parse_char
    c = text[i]
    if c == "\\":
        e = text[i + 1] if i + 1 < len(text) else ""
        if e == "x":
            return parse_hex(text, i + 2, 2)
        if e == "u":
            return parse_hex(text, i + 2, 4)
        if e == "U":
            return parse_hex(text, i + 2, 8)
        if e and e in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[e], i + 2
        raise Fail(f"unknown escape {at(text, i)}", i)
    if c < "\x80":
        return ord(c), i + 1
    return decode_utf8(text, i)


# decoded literals and classes by their text (a grammar's elements depend on the text alone; an error, which names
# a position, is never cached): the converter writes the same few again and again
_DECODED: dict[str, tuple[Element, ...]] = {}
_DECODED_MAX = 8192


def _remember(key: str, elements: tuple[Element, ...]) -> tuple[Element, ...]:
    if len(key) <= 256:
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()
        _DECODED[key] = elements
    return elements


def literal(text: str, start: int, end: int) -> tuple[Element, ...]:
    """The CHAR elements of the literal ``text[start:end]`` (quotes included)."""
    key = text[start:end]
    hit = _DECODED.get(key)
    if hit is not None:
        return hit
    return _remember(key, _literal(text, start, end))


def _literal(text: str, start: int, end: int) -> tuple[Element, ...]:
    inner = text[start + 1:end - 1]
    if "\\" not in inner and inner.isascii():
        return tuple((_CHAR, ord(c)) for c in inner)
    out = []
    i, stop = start + 1, end - 1
    while i < stop:
        cp, i = parse_char(text, i)
        out.append((_CHAR, cp))
    return tuple(out)


def char_class(text: str, start: int, end: int) -> tuple[Element, ...]:
    """The elements of the class ``text[start:end]``, laid out as parse_sequence's ``[`` branch does."""
    key = text[start:end]
    hit = _DECODED.get(key)
    if hit is not None:
        return hit
    return _remember(key, _char_class(text, start, end))


def _char_class(text: str, start: int, end: int) -> tuple[Element, ...]:
    i, stop = start + 1, end - 1
    first = _CHAR
    if i < stop and text[i] == "^":
        first = _CHAR_NOT
        i += 1
    out: list[Element] = []
    while i < stop:
        cp, i = parse_char(text, i)
        out.append((_CHAR_ALT if out else first, cp))
        if text[i] == "-" and text[i + 1] != "]":
            cp, i = parse_char(text, i + 1)
            out.append((_RNG, cp))
    return tuple(out)


def int_value(digits: str) -> int | None:
    """The integer value, or None beyond uint64 (std::stoull/stoul would throw out_of_range)."""
    s = digits.lstrip("0")
    if len(s) > 20:
        return None
    v = int(s or "0")
    return v if v <= _U64_MAX else None


# ---------------------------------------------------------------------------------------------- diagnostics

def scan_quoted(text: str, pos: int) -> Fail:
    """The exact llama.cpp error for a literal or class starting at ``pos`` that the lexer could not delimit."""
    n = len(text)
    close = '"' if text[pos] == '"' else "]"
    i = pos + 1
    if close == "]" and i < n and text[i] == "^":
        i += 1
    while i < n and text[i] != close:
        _, i = parse_char(text, i)
        if close == "]" and i < n and text[i] == "-" and (i + 1 >= n or text[i + 1] != "]"):
            if i + 1 >= n:
                break
            _, i = parse_char(text, i + 1)
    return Fail("unexpected end of input", min(i, n))


def scan_token(text: str, pos: int) -> Fail:
    """The exact llama.cpp error for a token reference at ``pos`` (parse_token) that the lexer rejected."""
    n = len(text)
    i = pos + 1 if text[pos] == "!" else pos
    if i >= n or text[i] != "<":
        return Fail(f"expecting '<' {at(text, i)}", i)
    i += 1
    if i < n and text[i] == "[":
        i += 1
        j = i
        while j < n and text[j].isdigit() and text[j].isascii():
            j += 1
        if j == i:
            return Fail(f"expecting integer {at(text, i)}", i)
        if j >= n or text[j] != "]":
            return Fail(f"expecting ']' {at(text, j)}", j)
        return Fail(f"expecting '>' {at(text, j + 1)}", j + 1)
    return Fail(f"expecting '>' {at(text, n)}", n)
