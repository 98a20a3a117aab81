"""llama.cpp's chat PEG parser for the JSON tool-call formats, lenient as llama-server runs it.

llama-server parses a chat reply with a PEG parser built from the template (``common/peg-parser.cpp``,
``common/chat-peg-parser.cpp``) and always in *lenient* mode (``common_chat_peg_parse``, ``common/chat.cpp:1447``):
input that ends inside a literal, a string or a number is "need more input", not a failure, so a partial reply maps
to a partial message (content so far, a tool call as soon as its name is complete, its raw arguments so far). The
stream's deltas are diffs between those messages, so reproducing them needs this parser, not a JSON decoder.

This module holds the combinators those formats use (literal, sequence, choice, repetition, space, until, string
content, JSON, atomic, tags and rules, end), each with the lenient semantics of ``parser_executor``
(peg-parser.cpp:247-800), the builder of the ``<tool_call>`` JSON-native parser
(``build_tool_parser_json_native`` / ``standard_json_tools`` / ``build_json_tools_flat_keys``) and the mapper
(``common_chat_peg_mapper::map``, chat-peg-parser.cpp:284-456).

Example:
    >>> from constrained.chat.tool_formats import FORMATS
    >>> p = json_native_parser(["get_weather"], FORMATS["hermes"], parallel=True, required=False)
    >>> m = parse_message(p, "<|im_start|>assistant\\n", 'Sure.<tool_call>\\n{"name": "get_weather", "arguments": {"ci')
    >>> m.content, m.tool_calls
    ('Sure.', [('get_weather', '{"ci', '')])
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChatMessage", "PegFail", "json_native_parser", "parse_message"]

SUCCESS, NEED_MORE, FAIL = 0, 1, 2
_SPACE = " \t\n\v\f\r"                       # std::isspace in the C locale

CONTENT, REASONING, TOOL, TOOL_OPEN, TOOL_CLOSE, TOOL_NAME, TOOL_ID, TOOL_ARGS = (
    "content", "reasoning", "tool", "tool-open", "tool-close", "tool-name", "tool-id", "tool-args")
TOOL_ARG_OPEN, TOOL_ARG_CLOSE, TOOL_ARG_NAME, TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE = (
    "tool-arg-open", "tool-arg-close", "tool-arg-name", "tool-arg-value", "tool-arg-string-value")


class PegFail(Exception):
    """The reply does not match the format (llama-server: ``The model produced output that does not match the
    expected peg-native format``)."""


@dataclass
class _Node:
    tag: str
    text: str
    children: list[_Node]


@dataclass
class _Res:
    type: int
    start: int
    end: int
    nodes: list[_Node] = field(default_factory=list)


class _P:
    def parse(self, s: str, pos: int) -> _Res:
        raise NotImplementedError


class _Eps(_P):
    def parse(self, s: str, pos: int) -> _Res:
        return _Res(SUCCESS, pos, pos)


class _End(_P):
    def parse(self, s: str, pos: int) -> _Res:
        return _Res(SUCCESS if pos >= len(s) else FAIL, pos, pos)


class _Lit(_P):
    def __init__(self, lit: str) -> None:
        self.lit = lit

    def parse(self, s: str, pos: int) -> _Res:
        # peg-parser.cpp:277: input ending inside the literal is NEED_MORE (lenient)
        n = len(self.lit)
        if s.startswith(self.lit, pos):
            return _Res(SUCCESS, pos, pos + n)
        avail = s[pos:]
        if len(avail) < n and self.lit.startswith(avail):
            return _Res(NEED_MORE, pos, len(s))
        return _Res(FAIL, pos, pos)


class _Seq(_P):
    def __init__(self, *children: _P) -> None:
        self.children = children

    def parse(self, s: str, pos: int) -> _Res:
        start, nodes = pos, []
        for c in self.children:
            r = c.parse(s, pos)
            if r.type == FAIL:
                return _Res(FAIL, start, r.end)
            nodes.extend(r.nodes)
            if r.type == NEED_MORE:
                return _Res(NEED_MORE, start, r.end, nodes)
            pos = r.end
        return _Res(SUCCESS, start, pos, nodes)


class _Choice(_P):
    def __init__(self, *children: _P) -> None:
        self.children = children

    def parse(self, s: str, pos: int) -> _Res:
        for c in self.children:
            r = c.parse(s, pos)
            if r.type != FAIL:
                return r
        return _Res(FAIL, pos, pos)


class _Rep(_P):
    def __init__(self, child: _P, lo: int, hi: int) -> None:
        self.child, self.lo, self.hi = child, lo, hi

    def parse(self, s: str, pos: int) -> _Res:
        # peg-parser.cpp:386-470: stop at end of input, on an empty match, or on a failing child
        start, nodes, n = pos, [], 0
        while self.hi == -1 or n < self.hi:
            if pos >= len(s):
                break
            r = self.child.parse(s, pos)
            if r.type == SUCCESS:
                if r.end == pos:
                    break
                nodes.extend(r.nodes)
                pos = r.end
                n += 1
                continue
            if r.type == NEED_MORE:
                nodes.extend(r.nodes)
                return _Res(NEED_MORE, start, r.end, nodes)
            break
        if self.lo > 0 and n < self.lo:
            if pos >= len(s):
                return _Res(NEED_MORE, start, pos, nodes)
            return _Res(FAIL, start, pos)
        return _Res(SUCCESS, start, pos, nodes)


class _Space(_P):
    def parse(self, s: str, pos: int) -> _Res:
        end = pos
        while end < len(s) and s[end] in _SPACE:
            end += 1
        return _Res(SUCCESS, pos, end)


class _Until(_P):
    """``until`` over one or more delimiters (a trie's ``check_at``): stops before a complete delimiter or before a
    prefix of one that reaches the end of the input; at the end of the input it needs more (lenient)."""

    def __init__(self, *delims: str) -> None:
        self.delims = [d for d in delims if d]

    def parse(self, s: str, pos: int) -> _Res:
        start = pos
        while pos < len(s):
            rest = s[pos:]
            for d in self.delims:
                if rest.startswith(d) or (len(rest) < len(d) and d.startswith(rest)):
                    return _Res(SUCCESS, start, pos)
            pos += 1
        return _Res(NEED_MORE, start, pos)


class _Chars(_P):
    """``chars`` for the ASCII classes of the JSON number rule."""

    def __init__(self, allowed: str, lo: int, hi: int) -> None:
        self.allowed, self.lo, self.hi = allowed, lo, hi

    def parse(self, s: str, pos: int) -> _Res:
        start, n = pos, 0
        while (self.hi == -1 or n < self.hi) and pos < len(s) and s[pos] in self.allowed:
            pos += 1
            n += 1
        if n >= self.lo:
            return _Res(SUCCESS, start, pos)
        if pos >= len(s):
            return _Res(NEED_MORE, start, pos)
        return _Res(FAIL, start, pos)


class _Not(_P):
    def __init__(self, child: _P) -> None:
        self.child = child

    def parse(self, s: str, pos: int) -> _Res:
        r = self.child.parse(s, pos)
        if r.type == SUCCESS:
            return _Res(FAIL, pos, pos)
        if r.type == NEED_MORE:
            return _Res(NEED_MORE, pos, pos)
        return _Res(SUCCESS, pos, pos)


class _StrContent(_P):
    """``string_content``: up to (not including) the delimiter, JSON escapes checked; incomplete escapes at the end
    of the input are held back (peg-parser.cpp:580-640)."""

    def __init__(self, delim: str) -> None:
        self.delim = delim

    def parse(self, s: str, pos: int) -> _Res:
        start = pos
        while pos < len(s):
            c = s[pos]
            if c == self.delim:
                return _Res(SUCCESS, start, pos)
            if c == "\\":
                if pos + 1 >= len(s):
                    return _Res(NEED_MORE, start, pos)
                e = s[pos + 1]
                if e in (self.delim, "\\", "/", "b", "f", "n", "r", "t"):
                    pos += 2
                    continue
                if e == "u":
                    hexpart = s[pos + 2:pos + 6]
                    if not all(h in "0123456789abcdefABCDEF" for h in hexpart):
                        return _Res(FAIL, start, start)
                    if len(hexpart) < 4:
                        return _Res(NEED_MORE, start, pos)
                    pos += 6
                    continue
                return _Res(FAIL, start, start)
            pos += 1
        return _Res(NEED_MORE, start, pos)


class _Wrap(_P):
    """A tag (``tag``) or a rule (``rule``: tag ""): wraps the child's nodes in one AST node, partial included."""

    def __init__(self, tag: str, child: _P) -> None:
        self.tag, self.child = tag, child

    def parse(self, s: str, pos: int) -> _Res:
        r = self.child.parse(s, pos)
        if r.type == FAIL:
            return r
        node = _Node(self.tag, s[r.start:r.end], r.nodes)
        return _Res(r.type, r.start, r.end, [node])


class _Atomic(_P):
    def __init__(self, child: _P) -> None:
        self.child = child

    def parse(self, s: str, pos: int) -> _Res:
        r = self.child.parse(s, pos)
        if r.type == NEED_MORE:
            return _Res(NEED_MORE, r.start, r.end)
        return r


class _Ref(_P):
    def __init__(self) -> None:
        self.target: _P | None = None

    def parse(self, s: str, pos: int) -> _Res:
        assert self.target is not None
        return self.target.parse(s, pos)


def _rule(child: _P) -> _P:
    return _Wrap("", child)


def _opt(p: _P) -> _P:
    return _Rep(p, 0, 1)


def _json() -> _P:
    """``common_peg_parser_builder::json()`` (peg-parser.cpp:1220-1296)."""
    value = _Ref()
    ws = _Space()
    string = _rule(_Seq(_Lit('"'), _StrContent('"'), _Lit('"')))
    number = _json_number()
    member = _Seq(string, ws, _Lit(":"), ws, value)
    obj = _rule(_Seq(_Lit("{"), ws, _Choice(_Lit("}"), _Seq(member, _Rep(_Seq(ws, _Lit(","), ws, member), 0, -1),
                                                           ws, _Lit("}")))))
    arr = _rule(_Seq(_Lit("["), ws, _Choice(_Lit("]"), _Seq(value, _Rep(_Seq(ws, _Lit(","), ws, value), 0, -1),
                                                           ws, _Lit("]")))))
    value.target = _rule(_Choice(obj, arr, string, number, _rule(_Choice(_Lit("true"), _Lit("false"))),
                                 _rule(_Lit("null"))))
    return value


def json_native_parser(tool_names: list[str], fmt: Any, *, parallel: bool, required: bool,
                       reasoning: bool = True) -> _P:
    """The parser ``build_tool_parser_json_native`` builds for a :class:`~constrained.chat.tool_formats.ToolFormat`
    (chat-auto-parser-generator.cpp:196-238): reasoning (thinking tags) when the format has it, content up to the
    tool start, then the calls, then the end of the input.

    Per-call markers (Qwen 2.5, Qwen 3, Hermes): the blocks repeat; otherwise one section (Mistral Nemo's
    ``[TOOL_CALLS]`` array, or Llama 3.x's bare object starting at ``{``).
    """
    js = _json()
    choices = []
    for name in tool_names:
        name_p = _Seq(_Lit(f'"{fmt.name_field}"'), _Space(), _Lit(":"), _Space(),
                      _Atomic(_Seq(_Lit('"'), _Atomic(_Wrap(TOOL_NAME, _Lit(name))), _Lit('"'))))
        args_p = _Seq(_Lit(f'"{fmt.args_field}"'), _Space(), _Lit(":"), _Space(), _Wrap(TOOL_ARGS, js))
        pairs: list[_P] = [name_p, args_p]
        if fmt.id_field:                     # build_json_tools_flat_keys: an optional id after a mandatory ","
            pairs.append(_opt(_Atomic(_Seq(_Lit(f'"{fmt.id_field}"'), _Space(), _Lit(":"), _Space(), _Choice(
                _Seq(_Lit('"'), _Atomic(_Wrap(TOOL_ID, _StrContent('"'))), _Lit('"')),
                _Atomic(_Wrap(TOOL_ID, _json_number())))))))
        parts: list[_P] = [_Atomic(_Wrap(TOOL_OPEN, _Lit("{"))), _Space()]
        if fmt.openai_wrapper:
            parts.append(_opt(_Seq(_Lit('"type"'), _Space(), _Lit(":"), _Space(), _Lit('"function"'), _Space(),
                                   _Lit(","), _Space())))
        for i, pp in enumerate(pairs):
            parts.append(pp)
            if i < len(pairs) - 1:
                parts += [_Space(), _Lit(","), _Space()]
        parts += [_Space(), _Atomic(_Wrap(TOOL_CLOSE, _Lit("}")))]
        choices.append(_rule(_Wrap(TOOL, _Seq(*parts))))
    calls: _P = _Choice(*choices)
    if parallel:
        calls = _Seq(calls, _Rep(_Seq(_Space(), _Lit(","), _Space(), _Choice(*choices)), 0, -1))
    if fmt.array_wrapped:
        calls = _Seq(_Lit("["), _Space(), calls, _Space(), _Lit("]"))
    per_call = not fmt.section_start and bool(fmt.per_call_start)
    start, end = (fmt.per_call_start, fmt.per_call_end) if per_call else (fmt.section_start, fmt.section_end)
    section: _P = _rule(_Seq(_Lit(start), _Space(), calls, _Space(), _Lit(end)))
    single = section if required else _opt(section)
    tools = _rule(_Rep(_Seq(single, _Space()), 1, -1)) if per_call else single
    return _Seq(_reasoning(fmt) if reasoning else _Eps(), _opt(_Wrap(CONTENT, _Until(fmt.tool_start))), tools,
                _End())


def _reasoning(fmt: Any) -> _P:
    """``analyze_reasoning::build_parser`` for thinking tags: ``optional(optspace(start) reasoning(until(end))
    optspace(end))`` (each whitespace character around a tag optional)."""
    if not fmt.reasoning:
        return _Eps()
    start, end = fmt.reasoning

    def optspace(tag: str) -> _P:
        core = tag.strip(_SPACE)
        i = tag.index(core) if core else len(tag)
        return _Seq(*[_opt(_Lit(c)) for c in tag[:i]], _Lit(core), *[_opt(_Lit(c)) for c in tag[i + len(core):]])

    return _opt(_Seq(optspace(start), _Wrap(REASONING, _Until(end.strip(_SPACE))), optspace(end)))


def _json_number() -> _P:
    digits = _Chars("0123456789", 0, -1)
    return _rule(_Seq(_opt(_Lit("-")), _Choice(_Lit("0"), _Seq(_Chars("123456789", 1, 1), digits)),
                      _opt(_Seq(_Lit("."), _Chars("0123456789", 1, -1))),
                      _opt(_Seq(_Choice(_Lit("e"), _Lit("E")), _opt(_Chars("+-", 1, 1)),
                                _Chars("0123456789", 1, -1))),
                      _Not(_Chars("0123456789.eE+-", 1, 1))))


@dataclass
class ChatMessage:
    """``common_chat_msg`` as the mapper fills it: content, reasoning, tool calls as (name, arguments, id)."""

    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.content or self.reasoning_content or self.tool_calls)


