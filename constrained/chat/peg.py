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
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChatMessage", "MessageStream", "PegFail", "PegStream", "json_native_parser", "parse_message"]

SUCCESS, NEED_MORE, FAIL = 0, 1, 2
_SPACE = " \t\n\v\f\r"                       # std::isspace in the C locale
_SPACE_RUN = re.compile(r"[ \t\n\v\f\r]*")
_HEX = "0123456789abcdefABCDEF"

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
    stable: bool = field(default=False, compare=False)     # its text holds for every extension of the input
    rule: str = ""                 # the rule's name for a rule's node (llama.cpp's ``common_peg_ast_node::rule``)
    partial: bool = False          # ``is_partial``: the child needed more input


class _Res:
    """One parse result: its type, the span, the AST nodes, and ``hi``: the furthest index of the input it depended
    on (reading ``s[i]`` or finding ``i`` at the end). ``hi < len(s)`` means the result holds for every extension
    of ``s`` (it is *stable*); otherwise the parser that made it keeps a checkpoint to resume from."""

    __slots__ = ("type", "start", "end", "nodes", "hi")

    def __init__(self, type: int, start: int, end: int, nodes: Any = (), hi: int = -1) -> None:
        self.type, self.start, self.end, self.nodes, self.hi = type, start, end, nodes, hi


class _Ctx:
    """One parse of ``s``: the checkpoints of the previous parse (``old``, made on a prefix of ``s``), the ones this
    parse leaves for the next (``new``: one per parser and position whose result was not stable), and ``steps``
    (parser calls plus characters scanned: the work counter)."""

    __slots__ = ("s", "n", "old", "new", "steps")

    def __init__(self, s: str, old: dict[Any, Any]) -> None:
        self.s, self.n, self.old, self.new, self.steps = s, len(s), old, {}, 0


class _P:
    def parse(self, c: _Ctx, pos: int) -> _Res:
        raise NotImplementedError


class _Eps(_P):
    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        return _Res(SUCCESS, pos, pos)


class _End(_P):
    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        return _Res(SUCCESS if pos >= c.n else FAIL, pos, pos, (), pos)


class _Lit(_P):
    def __init__(self, lit: str) -> None:
        self.lit = lit

    def parse(self, c: _Ctx, pos: int) -> _Res:
        # peg-parser.cpp:277: input ending inside the literal is NEED_MORE (lenient)
        s, lit, n = c.s, self.lit, len(self.lit)
        c.steps += 1 + n
        if s.startswith(lit, pos):
            return _Res(SUCCESS, pos, pos + n, (), pos + n - 1)
        if c.n - pos < n and lit.startswith(s[pos:]):
            return _Res(NEED_MORE, pos, c.n, (), c.n)
        return _Res(FAIL, pos, pos, (), min(pos + n, c.n) - 1)


class _Seq(_P):
    def __init__(self, *children: _P) -> None:
        self.children = children

    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        ck = c.old.get((self, pos))
        if ck is None:
            k, p, nodes, hi = 0, pos, [], -1
        else:
            k, p, nodes, hi = ck
            nodes = list(nodes)
        n = c.n
        ck = (k, p, len(nodes), hi)
        children = self.children
        res = None
        for i in range(k, len(children)):
            r = children[i].parse(c, p)
            if r.hi > hi:
                hi = r.hi
            if r.type == FAIL:
                res = _Res(FAIL, pos, r.end, (), hi)
                break
            nodes.extend(r.nodes)
            if r.type == NEED_MORE:
                res = _Res(NEED_MORE, pos, r.end, nodes, hi)
                break
            p = r.end
            if hi < n:
                ck = (i + 1, p, len(nodes), hi)
        if res is None:
            res = _Res(SUCCESS, pos, p, nodes, hi)
        if hi >= n:
            c.new[(self, pos)] = (ck[0], ck[1], nodes[:ck[2]], ck[3])
        return res


class _Choice(_P):
    def __init__(self, *children: _P) -> None:
        self.children = children

    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        ck = c.old.get((self, pos))
        k, hi = ck if ck is not None else (0, -1)
        n = c.n
        ck_k, ck_hi = k, hi
        res = None
        for i in range(k, len(self.children)):
            r = self.children[i].parse(c, pos)
            if r.hi > hi:
                hi = r.hi
            if r.type != FAIL:
                r.hi = hi
                res = r
                break
            if hi < n:
                ck_k, ck_hi = i + 1, hi
        if res is None:
            res = _Res(FAIL, pos, pos, (), hi)
        if hi >= n:
            c.new[(self, pos)] = (ck_k, ck_hi)
        return res


