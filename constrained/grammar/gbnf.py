"""GBNF text → llama.cpp's rule vectors: the same symbol ids, element layout, expansion and refusals.

Lark (``gbnf.lark``, LALR with a contextual lexer) tokenizes and parses the text; this module decodes literals,
classes and escapes as llama.cpp's ``parse_char`` does and lays the elements out in the order
``llama_grammar_parser`` produces them (ids in order of first appearance, a group's id before its contents,
helper rules named ``<rule>_<id>``, ``handle_repetitions``' expansion). The text is handled as bytes (lexed as
latin-1) so that even invalid UTF-8 is read as llama.cpp reads it; a NUL byte ends the text as in C.

Example:
    >>> layout = parse_gbnf('root ::= "a"+')
    >>> layout.symbol_ids, layout.rules[1]
    ({'root': 0, 'root_1': 1}, ((3, 97), (2, 1), (1, 0), (0, 0)))
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from operator import itemgetter
from typing import Any

from lark import Lark, Transformer, UnexpectedInput, UnexpectedToken
from lark import __version__ as lark_version
from lark.lark import PostLex

from ._gbnf_text import Fail, at, char_class, error_at, int_value, literal, scan_quoted, scan_token, to_bytes
from .ir import TEXT_TOKEN, TEXT_TOKEN_NOT, Element, ElementType

__all__ = ["DEFAULT_LIMITS", "GbnfLayout", "GbnfLimits", "MAX_REPETITION_THRESHOLD", "error_at", "parse_gbnf",
           "to_bytes"]

MAX_REPETITION_THRESHOLD = 2000  # llama-grammar.cpp's MAX_REPETITION_THRESHOLD
_U32_MAX = (1 << 32) - 1

_DIRECT = os.environ.get("CONSTRAINED_GBNF_LARK", "") in ("", "0")
"""False with ``CONSTRAINED_GBNF_LARK=1``: every grammar goes through lark (the reference reader)."""

_END, _ALT, _REF = int(ElementType.END), int(ElementType.ALT), int(ElementType.RULE_REF)
_ANY, _TOKEN, _TOKEN_NOT = int(ElementType.CHAR_ANY), int(ElementType.TOKEN), int(ElementType.TOKEN_NOT)


@dataclass(frozen=True)
class GbnfLimits:
    """Bounds that turn hostile grammars into a :class:`GrammarLimitError` instead of a hang or a crash.

    llama.cpp has none of these but the 2000 repetition limits (deep nesting overflows its C stack; a
    huge literal repeated 2000 times exhausts memory); the defaults are far above any real grammar.
    """

    max_source_bytes: int = 1 << 20   # grammar text size (lark parses about 200 kB per second)
    max_nesting: int = 256            # depth of nested parentheses
    max_symbols: int = 300_000        # rules, helpers included (llama.cpp loads 202,029 in 0.08 s, we in ~3 s)
    max_elements: int = 4_000_000     # elements over all rules, after repetition expansion


DEFAULT_LIMITS = GbnfLimits()


def _hint(name: str) -> str:
    """How to raise the limit ``name``, for the messages."""
    return f" (GbnfLimits.{name}; raise it with Grammar.from_gbnf(text, limits=GbnfLimits({name}=...)))"


@dataclass(frozen=True)
class GbnfLayout:
    """What ``llama_grammar_parser::parse`` leaves in ``rules`` and ``symbol_ids``.

    Text token references (``<think>``) stay as ``(TEXT_TOKEN[_NOT], index into token_texts)``
    (``resolved`` holds their ids when a resolver was given). ``definitions`` maps a rule id to the byte offset
    of its (last) definition, ``first_refs`` to that of its first reference.
    """

    rules: tuple[tuple[Element, ...], ...]
    symbol_ids: dict[str, int]
    token_texts: tuple[bytes, ...]
    token_offsets: tuple[int, ...]
    resolved: tuple[int, ...] | None
    definitions: dict[int, int]
    first_refs: dict[int, int]
    text: bytes


def _syntax_failure(text: str, err: UnexpectedInput, depth: int) -> Fail:
    """Map a lark error to llama.cpp's message for the same place (``depth``: open parentheses there)."""
    if isinstance(err, UnexpectedToken):
        tok = err.token
        kind = tok.type
        pos = len(text) if kind == "$END" else tok.start_pos
        expected = set(err.expected)
    else:
        pos = err.pos_in_stream
        kind = None
        expected = set(getattr(err, "allowed", ()) or ())
        c = text[pos]
        if (c == '"' and "STRING" in expected) or (c == "[" and "CLASS" in expected):
            return scan_quoted(text, pos)
        if c in "<!" and "TOKEN" in expected:
            return scan_token(text, pos)
    if "DEFINE" in expected:
        what = "expecting ::="
    elif "INT" in expected and "_RBRACE" not in expected:
        what = "expecting an int"
    elif "COMMA" in expected:
        what = "expecting ','"
    elif "_RBRACE" in expected:
        what = "expecting '}'"
    elif "NAME" in expected and "STRING" not in expected:
        what = "expecting name"
    elif depth > 0:  # inside parentheses parse_alternates stops at anything but ")"
        what = "expecting ')'"
    else:
        what = "expecting newline or end"
    return Fail(f"{what} {at(text, pos)}", pos)


