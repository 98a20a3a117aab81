"""llama.cpp's PEG parser arena (common/peg-parser.cpp): a builder whose parsers get arena ids in llama.cpp's
order, the GBNF it prints for them (``common_peg_arena::build_grammar``) and the lenient parser they run as.

The specialised chat handlers of common/parsers/*.cpp build one arena per request with ``common_chat_peg_builder``;
its GBNF is the grammar llama-server samples with, and some rule names carry an arena id (``until-<id>``,
``ac-<id>``). Ids are handed out in creation order, so a handler written against this builder must create its
parsers in the order GCC evaluates the C++ expressions (the right operand of ``+`` and ``|`` first, ``<<`` left to
right, initializer lists left to right): see :mod:`constrained.chat.qwen3_coder`.

Example:
    >>> b = Builder()
    >>> word = b.rule("word", b.until_one_of(["</w>"]))
    >>> root = b.seq(b.literal("<w>"), word, b.literal("</w>"))
    >>> print(b.grammar(root, lazy=False).splitlines()[0])
    root ::= "<w>" word "</w>"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .peg import (
    _P,
    FAIL,
    NEED_MORE,
    SUCCESS,
    ChatMessage,
    PegFail,
    _Atomic,
    _Chars,
    _Choice,
    _Ctx,
    _Eps,
    _Lit,
    _Mapper,
    _Not,
    _Rep,
    _Res,
    _Seq,
    _Space,
    _StrContent,
    _Until,
    _Wrap,
)
from .tool_grammar import excluding_grammar, including_grammar

__all__ = ["ArenaSetup", "Builder", "Node", "value_types"]


@dataclass
class ArenaSetup:
    """A specialised handler's answer for one request: grammar (None: no grammar), laziness, trigger words or
    patterns (``(type, value)``), and the arena's parser."""

    grammar: str | None
    lazy: bool
    triggers: list[tuple[int, str]]
    parser: Any

    #: the format named in the parse error (llama.cpp's ``peg-<format>``)
    FORMAT = "peg-native"

    def parse(self, generation_prompt: str, text: str, *, is_partial: bool = False) -> ChatMessage:
        """``common_chat_peg_parse``: the message of ``generation_prompt + text`` (lenient; what the root leaves
        unread is ignored, as llama.cpp's).

        Raises:
            PegFail: where llama.cpp throws (a final parse that fails, or a partial one that fails at once).
        """
        r = self.parser.parse(_Ctx(generation_prompt + text, {}), 0)     # a whole parse each time
        if r.type == FAIL:
            if is_partial and r.end > 0:
                return ChatMessage()
            raise PegFail(f"The model produced output that does not match the expected {self.FORMAT} format")
        return self.map_nodes(r.nodes)

    def map_nodes(self, nodes: list[Any]) -> ChatMessage:
        """The message of a parse's top nodes (``common_chat_peg_mapper``; a handler with its own mapper
        overrides this)."""
        m = _Mapper()
        for n in nodes:
            m.visit(n)
        return m.finish()


@dataclass
class Node:
    """One arena parser: ``kind`` and its fields (children are ids)."""

    kind: str
    children: tuple[int, ...] = ()
    text: str = ""                       # literal / rule name / tag / gbnf text / chars pattern
    delims: tuple[str, ...] = ()         # until / ac
    lo: int = 0
    hi: int = -1
    trigger: bool = False                # rule
    schema: Any = None                   # schema: the json_schema node
    extra: dict[str, Any] = field(default_factory=dict)


def _rule_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9-]+", "-", name)


def _format_literal(s: str) -> str:
    # format_literal (json-schema-to-grammar.cpp): \r \n " \\ escaped
    return '"' + re.sub(r'[\r\n"\\]', lambda m: {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}[m.group(0)],
                        s) + '"'


class _Any(_P):
    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        return _Res(SUCCESS, pos, pos + 1, (), pos) if pos < c.n else _Res(NEED_MORE, pos, pos, (), c.n)


class _And(_P):
    def __init__(self, child: _P) -> None:
        self.child = child

    def parse(self, c: _Ctx, pos: int) -> _Res:
        r = self.child.parse(c, pos)             # peg-parser.cpp:478: the child's result type, nothing consumed
        return _Res(r.type, pos, pos, (), r.hi)