class _Rep(_P):
    def __init__(self, child: _P, lo: int, hi: int) -> None:
        self.child, self.lo, self.hi = child, lo, hi

    def parse(self, c: _Ctx, pos: int) -> _Res:
        # peg-parser.cpp:386-470: stop at end of input, on an empty match, or on a failing child
        c.steps += 1
        ck = c.old.get((self, pos))
        if ck is None:
            cnt, p, nodes, hi = 0, pos, [], -1
        else:
            cnt, p, nodes, hi = ck
            nodes = list(nodes)
        n = c.n
        ck = (cnt, p, len(nodes), hi)
        res = None
        while self.hi == -1 or cnt < self.hi:
            if p >= n:
                hi = max(hi, n)
                break
            r = self.child.parse(c, p)
            if r.hi > hi:
                hi = r.hi
            if r.type == SUCCESS:
                if r.end == p:
                    break
                nodes.extend(r.nodes)
                p = r.end
                cnt += 1
                if hi < n:
                    ck = (cnt, p, len(nodes), hi)
                continue
            if r.type == NEED_MORE:
                nodes.extend(r.nodes)
                res = _Res(NEED_MORE, pos, r.end, nodes, hi)
            break
        if res is None:
            if self.lo > 0 and cnt < self.lo:
                if p >= n:
                    hi = max(hi, n)
                    res = _Res(NEED_MORE, pos, p, nodes, hi)
                else:
                    res = _Res(FAIL, pos, p, (), hi)
            else:
                res = _Res(SUCCESS, pos, p, nodes, hi)
        if hi >= n:
            c.new[(self, pos)] = (ck[0], ck[1], nodes[:ck[2]], ck[3])
        return res


class _Space(_P):
    def parse(self, c: _Ctx, pos: int) -> _Res:
        e = c.old.get((self, pos), pos)
        end = _SPACE_RUN.match(c.s, e).end()
        c.steps += 1 + end - e
        if end >= c.n:
            c.new[(self, pos)] = end
            return _Res(SUCCESS, pos, end, (), c.n)
        return _Res(SUCCESS, pos, end, (), end)


class _Until(_P):
    """``until`` over one or more delimiters (a trie's ``check_at``): stops before a complete delimiter or before a
    prefix of one that reaches the end of the input; at the end of the input it needs more (lenient)."""

    def __init__(self, *delims: str) -> None:
        self.delims = [d for d in delims if d]

    def parse(self, c: _Ctx, pos: int) -> _Res:
        s, n = c.s, c.n
        e = c.old.get((self, pos), pos)
        best, full_hi = n, -1              # the first stop at or after e; full_hi >= 0: a complete delimiter there
        for d in self.delims:
            q = s.find(d, e, best + len(d))
            if q != -1 and q <= best:
                if q < best:
                    best, full_hi = q, -1
                full_hi = max(full_hi, q + len(d) - 1)
            for q in range(max(e, n - len(d) + 1), min(best, n)):
                if d.startswith(s[q:]):             # a prefix of d reaches the end of the input
                    best, full_hi = q, -1
                    break
        c.steps += 1 + best - e
        if best >= n:
            c.new[(self, pos)] = n
            return _Res(NEED_MORE, pos, n, (), n)
        if full_hi >= 0:
            return _Res(SUCCESS, pos, best, (), full_hi)
        c.new[(self, pos)] = best
        return _Res(SUCCESS, pos, best, (), n)


class _Chars(_P):
    """``chars`` for the ASCII classes of the JSON number rule."""

    def __init__(self, allowed: str, lo: int, hi: int) -> None:
        self.allowed, self.lo, self.hi = allowed, lo, hi
        cls = "[" + "".join("\\" + ch if ch in "\\]^-[" else ch for ch in allowed) + "]"
        self.run = re.compile(cls + ("*" if hi == -1 else f"{{0,{hi}}}"))

    def parse(self, c: _Ctx, pos: int) -> _Res:
        e = c.old.get((self, pos), pos) if self.hi == -1 else pos
        end = self.run.match(c.s, e).end()
        c.steps += 1 + end - e
        cnt = end - pos
        stopped = end < c.n and (self.hi == -1 or cnt < self.hi)     # stopped on a character it refused
        hi = end if stopped else (c.n if end >= c.n and (self.hi == -1 or cnt < self.hi) else end - 1)
        if hi >= c.n and self.hi == -1:
            c.new[(self, pos)] = end
        if cnt >= self.lo:
            return _Res(SUCCESS, pos, end, (), hi)
        if end >= c.n:
            return _Res(NEED_MORE, pos, end, (), c.n)
        return _Res(FAIL, pos, end, (), hi)


