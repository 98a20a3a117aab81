"""Reading a reply in a JSON tool-call format: reasoning, content and calls, as llama-server's PEG parser does.

The parser llama-server builds for these formats (``build_tool_parser_json_native``,
``common/chat-auto-parser-generator.cpp:196-238``) reads, after the generation prompt and any whitespace: an
optional reasoning block, the content up to the first tool marker (``{`` for Llama 3.x), then the calls, then only
whitespace. Each call object has its fields in the template's order (``"type": "function",`` may come first for
Llama 3.x; Mistral Nemo's optional ``id`` follows a comma that is required even without it, as in llama.cpp's
parser); the name must be a declared tool's, the arguments any JSON value (the schema is the grammar's business; we
validate afterwards). Where llama-server answers HTTP 500 (``does not match the expected peg-native format``) this
reader gives a :class:`ParseFailure` with the reason and the calls complete before it.

Example:
    >>> from constrained.chat.tool_formats import FORMATS
    >>> r = parse_json_tools('Ok {"name": "f", "parameters": {"a": 1}}', FORMATS["llama3"], {"f"}, parallel=False)
    >>> r.content, r.calls
    ('Ok ', [('f', '{"a": 1}', '')])
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field

from .tool_formats import ToolFormat

__all__ = ["JsonToolsReply", "ParseFailure", "parse_json_tools"]


class ParseFailure(ValueError):
    """The text does not follow the format (llama-server: HTTP 500); ``partial`` holds what parsed before."""

    def __init__(self, why: str, partial: JsonToolsReply) -> None:
        super().__init__(why)
        self.partial = partial


@dataclass
class JsonToolsReply:
    content: str = ""
    reasoning: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)    # (name, raw arguments, id as written)


_DEC = json.JSONDecoder()


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i].isspace():      # the parser's space(): any run of whitespace
        i += 1
    return i


def _expect(s: str, i: int, lit: str, what: str) -> int:
    if not s.startswith(lit, i):
        raise ValueError(f"expected {what} at {s[i:i + 40]!r}")
    return i + len(lit)


def _call(s: str, i: int, fmt: ToolFormat, names: Collection[str]) -> tuple[tuple[str, str, str], int]:
    i = _ws(s, _expect(s, i, "{", "'{'"))
    if fmt.openai_wrapper and s.startswith('"type"', i):
        j = _ws(s, i + 6)
        if s.startswith(":", j):
            j = _ws(s, j + 1)
            if s.startswith('"function"', j):
                j = _ws(s, j + 10)
                if s.startswith(",", j):
                    i = _ws(s, j + 1)
    name = args = cid = ""
    fields = [fmt.name_field, fmt.args_field] + ([fmt.id_field] if fmt.id_field else [])
    for k, key in enumerate(fields):
        if k:
            i = _ws(s, _expect(s, _ws(s, i), ",", "','"))
        if key == fmt.id_field and not s.startswith(f'"{key}"', i):
            continue                          # optional(id), after its comma
        i = _ws(s, _expect(s, i, f'"{key}"', f'"{key}"'))
        i = _ws(s, _expect(s, i, ":", "':'"))
        if key == fmt.name_field:
            for n in names:
                lit = f'"{n}"'                 # literal("\"") + literal(name) + literal("\""): the raw name
                if s.startswith(lit, i):
                    name, i = n, i + len(lit)
                    break
            else:
                raise ValueError(f"not a declared tool's name at {s[i:i + 40]!r}")
        elif key == fmt.args_field:
            _, end = _DEC.raw_decode(s, i)
            args, i = s[i:end].rstrip(), end
        else:
            if s.startswith('"', i):
                v, end = _DEC.raw_decode(s, i)
                cid, i = s[i + 1:end - 1], end
            else:
                v, end = _DEC.raw_decode(s, i)
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    raise ValueError("a call id must be a string or a number")
                cid, i = s[i:end], end
    i = _expect(s, _ws(s, i), "}", "'}'")
    return (name, args, cid), i


def _calls(s: str, i: int, fmt: ToolFormat, names: Collection[str], parallel: bool,
           out: list[tuple[str, str, str]]) -> int:
    if fmt.array_wrapped:
        i = _ws(s, _expect(s, i, "[", "'['"))
    c, i = _call(s, i, fmt, names)
    out.append(c)
    while parallel:
        j = _ws(s, i)
        if not s.startswith(",", j):
            break
        c, i = _call(s, _ws(s, j + 1), fmt, names)
        out.append(c)
    if fmt.array_wrapped:
        i = _expect(s, _ws(s, i), "]", "']'")
    return i


def parse_json_tools(text: str, fmt: ToolFormat, names: Collection[str], *, parallel: bool,
                     reasoning: bool = True, tools: bool = True) -> JsonToolsReply:
    """``text`` (the generated text, without the generation prompt) read in format ``fmt`` (``tools=False``: the
    content parser of ``tool_choice: "none"``, reasoning then the rest as content).

    Raises:
        ParseFailure: where llama-server's final parse fails (text after the calls, a malformed or cut-off call,
            an undeclared tool); ``.partial`` has the content and the calls complete before the failure.
    """
    out = JsonToolsReply()
    s, i = text, _ws(text, 0)
    if reasoning and fmt.reasoning:
        start, end = fmt.reasoning[0].strip(), fmt.reasoning[1].strip()
        if s.startswith(start, i):
            j = i + len(start)
            if s.startswith("\n", j):
                j += 1
            k = s.find(end, j)
            body = s[j:] if k < 0 else s[j:k]
            out.reasoning = body if body.strip() else ""
            if k < 0:
                return out
            i = k + len(end)
            for c in fmt.reasoning[1][fmt.reasoning[1].index(end) + len(end):]:
                if s.startswith(c, i):
                    i += 1
    if not tools:
        out.content = s[i:]
        return out
    start = fmt.tool_start
    k = s.find(start, i)
    if k < 0:
        out.content = s[i:]
        return out
    out.content = s[i:k]
    i = k
    per_call = not fmt.section_start and bool(fmt.per_call_start)
    try:
        if per_call:
            while True:
                i = _ws(s, _expect(s, i, fmt.per_call_start, repr(fmt.per_call_start)))
                block: list[tuple[str, str, str]] = []
                i = _calls(s, i, fmt, names, parallel, block)
                i = _expect(s, _ws(s, i), fmt.per_call_end, repr(fmt.per_call_end))
                out.calls += block              # a block counts once it is closed
                i = _ws(s, i)
                if i >= len(s):
                    break
        else:
            i = _ws(s, _expect(s, i, fmt.section_start, repr(fmt.section_start)))
            block = []
            i = _calls(s, i, fmt, names, parallel, block)
            i = _expect(s, _ws(s, i), fmt.section_end, repr(fmt.section_end))
            out.calls += block
            i = _ws(s, i)
            if i < len(s):
                raise ValueError(f"text after the tool calls: {s[i:i + 60]!r}")
    except (ValueError, IndexError) as e:
        why = str(e) if not isinstance(e, json.JSONDecodeError) else f"a tool call is not JSON (or is cut off): {e}"
        raise ParseFailure(why, out) from None
    return out