# ---------------------------------------------------------------------------------------------- lark

class _Context:
    """Per-parse state shared by the post-lexer and the transformer (one parse per thread at a time)."""

    def __init__(self, text: str, limits: GbnfLimits, resolve: Callable[[bytes], int] | None) -> None:
        self.text = text
        self.limits = limits
        self.resolve = resolve
        self.payload: dict[int, Any] = {}   # token start offset -> decoded elements
        self.token_texts: list[bytes] = []
        self.token_index: dict[bytes, int] = {}
        self.token_offsets: list[int] = []
        self.resolved: list[int] = []
        self.depth = 0   # open parentheses at the last token lexed


_local = threading.local()


class _Repeats:
    """parse_sequence's bookkeeping for ``handle_repetitions`` (whether the last item left any element, its
    rule count ``n_prev_rules``, the number of symbols so far), followed token by token so that repetition
    errors are raised in text order, before any later syntax error, as llama.cpp raises them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.names: set[str] = set()
        self.generated = 0
        self.groups: list[int] = []
        self.n_prev = 1
        self.empty = True

    def atom(self, empty: bool) -> None:
        self.n_prev, self.empty = 1, empty

    def name(self, name: str) -> None:
        self.names.add(name)
        self.atom(False)

    def open_group(self) -> None:
        self.groups.append(len(self.names) + self.generated)
        self.generated += 1

    def close_group(self) -> None:
        before = self.groups.pop() if self.groups else 0
        self.n_prev, self.empty = max(1, len(self.names) + self.generated - before), False

    def repeat(self, min_times: int, max_times: int | None, pos: int) -> None:
        # as the checks of handle_repetitions (max_times None = no maximum)
        if self.empty:
            raise Fail(f"expecting preceding item to */+/?/{{ {at(self.text, pos)}", pos)
        total = max_times if max_times else (min_times if min_times > 0 else 1)
        if self.n_prev * total > MAX_REPETITION_THRESHOLD:
            raise Fail("number of rules that are going to be repeated multiplied by the new repetition exceeds "
                        "sane defaults, please reduce the number of repetitions or rule complexity", pos)
        if max_times is not None and max_times < min_times:
            # llama.cpp computes max - min in uint64 and creates 2**64 helper rules: it never finishes
            raise Fail(f"repetition minimum {min_times} is greater than its maximum {max_times} "
                        "(llama.cpp would never finish parsing this grammar)", pos, limit=True)
        n_opt = 1 if max_times is None else max_times - min_times
        self.generated += n_opt
        self.n_prev *= total
        self.empty = min_times == 0 and n_opt == 0


class _PostLex(PostLex):
    """Drops newlines inside parentheses, bounds nesting, decodes literals, classes and token references, and
    checks repetitions as the tokens come, so that errors are raised in text order as in llama.cpp."""

    always_accept = ("_NL",)

    def process(self, stream):  # noqa: ANN001, ANN201
        ctx: _Context = _local.ctx
        text, payload = ctx.text, ctx.payload
        max_depth = ctx.limits.max_nesting
        reps = _Repeats(text)
        depth = 0
        brace: list[int | None] = []   # [start offset, min, max...] of the repetition being read
        in_body = False  # between "::=" and the end of the rule (else the parser reports misplaced items)
        for tok in stream:
            kind = tok.type
            if not in_body:
                if kind == "DEFINE":
                    in_body = True
                    reps.empty = True
                elif kind == "NAME":
                    reps.name(str(tok))
                yield tok
                continue
            if kind == "_NL":
                if depth:
                    continue
                in_body = False
            elif kind == "STRING":
                elements = payload[tok.start_pos] = literal(text, tok.start_pos, tok.end_pos)
                reps.atom(not elements)
            elif kind == "CLASS":
                elements = payload[tok.start_pos] = char_class(text, tok.start_pos, tok.end_pos)
                reps.atom(not elements)
            elif kind == "TOKEN":
                payload[tok.start_pos] = self._token(ctx, tok)
                reps.atom(False)
            elif kind == "NAME":
                reps.name(str(tok))
            elif kind == "DOT":
                reps.atom(False)
            elif kind == "LPAR":
                depth = ctx.depth = depth + 1
                if depth > max_depth:
                    raise Fail(f"parentheses nested deeper than {max_depth} levels" + _hint("max_nesting"), tok.start_pos, limit=True)
                reps.open_group()
                reps.empty = True
            elif kind == "_RPAR":
                depth = ctx.depth = max(0, depth - 1)
                reps.close_group()
            elif kind == "PIPE":
                reps.empty = True
            elif kind == "STAR":
                reps.repeat(0, None, tok.start_pos)
            elif kind == "PLUS":
                reps.repeat(1, None, tok.start_pos)
            elif kind == "QMARK":
                reps.repeat(0, 1, tok.start_pos)
            elif kind == "LBRACE":
                brace = [tok.start_pos]
            elif kind == "INT":
                value = int_value(tok)
                if value is None:  # std::stoull throws std::out_of_range
                    raise Fail(f"stoull: integer out of range {at(text, tok.start_pos)}", tok.start_pos)
                brace.append(value)
            elif kind == "COMMA":
                brace.append(None)
            elif kind == "_RBRACE" and len(brace) > 1:  # (the parser refuses a "}" without a number)
                pos, min_times, *rest = brace
                if min_times > MAX_REPETITION_THRESHOLD:
                    raise Fail("number of repetitions exceeds sane defaults, please reduce the number of "
                                "repetitions", pos)
                max_times = min_times if not rest else rest[-1]
                if max_times is not None and max_times > MAX_REPETITION_THRESHOLD:
                    max_times = None  # a maximum above 2000 silently becomes unbounded
                reps.repeat(min_times, max_times, pos)
            yield tok

    @staticmethod
    def _token(ctx: _Context, tok: Any) -> Element:
        # as parse_token
        s = str(tok)
        neg = s[0] == "!"
        body = s[1:] if neg else s
        if body[1:2] == "[":
            digits_at = tok.start_pos + (3 if neg else 2)
            value = int_value(body[2:-2])
            if value is None:  # std::stoul throws std::out_of_range
                raise Fail(f"stoul: token id out of range {at(ctx.text, digits_at)}", digits_at)
            if value > _U32_MAX:
                raise Fail(f"parsed token id is too big {at(ctx.text, digits_at)}", digits_at)
            return (_TOKEN_NOT if neg else _TOKEN, value)
        raw = body.encode("latin-1")
        index = ctx.token_index.get(raw)
        if index is None:
            offset = tok.start_pos + (1 if neg else 0)
            if ctx.resolve is not None:
                tid = ctx.resolve(raw)
                if tid is None:
                    shown = raw.decode("utf-8", "replace")
                    raise Fail(f"invalid token '{shown}': it must tokenize to exactly one token", offset)
                ctx.resolved.append(tid)
            index = ctx.token_index[raw] = len(ctx.token_texts)
            ctx.token_texts.append(raw)
            ctx.token_offsets.append(offset)
        return (TEXT_TOKEN_NOT if neg else TEXT_TOKEN, index)


# AST node kinds built by the transformer (plain tuples: cheaper than lark Trees)
_K_ELEMS, _K_REF, _K_GROUP, _K_BRACE = 0, 1, 2, 3


class _ToAst(Transformer):
    """Inline LALR callbacks: rules → (name, offset, alternates); an item → (kind, offset, payload, repeats)
    with repeats a list of (offset, min, max or None)."""

    def start(self, children):  # noqa: ANN001, ANN201
        return children

    def rule(self, children):  # noqa: ANN001, ANN201
        name, _define, alternates = children
        return (str(name), name.start_pos, alternates)

    def alternates(self, children):  # noqa: ANN001, ANN201
        return children[::2]

    def sequence(self, children):  # noqa: ANN001, ANN201
        items: list = []
        payload = _local.ctx.payload
        for c in children:
            if isinstance(c, tuple):
                if c[0] == _K_GROUP:
                    items.append((_K_GROUP, c[1], c[2], []))
                else:
                    items[-1][3].append(c[1:])  # a repetition: the post-lexer saw an item before it
                continue
            kind = c.type
            pos = c.start_pos
            if kind == "NAME":
                items.append((_K_REF, pos, str(c), []))
            elif kind == "DOT":
                items.append((_K_ELEMS, pos, ((_ANY, 0),), []))
            elif kind == "STRING" or kind == "CLASS":
                items.append((_K_ELEMS, pos, payload[pos], []))
            elif kind == "TOKEN":
                items.append((_K_ELEMS, pos, (payload[pos],), []))
            else:
                items[-1][3].append((pos, 1 if kind == "PLUS" else 0, 1 if kind == "QMARK" else None))
        return items

    def group(self, children):  # noqa: ANN001, ANN201
        return (_K_GROUP, children[0].start_pos, children[1])

    def brace(self, children):  # noqa: ANN001, ANN201
        lo = int_value(children[1])
        if len(children) == 2:
            hi: int | None = lo
        elif len(children) == 3:
            hi = None
        else:
            hi = int_value(children[3])
            if hi is not None and hi > MAX_REPETITION_THRESHOLD:
                hi = None  # a maximum above 2000 silently becomes unbounded
        return (_K_BRACE, children[0].start_pos, lo, hi)


# ---------------------------------------------------------------------------------------------- direct reader

# the terminals of gbnf.lark, the same regular expressions (lark lexes with Python's re)
_RE_NAME = re.compile(r"[a-zA-Z0-9-]+")
_RE_INT = re.compile(r"[0-9]+")
_RE_BLANKS = re.compile(r"(?:[ \t\r\n]|#[^\r\n]*)*")
_RE_NL = re.compile(r"(?:\r\n?|\n)(?:[ \t\r\n]|#[^\r\n]*)*")
_RE_IGNORED = re.compile(r"(?:[ \t]+|#[^\r\n]*)*")
_RE_STRING = re.compile(r'"(?:[^"\\\xc0-\xff]|\\[\s\S]|[\xc0-\xdf][\s\S]|[\xe0-\xef][\s\S]{2}|[\xf0-\xff][\s\S]{3})*"')
_RE_CLASS = re.compile(r"\[(?:[^\]\\\xc0-\xff]|\\[\s\S]|[\xc0-\xdf][\s\S]|[\xe0-\xef][\s\S]{2}|[\xf0-\xff][\s\S]{3})*\]")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


class _Fallback(Exception):
    """The direct reader met something it leaves to lark (an error, a token reference, a limit)."""


def _direct_parse(text: str, limits: GbnfLimits) -> list | None:
    """What ``_parser().parse(text)`` returns (``[(name, offset, alternates)...]``, the same items and offsets),
    read directly, for grammars without ``<token>`` references that lark parses without error; None for anything
    else (lark then parses it and reports the error). The post-lexer's checks run in the same order (_Repeats), and
    literals and classes are decoded by the same functions, so both readers give the same layout; the direct one
    skips lark's lexer and LALR machinery (~3x faster on the JSON-schema converter's grammars).
    tests/grammar/test_gbnf_direct.py compares both on every grammar the tests know."""
    try:
        return _DirectReader(text, limits).parse()
    except (_Fallback, Fail, IndexError, RecursionError):
        return None


class _DirectReader:
    def __init__(self, text: str, limits: GbnfLimits) -> None:
        self.text = text
        self.n = len(text)
        self.max_depth = limits.max_nesting
        self.reps = _Repeats(text)

    def parse(self) -> list:
        text, n, reps = self.text, self.n, self.reps
        rules = []
        pos = _RE_IGNORED.match(text, 0).end()
        if pos < n and text[pos] in "\r\n":
            pos = _RE_IGNORED.match(text, _RE_NL.match(text, pos).end()).end()
        while pos < n:
            m = _RE_NAME.match(text, pos)
            if m is None:
                raise _Fallback
            name, rule_pos = m.group(), pos
            reps.name(name)
            pos = _RE_IGNORED.match(text, m.end()).end()
            if not text.startswith("::=", pos):
                raise _Fallback
            pos = _RE_BLANKS.match(text, pos + 3).end()
            reps.empty = True
            alternates, pos = self.alternates(pos, 0)
            rules.append((name, rule_pos, alternates))
            if pos >= n:
                break
            if text[pos] not in "\r\n":
                raise _Fallback
            pos = _RE_IGNORED.match(text, _RE_NL.match(text, pos).end()).end()
        return rules

    def alternates(self, pos: int, depth: int) -> tuple[list, int]:
        text, n = self.text, self.n
        seq, pos = self.sequence(pos, depth)
        out = [seq]
        while pos < n and text[pos] == "|":
            pos = _RE_BLANKS.match(text, pos + 1).end()
            self.reps.empty = True
            seq, pos = self.sequence(pos, depth)
            out.append(seq)
        return out, pos

    def sequence(self, pos: int, depth: int) -> tuple[list, int]:
        text, n, reps = self.text, self.n, self.reps
        items: list = []
        while True:
            pos = _RE_IGNORED.match(text, pos).end()
            if pos >= n:
                return items, pos
            c = text[pos]
            if c == '"' or c == "[":
                m = (_RE_STRING if c == '"' else _RE_CLASS).match(text, pos)
                if m is None:
                    raise _Fallback
                end = m.end()
                elements = literal(text, pos, end) if c == '"' else char_class(text, pos, end)
                reps.atom(not elements)
                items.append((_K_ELEMS, pos, elements, []))
                pos = end
            elif c in _NAME_START:
                m = _RE_NAME.match(text, pos)
                name = m.group()
                reps.name(name)
                items.append((_K_REF, pos, name, []))
                pos = m.end()
            elif c == ".":
                reps.atom(False)
                items.append((_K_ELEMS, pos, ((_ANY, 0),), []))
                pos += 1
            elif c == "(":
                if depth + 1 > self.max_depth:
                    raise _Fallback
                reps.open_group()
                reps.empty = True
                alternates, end = self.alternates(_RE_BLANKS.match(text, pos + 1).end(), depth + 1)
                end = _RE_IGNORED.match(text, end).end()
                if end >= n or text[end] != ")":
                    raise _Fallback
                reps.close_group()
                items.append((_K_GROUP, pos, alternates, []))
                pos = end + 1
            elif c == "*" or c == "+" or c == "?":
                if not items:
                    raise _Fallback
                reps.repeat(1 if c == "+" else 0, 1 if c == "?" else None, pos)
                items[-1][3].append((pos, 1 if c == "+" else 0, 1 if c == "?" else None))
                pos += 1
            elif c == "{":
                pos = self.brace(pos, items)
            elif depth and (c == "\n" or c == "\r"):     # a newline inside parentheses is blank space
                pos = _RE_NL.match(text, pos).end()
            else:
                return items, pos

    def brace(self, start: int, items: list) -> int:
        text, n = self.text, self.n
        pos = _RE_IGNORED.match(text, start + 1).end()
        m = _RE_INT.match(text, pos)
        if m is None or not items:
            raise _Fallback
        lo = int_value(m.group())
        if lo is None:
            raise _Fallback
        pos = _RE_IGNORED.match(text, m.end()).end()
        hi: int | None = lo
        if pos < n and text[pos] == ",":
            pos = _RE_IGNORED.match(text, pos + 1).end()
            m = _RE_INT.match(text, pos)
            if m is None:
                hi = None
            else:
                hi = int_value(m.group())
                if hi is None:
                    raise _Fallback
                pos = _RE_IGNORED.match(text, m.end()).end()
        if pos >= n or text[pos] != "}":
            raise _Fallback
        if lo > MAX_REPETITION_THRESHOLD:
            raise _Fallback
        if hi is not None and hi > MAX_REPETITION_THRESHOLD:
            hi = None  # a maximum above 2000 silently becomes unbounded
        self.reps.repeat(lo, hi, start)
        items[-1][3].append((start, lo, hi))
        return pos + 1


_PARSER: Lark | None = None
_PARSER_LOCK = threading.Lock()


def _parser() -> Lark:
    global _PARSER
    if _PARSER is None:
        with _PARSER_LOCK:
            if _PARSER is None:
                grammar = resources.files("constrained.grammar").joinpath("gbnf.lark").read_text(encoding="utf-8")
                options = {"parser": "lalr", "lexer": "contextual", "maybe_placeholders": False,
                           "propagate_positions": False}
                cache = _lark_cache(grammar)
                try:     # lark's own parser-table cache: ~100 ms of LALR analysis per process -> ~2 ms
                    _PARSER = Lark(grammar, postlex=_PostLex(), transformer=_ToAst(), cache=cache, **options)
                except Exception:  # noqa: BLE001 - an unreadable or half-written cache: build it afresh
                    _PARSER = Lark(grammar, postlex=_PostLex(), transformer=_ToAst(), **options)
    return _PARSER


def _lark_cache(grammar: str) -> str | bool:
    """A per-user file for lark's cached parser tables (``$XDG_CACHE_HOME/constrained``), or False where none can
    be made (then lark builds the tables each time)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "constrained")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return False
    digest = hashlib.sha256(grammar.encode()).hexdigest()[:16]
    return os.path.join(folder, f"gbnf-lark-{lark_version}-{digest}.cache")