class _Not(_P):
    def __init__(self, child: _P) -> None:
        self.child = child

    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        r = self.child.parse(c, pos)
        if r.type == SUCCESS:
            return _Res(FAIL, pos, pos, (), r.hi)
        if r.type == NEED_MORE:
            return _Res(NEED_MORE, pos, pos, (), r.hi)
        return _Res(SUCCESS, pos, pos, (), r.hi)


class _StrContent(_P):
    """``string_content``: up to (not including) the delimiter, JSON escapes checked; incomplete escapes at the end
    of the input are held back (peg-parser.cpp:580-640)."""

    def __init__(self, delim: str) -> None:
        self.delim = delim
        self.plain = re.compile("[^" + ("\\" + delim if delim in "\\]^-[" else delim) + "\\\\]*")

    def parse(self, c: _Ctx, pos: int) -> _Res:
        s, n, start = c.s, c.n, pos
        e0 = pos = c.old.get((self, start), start)
        res = None
        while True:
            pos = self.plain.match(s, pos).end()
            if pos >= n:
                res = _Res(NEED_MORE, start, pos, (), n)
                break
            if s[pos] == self.delim:
                res = _Res(SUCCESS, start, pos, (), pos)
                break
            if pos + 1 >= n:                                # a backslash at the end
                res = _Res(NEED_MORE, start, pos, (), n)
                break
            esc = s[pos + 1]
            if esc in (self.delim, "\\", "/", "b", "f", "n", "r", "t"):
                pos += 2
                continue
            if esc == "u":
                hexpart = s[pos + 2:pos + 6]
                bad = next((i for i, h in enumerate(hexpart) if h not in _HEX), -1)
                if bad >= 0:
                    res = _Res(FAIL, start, start, (), pos + 2 + bad)
                    break
                if len(hexpart) < 4:
                    res = _Res(NEED_MORE, start, pos, (), n)
                    break
                pos += 6
                continue
            res = _Res(FAIL, start, start, (), pos + 1)
            break
        c.steps += 1 + pos - e0
        if res.hi >= n:
            c.new[(self, start)] = pos
        return res


class _Wrap(_P):
    """A tag (``tag``): wraps the child's nodes in one AST node, partial included."""

    def __init__(self, tag: str, child: _P, rule: str = "") -> None:
        self.tag, self.child, self.rule = tag, child, rule

    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        r = self.child.parse(c, pos)
        if r.type == FAIL:
            return r
        node = _Node(self.tag, c.s[r.start:r.end], list(r.nodes), r.hi < c.n, self.rule, r.type == NEED_MORE)
        return _Res(r.type, r.start, r.end, [node], r.hi)


class _Atomic(_P):
    def __init__(self, child: _P) -> None:
        self.child = child

    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        r = self.child.parse(c, pos)
        if r.type == NEED_MORE:
            return _Res(NEED_MORE, r.start, r.end, (), r.hi)
        return r


class _Ref(_P):
    def __init__(self) -> None:
        self.target: _P | None = None

    def parse(self, c: _Ctx, pos: int) -> _Res:
        assert self.target is not None
        return self.target.parse(c, pos)


def _rule(child: _P) -> _P:
    # a rule's AST node carries no tag: the mapper only walks through it, so its children stand in its place
    return child


class PegStream:
    """An incremental lenient parse of a growing input (``common_chat_peg_parse`` on every update, without
    re-reading what cannot change): each :meth:`feed` appends text and parses again from the checkpoints of the
    previous parse, each left by a parser whose result depended on the old end of the input. The result equals a
    parse of the whole input from scratch; the work (``steps``) is linear in the input plus the depth of the
    unfinished constructs per update.

    >>> st = PegStream(_Seq(_Lit("ab"), _Until("!"), _Lit("!"), _End()))
    >>> [st.feed(t).type for t in ("a", "bcd", "!")], st.feed("").end      # NEED_MORE, NEED_MORE, SUCCESS
    ([1, 1, 0], 5)
    """

    def __init__(self, parser: _P, prefix: str = "") -> None:
        self.parser = parser
        self.s = prefix
        self.memo: dict[Any, Any] = {}
        self.steps = 0

    def feed(self, added: str) -> _Res:
        """Append ``added`` and parse the whole input (a RecursionError leaves the previous checkpoints, still
        valid, in place)."""
        self.s += added
        c = _Ctx(self.s, self.memo)
        try:
            r = self.parser.parse(c, 0)
        finally:
            self.steps += c.steps
        self.memo = c.new
        return r


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


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)