def _brace_depth(s: str) -> int:
    depth, in_str, esc = 0, False, False
    for c in s:
        if esc:
            esc = False
            continue
        if c == "\\" and in_str:
            esc = True
            continue
        if c == '"':
            in_str = not in_str
        elif not in_str:
            depth += c == "{"
            depth -= c == "}"
    return depth


class _Mapper:
    """``common_chat_peg_mapper`` for the JSON formats (content, reasoning, tool open / name / id / args / close)."""

    def __init__(self) -> None:
        self.msg = ChatMessage()
        self.pending: list[str] | None = None      # [name, arguments, id] of the call being read
        self.current: list[str] | None = None
        self.calls: list[list[str]] = []
        self.args_buffer = ""
        self.arg_count = 0                           # the tagged (XML) formats' arguments
        self.quote_pending = False

    def _target_get(self) -> str:
        return self.current[1] if self.current is not None and self.current[0] else self.args_buffer

    def _target_set(self, v: str) -> None:
        if self.current is not None and self.current[0]:
            self.current[1] = v
        else:
            self.args_buffer = v

    def visit(self, node: _Node) -> None:
        t = node.tag
        if t == REASONING:
            self.msg.reasoning_content += node.text
        elif t == CONTENT:
            self.msg.content += node.text
        elif t == TOOL_OPEN:
            self.pending = ["", "", ""]
            self.current = self.pending
            self.args_buffer = ""
            self.arg_count = 0
            self.quote_pending = False
        elif t == TOOL_ARG_OPEN:
            self.quote_pending = False
        elif t == TOOL_ARG_NAME and self.current is not None:
            # "name": (a leading whitespace character and the trailing ones trimmed), comma-separated
            name = node.text[1:] if node.text[:1] in _SPACE and node.text else node.text
            entry = ("," if self.arg_count else "") + json.dumps(name.rstrip(_SPACE), ensure_ascii=False) + ":"
            self.arg_count += 1
            self._target_set((self._target_get() or "{") + entry)
        elif t in (TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE) and self.current is not None:
            v = node.text
            add = ""
            if t == TOOL_ARG_STRING_VALUE:
                if not self.quote_pending:
                    add = '"'
                    self.quote_pending = True
                add += json.dumps(v, ensure_ascii=False)[1:-1]
            elif v:
                add = v      # normalize_quotes_to_json: identity on the JSON the value parser accepts
            self._target_set(self._target_get() + add)
        elif t == TOOL_ARG_CLOSE and self.current is not None:
            if self.quote_pending:
                self._target_set(self._target_get() + '"')
                self.quote_pending = False
        elif t == TOOL_ID and self.current is not None:
            text = node.text.rstrip(_SPACE)
            if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
                text = text[1:-1]
            self.current[2] = text
        elif t == TOOL_NAME and self.current is not None:
            self.current[0] = node.text.rstrip(_SPACE)
            if self.args_buffer:
                self.current[1] = self.args_buffer
                self.args_buffer = ""
            elif not self.current[1]:
                self.current[1] = "{"
            if self.pending is not None:
                self.calls.append(self.pending)
                self.pending = None
                self.current = self.calls[-1]
        elif t == TOOL_ARGS and self.current is not None:
            text = node.text.rstrip(_SPACE)
            if text.startswith("{"):
                if self.current[0]:
                    self.current[1] = text
                else:
                    self.args_buffer = text
        elif t == TOOL_CLOSE and self.current is not None:
            if not self.current[0] and self.args_buffer:
                self.current[1] = self.args_buffer
                self.args_buffer = ""
            if self.quote_pending:
                self.current[1] += '"'
                self.quote_pending = False
            self.current[1] += "}" * max(0, _brace_depth(self.current[1]))
            if self.pending is not None:
                if self.current[0]:
                    self.calls.append(self.pending)
                self.pending = None
        for c in node.children:
            self.visit(c)

    def finish(self) -> ChatMessage:
        if self.pending is not None and self.pending[0]:
            if self.args_buffer:
                self.pending[1] = self.args_buffer
            if self.quote_pending and self.pending[1]:
                self.pending[1] += '"'
            self.calls.append(self.pending)
        self.msg.tool_calls = [(n, a, i) for n, a, i in self.calls]
        if self.msg.reasoning_content and not self.msg.reasoning_content.strip(" \n\r\t"):
            self.msg.reasoning_content = ""
        return self.msg


def parse_message(parser: _P, generation_prompt: str, text: str, *, is_partial: bool = False,
                  reasoning_start: str = "") -> ChatMessage:
    """``common_chat_peg_parse``: the message for ``text`` (the generated text). The parser sees the generation
    prompt first: its part before the thinking tag (``prefix(generation_prompt, reasoning_start)``), optional
    whitespace (``<<``), then ``parser`` on the rest.

    Raises:
        PegFail: where llama-server throws (a final parse that fails, or a partial one that fails at the start).
    """
    s = generation_prompt + text
    rs = reasoning_start.strip(_SPACE)
    prefix = generation_prompt
    if rs and rs in generation_prompt:
        prefix = generation_prompt[:generation_prompt.index(rs)]
    root = _Seq(_Lit(prefix) if prefix else _Eps(), _Space(), parser)
    r = root.parse(s, 0)
    if r.type == FAIL:
        if is_partial and r.end > 0:
            return ChatMessage()                 # a FAIL carries no nodes: an empty message (no update)
        raise PegFail("The model produced output that does not match the expected peg-native format")
    m = _Mapper()
    for n in r.nodes:
        m.visit(n)
    return m.finish()