# ---------------------------------------------------------------------------------------------- layout

class _Layout:
    """llama_grammar_parser's symbol table and rule vectors, filled in text order."""

    def __init__(self, text: str, limits: GbnfLimits) -> None:
        self.text = text
        self.limits = limits
        self.symbols: dict[str, int] = {}
        self.rules: list[tuple[Element, ...] | None] = []
        self.n_elements = 0
        self.definitions: dict[int, int] = {}
        self.first_refs: dict[int, int] = {}

    def symbol_id(self, name: str) -> int:  # as get_symbol_id
        sid = self.symbols.get(name)
        if sid is None:
            sid = self.symbols[name] = len(self.symbols)
        return sid

    def generate_symbol_id(self, base: str, pos: int) -> int:  # as generate_symbol_id
        sid = len(self.symbols)
        if sid >= self.limits.max_symbols:
            raise Fail(f"more than {self.limits.max_symbols} rules" + _hint("max_symbols"), pos, limit=True)
        self.symbols[f"{base}_{sid}"] = sid
        return sid

    def add_rule(self, rule_id: int, rule: list[Element], pos: int) -> None:  # as add_rule
        if len(self.rules) <= rule_id:
            self.rules.extend([None] * (rule_id + 1 - len(self.rules)))
        old = self.rules[rule_id]
        self.n_elements += len(rule) - (len(old) if old is not None else 0)
        if self.n_elements > self.limits.max_elements:
            raise Fail(f"grammar expands to more than {self.limits.max_elements} elements" + _hint("max_elements"), pos, limit=True)
        self.rules[rule_id] = tuple(rule)

    def rule(self, name: str, pos: int, alternates: list) -> None:  # as parse_rule
        rule_id = self.symbol_id(name)
        if len(self.symbols) > self.limits.max_symbols:
            raise Fail(f"more than {self.limits.max_symbols} rules" + _hint("max_symbols"), pos, limit=True)
        self.alternates(alternates, name, rule_id, pos)
        self.definitions[rule_id] = pos

    def alternates(self, alternates: list, rule_name: str, rule_id: int, pos: int) -> None:
        # as parse_alternates
        out: list[Element] = []
        for i, sequence in enumerate(alternates):
            if i:
                out.append((_ALT, 0))
            self.sequence(sequence, rule_name, out)
        out.append((_END, 0))
        self.add_rule(rule_id, out, pos)

    def sequence(self, items: list, rule_name: str, out: list[Element]) -> None:
        # as parse_sequence
        for kind, pos, payload, reps in items:
            last_sym_start = len(out)
            n_prev_rules = 1
            if kind == _K_ELEMS:
                out.extend(payload)
            elif kind == _K_REF:
                ref = self.symbol_id(payload)
                if len(self.symbols) > self.limits.max_symbols:
                    raise Fail(f"more than {self.limits.max_symbols} rules" + _hint("max_symbols"), pos, limit=True)
                self.first_refs.setdefault(ref, pos)
                out.append((_REF, ref))
            else:
                n_before = len(self.symbols)
                sub_id = self.generate_symbol_id(rule_name, pos)
                self.alternates(payload, rule_name, sub_id, pos)
                n_prev_rules = max(1, len(self.symbols) - n_before)
                out.append((_REF, sub_id))
            for rep_pos, lo, hi in reps:
                n_prev_rules = self.repeat(out, last_sym_start, n_prev_rules, lo, hi, rule_name, rep_pos)
            if len(out) + self.n_elements > self.limits.max_elements:
                raise Fail(f"grammar expands to more than {self.limits.max_elements} elements" + _hint("max_elements"), pos, limit=True)

    def repeat(self, out: list[Element], last_sym_start: int, n_prev_rules: int, min_times: int,
               max_times: int | None, rule_name: str, pos: int) -> int:
        # as handle_repetitions (max_times None = no maximum)
        if last_sym_start == len(out):
            raise Fail(f"expecting preceding item to */+/?/{{ {at(self.text, pos)}", pos)
        prev = out[last_sym_start:]
        no_max = max_times is None
        if not no_max and max_times > 0:
            total = max_times
        elif min_times > 0:
            total = min_times
        else:
            total = 1
        if n_prev_rules * total > MAX_REPETITION_THRESHOLD:
            raise Fail("number of rules that are going to be repeated multiplied by the new repetition exceeds "
                        "sane defaults, please reduce the number of repetitions or rule complexity", pos)
        n_opt = 1 if no_max else max_times - min_times
        if n_opt < 0:  # llama.cpp computes max - min in uint64 and loops for 2**64 iterations
            raise Fail(f"repetition minimum {min_times} is greater than its maximum {max_times} "
                        "(llama.cpp would never finish parsing this grammar)", pos, limit=True)
        grow = max(min_times - 1, 0) * len(prev) + n_opt * (len(prev) + 3)
        if self.n_elements + len(out) + grow > self.limits.max_elements:
            raise Fail(f"grammar expands to more than {self.limits.max_elements} elements" + _hint("max_elements"), pos, limit=True)
        if len(self.symbols) + n_opt > self.limits.max_symbols:
            raise Fail(f"more than {self.limits.max_symbols} rules" + _hint("max_symbols"), pos, limit=True)
        if min_times == 0:
            del out[last_sym_start:]
        else:
            out.extend(prev * (min_times - 1))
        last_rec_rule_id = 0
        for i in range(n_opt):
            rec_rule_id = self.generate_symbol_id(rule_name, pos)
            rec = list(prev)
            if i > 0 or no_max:
                rec.append((_REF, rec_rule_id if no_max else last_rec_rule_id))
            rec.append((_ALT, 0))
            rec.append((_END, 0))
            self.add_rule(rec_rule_id, rec, pos)
            last_rec_rule_id = rec_rule_id
        if n_opt > 0:
            out.append((_REF, last_rec_rule_id))
        return n_prev_rules * total

    def validate(self) -> None:
        # as the end of llama_grammar_parser::parse: every rule defined, every reference resolvable
        names = {v: k for k, v in self.symbols.items()}
        n = len(self.rules)
        for rule_id, rule in enumerate(self.rules):
            if rule is None:
                raise Fail(f"Undefined rule '{names[rule_id]}'", self.first_refs.get(rule_id, 0))
            refs = itertools.compress(map(itemgetter(1), rule), map(_REF.__eq__, map(itemgetter(0), rule)))
            for value in refs:      # the references alone (picked at C speed: a 4M-element literal costs no loop)
                if value >= n or self.rules[value] is None:
                    raise Fail(f"Undefined rule identifier '{names[value]}'", self.first_refs.get(value, 0))