_PY_LITERALS = (("True", "true"), ("False", "false"), ("None", "null"))


def _word_char(ch: str) -> bool:
    return ch == "_" or (ch.isascii() and ch.isalnum())


def normalize_quotes_to_json(text: str) -> str:
    """``normalize_quotes_to_json`` (chat-peg-parser.cpp): Python-style single-quoted strings become JSON strings
    and ``True`` / ``False`` / ``None`` outside strings become ``true`` / ``false`` / ``null`` (a prefix of one
    becomes the same prefix of the other, so streamed partials stay monotonic); JSON passes through unchanged.

    >>> normalize_quotes_to_json("{'a': 'x', 'b': [True, Non")
    '{"a": "x", "b": [true, nul'
    """
    out: list[str] = []
    sq = dq = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if sq:
                out.append("'" if nxt == "'" else '\\"' if nxt == '"' else c + nxt)
                i += 2
                continue
            if dq:
                out.append(c + nxt)
                i += 2
                continue
            out.append(c)
            i += 1
            continue
        if c == '"':
            if sq:
                out.append('\\"')
            else:
                dq = not dq
                out.append(c)
        elif c == "'":
            if dq:
                out.append(c)
            else:
                sq = not sq
                out.append('"')
        elif not sq and not dq and c in "TFN" and (i == 0 or not _word_char(text[i - 1])):
            k = i
            while k < n and _word_char(text[k]):
                k += 1
            token = text[i:k]
            for py, js in _PY_LITERALS:
                if py[:len(token)] == token:
                    out.append(js[:len(token)])
                    i = k - 1
                    break
            else:
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _brace_depth(s: str) -> int:
    """Unclosed ``{`` outside JSON strings (a string's escapes skipped, an unclosed string to the end)."""
    bare = _STRING.sub("", s)
    return bare.count("{") - bare.count("}")


class _Mapper:
    """``common_chat_peg_mapper`` for the JSON formats (content, reasoning, tool open / name / id / args / close).

    Its state can be saved after a prefix of the top-level nodes and restored (:class:`MessageStream` folds only the
    nodes past the saved prefix); only the last call (``calls[-1]``) or the pending one is ever changed, the earlier
    calls are final and their tuples kept (``frozen``)."""

    def __init__(self) -> None:
        self.msg = ChatMessage()
        self.pending: list[str] | None = None      # [name, arguments, id] of the call being read
        self.current: list[str] | None = None
        self.calls: list[list[str]] = []
        self.args_buffer = ""
        self.arg_count = 0                           # the tagged (XML) formats' arguments
        self.quote_pending = False
        self.frozen: list[tuple[str, str, str]] = []   # tuple(calls[i]) for the calls before the last

    def _target_get(self) -> str:
        return self.current[1] if self.current is not None and self.current[0] else self.args_buffer

    def _target_set(self, v: str) -> None:
        if self.current is not None and self.current[0]:
            self.current[1] = v
        else:
            self.args_buffer = v

    def save(self) -> tuple[Any, ...]:
        """The state (copies of what later nodes may change)."""
        cur = self.current
        kind = (None if cur is None else "p" if cur is self.pending else
                "l" if self.calls and cur is self.calls[-1] else "o")
        return (self.msg.content, self.msg.reasoning_content, None if self.pending is None else self.pending[:],
                kind, None if kind != "o" else cur[:], self.calls[:-1], self.calls[-1][:] if self.calls else None,
                self.args_buffer, self.arg_count, self.quote_pending)

    def restore(self, st: tuple[Any, ...]) -> None:
        (content, reasoning, pending, kind, other, head, last, self.args_buffer, self.arg_count,
         self.quote_pending) = st
        self.msg = ChatMessage(content, reasoning)
        self.pending = None if pending is None else pending[:]
        self.calls = head[:] + ([last[:]] if last is not None else [])
        del self.frozen[max(0, len(self.calls) - 1):]
        self.current = {None: None, "p": self.pending, "l": self.calls[-1] if self.calls else None,
                        "o": other[:] if other is not None else None}[kind]

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
                add = normalize_quotes_to_json(v)      # identity on JSON; Python-style values (LFM2) to JSON
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
        """The message (the state is left as it is: more nodes may follow)."""
        calls, frozen = self.calls, self.frozen
        while len(frozen) < len(calls) - 1:
            frozen.append(tuple(calls[len(frozen)]))          # type: ignore[arg-type]
        out = frozen[:]
        if calls:
            out.append(tuple(calls[-1]))                        # type: ignore[arg-type]
        if self.pending is not None and self.pending[0]:
            p = self.pending[:]
            if self.args_buffer:
                p[1] = self.args_buffer
            if self.quote_pending and p[1]:
                p[1] += '"'
            out.append(tuple(p))                                # type: ignore[arg-type]
        msg = ChatMessage(self.msg.content, self.msg.reasoning_content, out)
        if msg.reasoning_content and not msg.reasoning_content.strip(" \n\r\t"):
            msg.reasoning_content = ""
        return msg