class _Late(_P):
    """A reference resolved after the arena is built (rules may be recursive)."""

    def __init__(self) -> None:
        self.target: _P | None = None

    def parse(self, c: _Ctx, pos: int) -> _Res:
        assert self.target is not None
        return self.target.parse(c, pos)


class Builder:
    """``common_peg_parser_builder`` / ``common_chat_peg_builder``: every method adds parsers to the arena and
    returns the id of the last one (the arguments are ids already built)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.rules: dict[str, int] = {}

    def _add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1

    # ---- primitives ------------------------------------------------------------------------------------------
    def eps(self) -> int:
        return self._add(Node("eps"))

    def end(self) -> int:
        return self._add(Node("end"))

    def literal(self, s: str) -> int:
        return self._add(Node("lit", text=s))

    def space(self) -> int:
        return self._add(Node("space"))

    def any(self) -> int:
        return self._add(Node("any"))

    def until(self, delim: str) -> int:
        return self._add(Node("until", delims=(delim,)))

    def until_one_of(self, delims: Sequence[str]) -> int:
        return self._add(Node("until", delims=tuple(delims)))

    def rest(self) -> int:
        return self.until_one_of([])

    def chars(self, pattern: str, lo: int = 1, hi: int = -1) -> int:
        return self._add(Node("chars", text=pattern, lo=lo, hi=hi))

    def string_content(self, delim: str) -> int:
        return self._add(Node("str", text=delim))

    def _flat(self, kind: str, ids: Sequence[int]) -> list[int]:
        out: list[int] = []
        for i in ids:
            n = self.nodes[i]
            out.extend(n.children if n.kind == kind else (i,))
        return out

    def seq(self, *ids: int) -> int:
        """``sequence`` (nested sequences flattened); ``a + b`` is ``seq(a, b)``."""
        return self._add(Node("seq", tuple(self._flat("seq", ids))))

    def choice(self, *ids: int) -> int:
        """``choice`` (nested choices flattened); ``a | b`` is ``choice(a, b)``."""
        return self._add(Node("choice", tuple(self._flat("choice", ids))))

    def repeat(self, child: int, lo: int, hi: int) -> int:
        return self._add(Node("rep", (child,), lo=lo, hi=hi))

    def optional(self, child: int) -> int:
        return self.repeat(child, 0, 1)

    def zero_or_more(self, child: int) -> int:
        return self.repeat(child, 0, -1)

    def peek(self, child: int) -> int:
        return self._add(Node("and", (child,)))

    def negate(self, child: int) -> int:
        return self._add(Node("not", (child,)))

    def atomic(self, child: int) -> int:
        return self._add(Node("atomic", (child,)))

    def tag(self, tag: str, child: int) -> int:
        return self._add(Node("tag", (child,), text=tag))

    def gbnf(self, child: int, grammar: str) -> int:
        return self._add(Node("gbnf", (child,), text=grammar))

    def ac(self, child: int, delims: Sequence[str]) -> int:
        return self._add(Node("ac", (child,), delims=tuple(delims)))

    def schema(self, child: int, name: str, node: Any, raw: bool = False) -> int:
        return self._add(Node("schema", (child,), text=name, schema=node, extra={"raw": raw}))

    def ref(self, name: str) -> int:
        return self._add(Node("ref", text=name))

    def rule(self, name: str, child: int, trigger: bool = False) -> int:
        clean = _rule_name(name)
        self.rules[clean] = self._add(Node("rule", (child,), text=clean, trigger=trigger))
        return self.ref(clean)

    def trigger_rule(self, name: str, child: int) -> int:
        return self.rule(name, child, True)

    def rule_fn(self, name: str, fn: Callable[[], int], trigger: bool = False) -> int:
        """``rule(name, builder_fn)``: built once (a placeholder first, for recursion), then referenced."""
        clean = _rule_name(name)
        if clean in self.rules:
            return self.ref(clean)
        placeholder = self.any()
        self.rules[clean] = self._add(Node("rule", (placeholder,), text=clean, trigger=trigger))
        child = fn()
        self.rules[clean] = self._add(Node("rule", (child,), text=clean, trigger=trigger))
        return self.ref(clean)

    # ---- JSON (peg-parser.cpp:1220-1296) ---------------------------------------------------------------------
    def json_string(self) -> int:
        return self.rule_fn("json-string", lambda: self.seq(self.literal('"'), self.string_content('"'),
                                                            self.literal('"')))

    def json_number(self) -> int:
        def fn() -> int:
            d19 = self.chars("[1-9]", 1, 1)
            digits = self.chars("[0-9]")
            int_part = self.choice(self.literal("0"), self.seq(d19, self.chars("[0-9]", 0, -1)))
            frac = self.seq(self.literal("."), digits)
            exp = self.seq(self.choice(self.literal("e"), self.literal("E")), self.optional(self.chars("[+-]", 1, 1)),
                           digits)
            not_cont = self.negate(self.chars("[0-9.eE+-]", 1, 1))
            return self.seq(self.optional(self.literal("-")), int_part, self.optional(frac), self.optional(exp),
                            not_cont)
        return self.rule_fn("json-number", fn)

    def json_bool(self) -> int:
        return self.rule_fn("json-bool", lambda: self.choice(self.literal("true"), self.literal("false")))

    def json_null(self) -> int:
        return self.rule_fn("json-null", lambda: self.literal("null"))

    def json_object(self) -> int:
        def fn() -> int:
            ws = self.space()
            member = self.seq(self.json_string(), ws, self.literal(":"), ws, self.json())
            members = self.seq(member, self.zero_or_more(self.seq(ws, self.literal(","), ws, member)))
            return self.seq(self.literal("{"), ws, self.choice(self.literal("}"), self.seq(members, ws,
                                                                                            self.literal("}"))))
        return self.rule_fn("json-object", fn)

    def json_array(self) -> int:
        def fn() -> int:
            ws = self.space()
            elements = self.seq(self.json(), self.zero_or_more(self.seq(ws, self.literal(","), ws, self.json())))
            return self.seq(self.literal("["), ws, self.choice(self.literal("]"), self.seq(elements, ws,
                                                                                            self.literal("]"))))
        return self.rule_fn("json-array", fn)

    def json(self) -> int:
        return self.rule_fn("json-value", lambda: self.choice(self.json_object(), self.json_array(),
                                                              self.json_string(), self.json_number(),
                                                              self.json_bool(), self.json_null()))

    # ---- chat tags (chat-peg-parser.h) -----------------------------------------------------------------------
    def tagged_atomic(self, tag: str, child: int) -> int:
        """``atomic(tag(name, p))`` (tool_open, tool_close, tool_name, tool_arg_open / close / name)."""
        return self.atomic(self.tag(tag, child))

    def permute(self, prefix: str, parsers: Sequence[int], max_permute: int = 6) -> int:
        """``common_chat_peg_builder::permute``: every parser once, in any order (one rule per remaining set)."""
        if not parsers:
            return self.eps()
        if len(parsers) == 1 or len(parsers) > max_permute:
            return self.seq(*parsers)
        memo: dict[int, int] = {}

        def remaining_of(rem: int) -> int:
            if rem == 0:
                return self.eps()
            if rem in memo:
                return memo[rem]
            alts = self.choice()
            for i, p in enumerate(parsers):
                bit = 1 << i
                if rem & bit:
                    rest = remaining_of(rem & ~bit)
                    alts = self.choice(alts, self.seq(p, rest))
            memo[rem] = self.rule(f"{prefix}-{rem}", alts)
            return memo[rem]

        return remaining_of((1 << len(parsers)) - 1)

    # ---- GBNF (common_peg_arena::build_grammar) --------------------------------------------------------------
    def _effective(self, i: int) -> Node:
        while True:
            n = self.nodes[i]
            if n.kind in ("tag", "atomic") or (n.kind == "schema" and self._delegates(n)):
                i = n.children[0]
            else:
                return n

    @staticmethod
    def _delegates(n: Node) -> bool:
        return n.schema is None or (n.extra.get("raw", False) and _may_be_string(n.schema))

    def _reachable(self, start: int) -> set[str]:
        out: set[str] = set()
        stack = [start]
        seen_ids: set[int] = set()
        while stack:
            i = stack.pop()
            if i in seen_ids:
                continue
            seen_ids.add(i)
            n = self.nodes[i]
            if n.kind == "rule":
                if n.text in out:
                    continue
                out.add(n.text)
                stack.extend(n.children)
            elif n.kind == "ref":
                stack.append(self.rules[n.text])
            else:
                stack.extend(n.children)
        return out

    def grammar(self, root: int, *, lazy: bool) -> str:
        """The GBNF llama.cpp prints for the arena with root ``root`` (lazy: only the rules reachable from the
        trigger rules, and a root that is their alternation)."""
        from ..json_schema.converter import Converter
        from ..json_schema.json_text import b, u

        conv = Converter()

        def add_rules(text: str) -> None:
            for line in text.split("\n"):
                k, v = line.split(" ::= ", 1)
                conv.add_rule(k, v)

        def to_gbnf(i: int) -> str:
            n = self.nodes[i]
            k = n.kind
            if k in ("eps", "end", "and", "not"):
                return ""
            if k == "lit":
                return _format_literal(b(n.text))
            if k == "seq":
                parts = []
                for c in n.children:
                    g = to_gbnf(c)
                    if not g:
                        continue
                    parts.append(f"({g})" if self._effective(c).kind in ("choice", "seq") else g)
                return " ".join(parts)
            if k == "choice":
                return " | ".join(f"({to_gbnf(c)})" if self._effective(c).kind == "choice" else to_gbnf(c)
                                  for c in n.children)
            if k == "rep":
                g = to_gbnf(n.children[0])
                if self._effective(n.children[0]).kind in ("choice", "seq"):
                    g = f"({g})"
                return g + _quant(n.lo, n.hi)
            if k == "any":
                return "."
            if k == "space":
                return "space"
            if k == "chars":
                return n.text + _quant(n.lo, n.hi)
            if k == "str":
                d = n.text
                return f'( [^{d}\\\\] | "\\\\" ( [{d}\\\\/ bfnrt] | "u" [0-9a-fA-F]{{4}} ) )*'
            if k == "until":
                if not n.delims:
                    return ".*"
                add_rules(b(excluding_grammar(f"until-{i}", n.delims)))
                return f"until-{i}"
            if k == "ac":
                add_rules(b(including_grammar(f"ac-{i}", n.delims)))
                return f"ac-{i}"
            if k == "schema":
                if self._delegates(n):
                    return to_gbnf(n.children[0])
                return conv.visit(n.schema, "" if n.text == "root" else b(n.text))
            if k in ("rule", "ref"):
                return n.text
            if k in ("tag", "atomic"):
                return to_gbnf(n.children[0])
            if k == "gbnf":
                return b(n.text)
            raise ValueError(f"unknown parser kind {k}")

        if lazy:
            reach: set[str] = set()
            triggers = []
            for name, rid in self.rules.items():
                if self.nodes[rid].trigger:
                    triggers.append(name)
                    reach |= self._reachable(rid)
        else:
            reach = self._reachable(root)
        for name in sorted(self.rules):           # std::map order
            if name in reach:
                conv.add_rule(name, to_gbnf(self.nodes[self.rules[name]].children[0]))
        conv.add_rule("root", " | ".join(sorted(triggers)) if lazy else to_gbnf(root))
        conv.check_errors()
        return u(conv.format_grammar())

    # ---- parsing ---------------------------------------------------------------------------------------------
    def parser(self, root: int) -> _P:
        """The lenient parser of the arena from ``root`` (:mod:`constrained.chat.peg` semantics)."""
        memo: dict[int, _P] = {}
        rule_refs: dict[str, _Late] = {}

        def conv(i: int) -> _P:
            if i in memo:
                return memo[i]
            n = self.nodes[i]
            k = n.kind
            p: _P
            if k == "ref" or k == "rule":
                name = n.text
                late = rule_refs.get(name)
                if late is None:
                    late = rule_refs[name] = _Late()
                    rid = self.rules[name]
                    late.target = _Wrap("", conv(self.nodes[rid].children[0]), name)
                memo[i] = late
                return late
            if k == "eps":
                p = _Eps()
            elif k == "end":
                from .peg import _End
                p = _End()
            elif k == "lit":
                p = _Lit(n.text)
            elif k == "seq":
                p = _Seq(*[conv(c) for c in n.children])
            elif k == "choice":
                p = _Choice(*[conv(c) for c in n.children])
            elif k == "rep":
                p = _Rep(conv(n.children[0]), n.lo, n.hi)
            elif k == "and":
                p = _And(conv(n.children[0]))
            elif k == "not":
                p = _Not(conv(n.children[0]))
            elif k == "any":
                p = _Any()
            elif k == "space":
                p = _Space()
            elif k == "until":
                p = _Until(*n.delims)
            elif k == "chars":
                p = _chars(n.text, n.lo, n.hi)
            elif k == "str":
                p = _StrContent(n.text)
            elif k == "tag":
                p = _Wrap(n.text, conv(n.children[0]))
            elif k == "atomic":
                p = _Atomic(conv(n.children[0]))
            elif k in ("schema", "gbnf", "ac"):
                p = conv(n.children[0])
            else:
                raise ValueError(f"unknown parser kind {k}")
            memo[i] = p
            return p

        return conv(root)


_CHAR_CLASSES = {"[1-9]": "123456789", "[0-9]": "0123456789", "[+-]": "+-", "[0-9.eE+-]": "0123456789.eE+-",
                 "[A-Za-z0-9_-]": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"}


def _chars(pattern: str, lo: int, hi: int) -> _P:
    allowed = _CHAR_CLASSES.get(pattern)
    if allowed is None:                 # another bracket class ([^:}]): the same class as a Python regex
        if not (pattern.startswith("[") and pattern.endswith("]")):
            raise ValueError(f"character class not supported here: {pattern}")
        p = _Chars(" ", lo, hi)
        p.run = re.compile(pattern + ("*" if hi == -1 else f"{{0,{hi}}}"))
        return p
    return _Chars(allowed, lo, hi)


def _quant(lo: int, hi: int) -> str:
    if lo == 0 and hi == 1:
        return "?"
    if lo == 0 and hi == -1:
        return "*"
    if lo == 1 and hi == -1:
        return "+"
    if hi == -1:
        return f"{{{lo},}}"
    if lo == hi:
        return "" if lo == 1 else f"{{{lo}}}"
    return f"{{{lo},{hi}}}"


# ---- schema type sets (common_chat_schema::value_types / may_be_string, common/json-schema.cpp) ----------------
ALL_TYPES = frozenset({"null", "boolean", "number", "integer", "string", "array", "object"})


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def value_types(node: Any, _visited: frozenset[int] = frozenset()) -> frozenset[str]:
    """``common_chat_schema::value_types``: the JSON types a schema node's values may have."""
    from ..json_schema import nodes as N

    k = node.kind
    simple = {N.NULL: {"null"}, N.BOOLEAN: {"boolean"}, N.NUMBER: {"number", "integer"}, N.INTEGER: {"integer"},
              N.STRING: {"string"}, N.ARRAY: {"array"}, N.TUPLE: {"array"}, N.OBJECT: {"object"}}
    if k == N.ANY:
        return ALL_TYPES
    if k in simple:
        return frozenset(simple[k])
    if k == N.CONST or k == N.ENUM:
        return frozenset(_json_type(v) for v in node.values)
    if k == N.REF:
        t = node.target
        if t is None or id(t) in _visited:
            return frozenset()
        return value_types(t, _visited | {id(t)})
    if k == N.ANY_OF:
        out: frozenset[str] = frozenset()
        for c in node.children:
            out |= value_types(c, _visited)
        return out
    if k == N.ALL_OF:
        out = ALL_TYPES
        for c in node.children:
            out &= value_types(c, _visited)
        return out
    return frozenset()


def _may_be_string(node: Any, _visited: frozenset[int] = frozenset()) -> bool:
    from ..json_schema import nodes as N

    k = node.kind
    if k == N.STRING:
        return True
    if k == N.CONST or k == N.ENUM:
        return any(isinstance(v, str) for v in node.values)
    if k == N.REF:
        t = node.target
        return t is not None and id(t) not in _visited and _may_be_string(t, _visited | {id(t)})
    if k == N.ANY_OF:
        return any(_may_be_string(c, _visited) for c in node.children)
    if k == N.ALL_OF:
        kids = [c for c in node.children if c.kind != N.ANY]
        return all(_may_be_string(c, _visited) for c in kids) and bool(kids)
    return False