def parse_gbnf(text: str | bytes, *, resolve_token: Callable[[bytes], int | None] | None = None,
               limits: GbnfLimits = DEFAULT_LIMITS) -> GbnfLayout:
    """Parse GBNF as ``llama_grammar_parser::parse`` does.

    Args:
        text: the grammar (str, or bytes read as llama.cpp reads a C string: a NUL byte ends it).
        resolve_token: maps the bytes of a ``<text>`` token reference (brackets included) to its token id,
            or None if it is not exactly one token; it is called in text order so that the first error is
            llama.cpp's. Without it, text references are only checked for syntax.
        limits: size bounds (GrammarLimitError beyond them).

    Raises:
        GrammarSyntaxError: whatever llama.cpp's parser refuses, with llama.cpp's wording.
        GrammarLimitError: a bound of ``limits`` is exceeded.

    Example:
        >>> parse_gbnf('root ::= a?\\na ::= "a"').symbol_ids
        {'root': 0, 'a': 1, 'root_2': 2}
    """
    data = to_bytes(text)
    nul = data.find(b"\0")
    if nul != -1:
        data = data[:nul]
    if len(data) > limits.max_source_bytes:
        raise error_at(data, limits.max_source_bytes,
                       f"grammar text longer than {limits.max_source_bytes} bytes" + _hint("max_source_bytes"), limit=True)
    latin = data.decode("latin-1")
    ctx = _Context(latin, limits, resolve_token)
    saved = getattr(_local, "ctx", None)
    _local.ctx = ctx
    try:
        rules = _direct_parse(latin, limits) if _DIRECT else None
        if rules is None:
            try:
                rules = _parser().parse(latin)
            except UnexpectedInput as err:
                raise _syntax_failure(latin, err, ctx.depth) from None
        layout = _Layout(latin, limits)
        for name, pos, alternates in rules:
            layout.rule(name, pos, alternates)
        layout.validate()
    except Fail as fail:
        raise error_at(data, fail.pos, fail.message, limit=fail.limit) from None
    except RecursionError:  # pragma: no cover - max_nesting keeps the walk far from the limit
        raise error_at(data, 0, "grammar nested too deeply", limit=True) from None
    finally:
        _local.ctx = saved
    return GbnfLayout(tuple(r if r is not None else () for r in layout.rules), layout.symbols,
                      tuple(ctx.token_texts), tuple(ctx.token_offsets),
                      tuple(ctx.resolved) if resolve_token is not None else None,
                      layout.definitions, layout.first_refs, data)