def _root(parser: _P, generation_prompt: str, reasoning_start: str) -> _P:
    # common_chat_peg_parse: the generation prompt's part before the thinking tag, optional whitespace, the parser
    rs = reasoning_start.strip(_SPACE)
    prefix = generation_prompt
    if rs and rs in generation_prompt:
        prefix = generation_prompt[:generation_prompt.index(rs)]
    return _Seq(_Lit(prefix) if prefix else _Eps(), _Space(), parser)


def _message(r: _Res, is_partial: bool) -> ChatMessage:
    if r.type == FAIL:
        if is_partial and r.end > 0:
            return ChatMessage()                 # a FAIL carries no nodes: an empty message (no update)
        raise PegFail("The model produced output that does not match the expected peg-native format")
    m = _Mapper()
    for n in r.nodes:
        m.visit(n)
    return m.finish()


class _Fold:
    """The mapper over successive parses of a growing input: the state after the stable prefix of the top-level
    nodes is kept, and the next parse's nodes are folded from there when that prefix is unchanged (compared by
    value: the same node objects, so at C speed), else from the start."""

    def __init__(self) -> None:
        self.mapper = _Mapper()
        self.prefix: list[_Node] = []
        self.saved: tuple[Any, ...] | None = None

    def message(self, r: _Res, is_partial: bool) -> ChatMessage:
        if r.type == FAIL:
            return _message(r, is_partial)
        nodes = r.nodes if isinstance(r.nodes, list) else list(r.nodes)
        k = len(self.prefix)
        m = self.mapper
        if self.saved is not None and len(nodes) >= k and nodes[:k] == self.prefix:
            m.restore(self.saved)
        else:
            m, k = _Mapper(), 0
            self.mapper = m
        while k < len(nodes) and nodes[k].stable:
            m.visit(nodes[k])
            k += 1
        self.prefix, self.saved = nodes[:k], m.save()
        for n in nodes[k:]:
            m.visit(n)
        return m.finish()


def parse_message(parser: _P, generation_prompt: str, text: str, *, is_partial: bool = False,
                  reasoning_start: str = "") -> ChatMessage:
    """``common_chat_peg_parse``: the message for ``text`` (the generated text). The parser sees the generation
    prompt first: its part before the thinking tag (``prefix(generation_prompt, reasoning_start)``), optional
    whitespace (``<<``), then ``parser`` on the rest. (A stream: :class:`MessageStream`.)

    Raises:
        PegFail: where llama-server throws (a final parse that fails, or a partial one that fails at the start).
    """
    return MessageStream(parser, generation_prompt, reasoning_start=reasoning_start).update(text, is_partial)


class MessageStream:
    """:func:`parse_message` of a growing reply, incremental (:class:`PegStream`): ``update(added, is_partial)``
    gives the message of the whole reply so far, as :func:`parse_message` of it would; ``steps`` counts the work.

    >>> from constrained.chat.tool_formats import FORMATS
    >>> st = MessageStream(json_native_parser(["f"], FORMATS["hermes"], parallel=True, required=False), "")
    >>> st.update('Hi<tool_call>\\n{"name": "f", "arg', True).tool_calls, st.update('uments": {}}', True).tool_calls
    ([('f', '{', '')], [('f', '{}', '')])
    """

    def __init__(self, parser: _P, generation_prompt: str, *, reasoning_start: str = "") -> None:
        self.stream = PegStream(_root(parser, generation_prompt, reasoning_start), generation_prompt)
        self.fold = _Fold()

    @property
    def steps(self) -> int:
        """Parser calls plus characters scanned, over every update so far."""
        return self.stream.steps

    def update(self, added: str, is_partial: bool) -> ChatMessage:
        """The message of the reply so far, ``added`` appended.

        Raises:
            PegFail: as :func:`parse_message`.
        """
        return self.fold.message(self.stream.feed(added), is_partial)
