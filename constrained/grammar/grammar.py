"""``Grammar``: a GBNF grammar checked as llama.cpp checks it, printable back to GBNF, bindable to a vocabulary.

Where it knowingly differs from ``llama_sampler_init_grammar``:

- an empty text (or one starting with NUL) is an error here; llama.cpp then makes a sampler without a grammar;
- grammars llama.cpp never finishes loading are refused (``{m,n}`` with m > n; left recursion through rules that
  can be empty without a literally empty alternative, when it grows the stack), as are grammars beyond
  :class:`~constrained.grammar.gbnf.GbnfLimits` (nesting, size), which can overflow llama.cpp's C stack or memory;
- without a vocabulary ``<text>`` token references are only checked for syntax; :meth:`Grammar.parsed`
  resolves them (llama.cpp needs the vocabulary while parsing).

Example:
    >>> g = Grammar.from_gbnf('root ::= "a"+ | "b"')
    >>> g.parsed().rules[0]
    ((3, 97), (2, 1), (1, 0), (3, 98), (0, 0))
    >>> print(g, end="")
    root ::= "a" root-1 | "b"
    root-1 ::= "a" root-1 | ""
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..errors import GrammarLimitError, GrammarSyntaxError, SchemaError
from ..json_schema import convert_json_schema
from .gbnf import DEFAULT_LIMITS, GbnfLimits, error_at, parse_gbnf, to_bytes
from .ir import (
    TEXT_TOKEN,
    TEXT_TOKEN_NOT,
    Element,
    ElementType,
    ParsedGrammar,
    endless_expansion_index,
    left_recursion_index,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..vocab import Vocabulary
    from .lazy import LazyMatcher
    from .matcher import GrammarMatcher

__all__ = ["Grammar", "format_gbnf"]

_BUILDERS: dict[str, Any] = {}
"""Constructors that need a subclass of :class:`Grammar` (``structural_tag``: registered by
:mod:`constrained.grammar.lazy_grammar`, which the package imports)."""

_T = ElementType


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar as llama.cpp would load it (``llama_grammar_init_impl`` would not return NULL).

    Attributes:
        source: the GBNF text it was parsed from.
        root: the start rule's name.
        rules: llama.cpp's element vectors, rule id = index; ``<text>`` token references are left unresolved
            (``TEXT_TOKEN``) until :meth:`parsed` is given a vocabulary.
        symbol_ids: rule name → id, helper rules (``root_1``...) included, in id order.
        token_texts: the ``<text>`` token references, in order of first appearance.
        unenforced: notes on constraints a generator could not express (filled by ``from_json_schema``).
        unique_rules: rules of JSON arrays whose items must be distinct (``from_json_schema(enforce="all")``):
            :meth:`matcher` gives a :class:`~constrained.grammar.unique_items.UniqueItemsMatcher`, which refuses
            a repeated item; the GBNF text (:meth:`to_gbnf`) cannot say it.
    """

    source: str
    root: str = "root"
    rules: tuple[tuple[Element, ...], ...] = ()
    symbol_ids: Mapping[str, int] = field(default_factory=dict, hash=False, repr=False)
    token_texts: tuple[bytes, ...] = ()
    unenforced: tuple = ()
    token_offsets: tuple[int, ...] = field(default=(), compare=False, repr=False)
    unique_rules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.symbol_ids, MappingProxyType):
            object.__setattr__(self, "symbol_ids", MappingProxyType(dict(self.symbol_ids)))
        object.__setattr__(self, "_cache", weakref.WeakKeyDictionary())
        object.__setattr__(self, "_cache_lock", threading.Lock())
        object.__setattr__(self, "_plain", None)

    # ------------------------------------------------------------------------------------------ building

    @classmethod
    def from_gbnf(cls, text: str | bytes, root: str = "root", vocab: Vocabulary | None = None, *,
                  limits: GbnfLimits = DEFAULT_LIMITS) -> Grammar:
        """Parse and check ``text`` as ``llama_grammar_init_impl(vocab, text, root)`` does.

        Without ``vocab``, ``<text>`` token references are only checked for syntax; :meth:`parsed` resolves
        them later. With it, they are resolved now, in text order, as llama.cpp does.

        Raises:
            GrammarSyntaxError: llama.cpp would refuse the grammar (message in llama.cpp's words, with line,
                column and caret).
            GrammarLimitError: the grammar exceeds ``limits``, or llama.cpp would never finish with it
                (``{m,n}`` with m > n; left recursion it misses and expands forever, see
                :func:`constrained.grammar.ir.endless_expansion_index`).

        Example:
            >>> Grammar.from_gbnf('root ::= [0-9]{2,4}').symbol_ids["root_2"]
            2
        """
        if not isinstance(text, (str, bytes, bytearray)):
            raise GrammarSyntaxError(f"a GBNF grammar must be str or bytes, got {type(text).__name__}")
        if not isinstance(root, str):
            raise GrammarSyntaxError(f"the root rule name must be a str, got {type(root).__name__}")
        resolve = _resolver(vocab) if vocab is not None else None
        layout = parse_gbnf(bytes(text) if isinstance(text, bytearray) else text, resolve_token=resolve,
                            limits=limits)
        data = layout.text
        if not layout.rules:
            raise GrammarSyntaxError("failed to parse grammar: it defines no rules")
        if root not in layout.symbol_ids:
            raise GrammarSyntaxError(f"grammar does not contain a '{root}' symbol")
        names = {v: k for k, v in layout.symbol_ids.items()}
        bad = left_recursion_index(layout.rules)
        if bad is not None:
            raise error_at(data, layout.definitions.get(bad, 0),
                           f"unsupported grammar, left recursion detected for nonterminal at index {bad} "
                           f"(rule '{names[bad]}')")
        bad = endless_expansion_index(layout.rules, layout.symbol_ids[root])
        if bad is not None:
            raise error_at(data, layout.definitions.get(bad, 0),
                           f"unsupported grammar, left recursion through rules that can match the empty string at "
                           f"nonterminal index {bad} (rule '{names[bad]}'): llama.cpp misses it and then expands "
                           "it forever", limit=True)
        source = text if isinstance(text, str) else data.decode("utf-8", "surrogateescape")
        grammar = cls(source, root, layout.rules, layout.symbol_ids, layout.token_texts,
                      token_offsets=layout.token_offsets)
        if vocab is not None and layout.resolved is not None:
            grammar._cache[vocab] = grammar._substitute(layout.resolved)
        return grammar

    @classmethod
    def from_name(cls, name: str) -> Grammar:
        """A bundled grammar (see ``constrained.grammars``), e.g. ``Grammar.from_name("json")``."""
        from ..grammars import load

        return cls.from_gbnf(load(name))

    bundled = from_name

    @classmethod
    def from_json_schema(cls, schema: Any, *, strict: bool = False, enforce: str = "llama.cpp",
                         limits: GbnfLimits = DEFAULT_LIMITS, resources: Any = None) -> Grammar:
        """The grammar llama-server builds for a JSON schema (``json_schema_to_grammar``), with ``unenforced`` set.

        ``strict=True`` raises SchemaError instead when some keyword is not enforced. ``enforce="all"`` builds a
        grammar that enforces every keyword a grammar can (number bounds, full regex patterns, formats, ...) instead
        of llama.cpp's text; what stays unenforced is still in ``unenforced``. ``resources`` (``enforce="all"``):
        the documents of remote ``$ref``s, a mapping URI -> schema or a function (never fetched; see
        ``constrained.json_schema.resources``).

        >>> Grammar.from_json_schema({"type": "array", "items": {"type": "boolean"}}).unenforced
        ()
        >>> Grammar.from_json_schema({"type": "string", "pattern": "^[0-9]{5}$"}, enforce="all").unenforced
        ()

        Raises:
            SchemaError: an invalid schema (with ``.path``), a keyword left unenforced under ``strict``, a grammar
                that llama.cpp builds but cannot load either, or one beyond ``limits`` (the message names the limit).
        """
        result = convert_json_schema(schema, enforce=enforce, resources=resources)
        if strict and result.unenforced:
            first = result.unenforced[0]
            listing = "\n".join(f"  {k}" for k in result.unenforced)
            raise SchemaError(f"JSON schema error at {first.path}: the grammar does not enforce "
                              f"{len(result.unenforced)} keyword(s):\n{listing}", path=first.path)
        text = result.gbnf.encode("utf-8", "surrogateescape")  # bytes: a pattern may have split a UTF-8 character
        try:
            grammar = cls.from_gbnf(text, limits=limits)
        except GrammarLimitError as e:
            where = result.path_of_rule(e.source_line.split("::=")[0].strip()) if e.source_line else "#"
            raise SchemaError(f"JSON schema error at {where}: the grammar built for this schema exceeds a limit of "
                              f"the grammar engine (from_json_schema(limits=GbnfLimits(...)) raises it): {e}",
                              path=where) from e
        except GrammarSyntaxError as e:
            # llama.cpp builds this grammar but cannot load it either (e.g. left recursion through anyOf and $ref)
            where = result.path_of_rule(e.source_line.split("::=")[0].strip()) if e.source_line else "#"
            raise SchemaError(f"JSON schema error at {where}: llama.cpp cannot load the grammar it builds for this "
                              f"schema: {e}", path=where) from e
        return dataclasses.replace(grammar, unenforced=result.unenforced, unique_rules=result.unique_rules)

    @classmethod
    def from_regex(cls, pattern: str, *, limits: GbnfLimits = DEFAULT_LIMITS) -> Grammar:
        """The texts ``pattern`` matches whole (vLLM's ``regex``, xgrammar's ``Grammar.from_regex``).

        The pattern is ECMA-262 as a JSON Schema ``pattern`` reads it (see
        :mod:`constrained.json_schema.regex_gbnf`), anchored at both ends; ``.`` excludes line terminators.

        >>> g = Grammar.from_regex(r"[0-9]{3}-[a-z]+")
        >>> print(g.to_gbnf().splitlines()[0])
        root ::= [0-9] root-s1

        Raises:
            GrammarSyntaxError: a pattern outside the supported syntax (lookarounds, back-references, word
                boundaries, ...), or one that matches nothing.
        """
        from ..json_schema.regex_gbnf import regex_to_gbnf

        return cls.from_gbnf(regex_to_gbnf(pattern), limits=limits)

    @classmethod
    def from_choice(cls, choices: Sequence[str]) -> Grammar:
        """Exactly one of ``choices`` (vLLM's ``choice``).

        >>> print(Grammar.from_choice(["yes", "no"]), end="")
        root ::= "yes" | "no"

        Raises:
            GrammarSyntaxError: no choices, or one that is not a string.
        """
        from .kinds import choice_gbnf

        return cls.from_gbnf(choice_gbnf(choices))

    @classmethod
    def from_structural_tag(cls, structural_tag: Any, triggers: Sequence[str] | None = None, *,
                            enforce: str = "llama.cpp") -> Grammar:
        """xgrammar's structural tags: free text until a trigger, then a tag's ``begin``, JSON per its schema and
        its ``end``, then free text again (see :mod:`constrained.grammar.kinds` for the semantics).

        ``structural_tag`` is vLLM's ``{"structures": [{"begin", "schema", "end"}...], "triggers": [...]}`` (a
        dict or its JSON text), a list of structures with ``triggers`` (xgrammar's legacy
        ``from_structural_tag(tags, triggers)``), or xgrammar's ``{"type": "structural_tag", "format":
        {"type": "triggered_tags", ...}}`` with ``json_schema`` contents. Without ``at_least_one`` the result is a
        :class:`~constrained.grammar.lazy_grammar.LazyGrammar` (unconstrained until the first trigger).

        >>> g = Grammar.from_structural_tag([{"begin": "<f>", "schema": {"type": "integer"}, "end": "</f>"}],
        ...                                 ["<f"])
        >>> type(g).__name__, g.trigger_patterns
        ('LazyGrammar', ('<f',))

        Raises:
            GrammarSyntaxError: a malformed structural tag (a begin that starts with no trigger, ...).
            SchemaError: a schema the converter refuses.
        """
        return _BUILDERS["structural_tag"](cls, structural_tag, triggers, enforce)

    # ------------------------------------------------------------------------------------------ views

    @property
    def root_id(self) -> int:
        return self.symbol_ids[self.root]

    @property
    def rule_names(self) -> tuple[str, ...]:
        """Rule id → name (llama.cpp's names: helpers are ``<rule>_<id>``)."""
        names = [""] * len(self.rules)
        for name, sid in self.symbol_ids.items():
            if sid < len(names):
                names[sid] = name
        return tuple(names)

    def parsed(self, vocab: Vocabulary | None = None) -> ParsedGrammar:
        """llama.cpp's rules for ``vocab``, with ``<text>`` token references resolved (cached per vocabulary).

        A text reference resolves as in ``parse_token``: ``vocab.tokenize(text, parse_special=True)`` must give
        exactly one token.

        Raises:
            GrammarSyntaxError: ``invalid token '<text>'``, or ``no vocab to parse token`` without a vocabulary.
        """
        if not self.token_texts:
            plain = self._plain
            if plain is None:
                plain = ParsedGrammar(self.rules, self.symbol_ids, self.root_id)
                object.__setattr__(self, "_plain", plain)
            return plain
        if vocab is None:
            raise self._token_error(0, "no vocab to parse token at")
        with self._cache_lock:
            cached = self._cache.get(vocab)
        if cached is not None:
            return cached
        resolve = _resolver(vocab)
        ids = []
        for i, text in enumerate(self.token_texts):
            tid = resolve(text)
            if tid is None:
                raise self._token_error(i, "invalid token")
            ids.append(tid)
        parsed = self._substitute(tuple(ids))
        with self._cache_lock:
            self._cache[vocab] = parsed
        return parsed

    def matcher(self, vocab: Vocabulary, *, trigger_patterns: Sequence[str] | None = None,
                trigger_tokens: Sequence[int] | None = None) -> GrammarMatcher | LazyMatcher:
        """A matcher over ``vocab`` (see ``constrained.grammar.matcher``).

        With ``trigger_patterns`` or ``trigger_tokens`` (even empty) the grammar is lazy, as
        ``llama_sampler_init_grammar_lazy_patterns``: a :class:`~constrained.grammar.lazy.LazyMatcher` that allows
        everything until a trigger, then replays the text from the trigger into the grammar.
        """
        from .matcher import compile_grammar

        compiled = compile_grammar(self, vocab)
        fresh = None
        if self.unique_rules:
            from .unique_items import UniqueItemsMatcher, unique_arrays

            fresh = UniqueItemsMatcher(compiled, unique_arrays(compiled, tuple(self.symbol_ids[r]
                                                                             for r in self.unique_rules)))
        if trigger_patterns is None and trigger_tokens is None:
            return fresh if fresh is not None else compiled.matcher()
        from .lazy import LazyMatcher

        return LazyMatcher(compiled, trigger_patterns or (), trigger_tokens or (), fresh=fresh)

    def with_root(self, root: str) -> Grammar:
        """The same rules started from another rule (checked as ``from_gbnf(source, root)`` would)."""
        if root not in self.symbol_ids:
            raise GrammarSyntaxError(f"grammar does not contain a '{root}' symbol")
        return dataclasses.replace(self, root=root)

    def to_gbnf(self) -> str:
        """GBNF that llama.cpp parses to the same rules (up to helper names and ids); see :func:`format_gbnf`."""
        return format_gbnf(self.rules, self.rule_names, self.token_texts)

    def __str__(self) -> str:
        return self.to_gbnf()

    def __reduce__(self) -> tuple:
        # the per-vocabulary cache and its lock are not part of the value
        return (_rebuild, (self.source, self.root, self.rules, dict(self.symbol_ids), self.token_texts,
                           self.unenforced, self.token_offsets, self.unique_rules))

    def __repr__(self) -> str:
        head = self.source.strip().splitlines()[0] if self.source.strip() else ""
        if len(head) > 40:
            head = head[:37] + "..."
        return f"Grammar({head!r}, root={self.root!r}, rules={len(self.rules)})"

    # ------------------------------------------------------------------------------------------ internals

    def _substitute(self, ids: tuple[int, ...]) -> ParsedGrammar:
        rules = tuple(
            tuple((int(_T.TOKEN), ids[v]) if k == TEXT_TOKEN else (int(_T.TOKEN_NOT), ids[v])
                  if k == TEXT_TOKEN_NOT else (k, v) for k, v in rule)
            for rule in self.rules)
        return ParsedGrammar(rules, self.symbol_ids, self.root_id)

    def _token_error(self, i: int, what: str) -> GrammarSyntaxError:
        text = self.token_texts[i].decode("utf-8", "replace")
        data = to_bytes(self.source)
        nul = data.find(b"\0")
        if nul != -1:
            data = data[:nul]
        pos = self.token_offsets[i] if i < len(self.token_offsets) else 0
        message = f"{what} '{text}'"
        if what == "invalid token":
            message += ": it must tokenize to exactly one token"
        return error_at(data, pos, message)


def _rebuild(source: str, root: str, rules: tuple, symbol_ids: dict, token_texts: tuple, unenforced: tuple,
             token_offsets: tuple, unique_rules: tuple = ()) -> Grammar:
    return Grammar(source, root, rules, symbol_ids, token_texts, unenforced, token_offsets, unique_rules)


def _resolver(vocab: Vocabulary):  # noqa: ANN202
    """``parse_token``'s lookup: the text must tokenize (special tokens parsed) to exactly one token."""

    def resolve(text: bytes) -> int | None:
        ids = vocab.tokenize(text, parse_special=True)
        return int(ids[0]) if len(ids) == 1 else None

    return resolve


# ---------------------------------------------------------------------------------------------- printing

def _escape(cp: int, in_class: bool, first: bool) -> str:
    if cp == 0x22 and not in_class:
        return '\\"'
    if cp == 0x5C:
        return "\\\\"
    if in_class and cp in (0x5D, 0x2D):
        return "\\" + chr(cp)
    if in_class and first and cp == 0x5E:
        return "\\x5E"
    if cp == 0x0A:
        return "\\n"
    if cp == 0x0D:
        return "\\r"
    if cp == 0x09:
        return "\\t"
    if 0x20 <= cp < 0x7F:
        return chr(cp)
    if cp < 0x80:
        return f"\\x{cp:02X}"
    if cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF and chr(cp).isprintable():
        return chr(cp)
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _printable_names(names: tuple[str, ...]) -> list[str]:
    """Rule names GBNF accepts: helpers ``root_12`` become ``root-12`` (made unique if a rule has that name)."""
    taken = set(names)
    out = []
    for name in names:
        if "_" in name:
            candidate = name.replace("_", "-")
            while candidate in taken:
                candidate += "-h"
            taken.add(candidate)
            name = candidate
        out.append(name)
    return out


def _format_alternative(elements: list[Element], names: list[str], token_texts: tuple[bytes, ...]) -> str:
    parts: list[str] = []
    literal: list[str] = []
    i, n = 0, len(elements)
    while i < n:
        kind, value = elements[i]
        nxt = elements[i + 1][0] if i + 1 < n else None
        if kind == _T.CHAR and nxt not in (_T.CHAR_ALT, _T.CHAR_RNG_UPPER):
            literal.append(_escape(value, False, False))
            i += 1
            continue
        if literal:
            parts.append('"' + "".join(literal) + '"')
            literal = []
        if kind in (_T.CHAR, _T.CHAR_NOT):
            body = ["[^" if kind == _T.CHAR_NOT else "[", _escape(value, True, kind == _T.CHAR)]
            i += 1
            while i < n and elements[i][0] in (_T.CHAR_ALT, _T.CHAR_RNG_UPPER):
                k, v = elements[i]
                body.append(("-" if k == _T.CHAR_RNG_UPPER else "") + _escape(v, True, False))
                i += 1
            parts.append("".join(body) + "]")
            continue
        if kind == _T.CHAR_ANY:
            parts.append(".")
        elif kind == _T.RULE_REF:
            parts.append(names[value])
        elif kind == _T.TOKEN:
            parts.append(f"<[{value}]>")
        elif kind == _T.TOKEN_NOT:
            parts.append(f"!<[{value}]>")
        elif kind in (TEXT_TOKEN, TEXT_TOKEN_NOT):
            text = token_texts[value].decode("utf-8", "surrogateescape")
            parts.append(("!" if kind == TEXT_TOKEN_NOT else "") + text)
        else:
            raise ValueError(f"element {(kind, value)} cannot start a GBNF item")
        i += 1
    if literal:
        parts.append('"' + "".join(literal) + '"')
    return " ".join(parts) if parts else '""'


def format_gbnf(rules: tuple[tuple[Element, ...], ...], rule_names: tuple[str, ...],
                token_texts: tuple[bytes, ...] = ()) -> str:
    """Print rules as GBNF, one line per rule in id order.

    Re-parsing the text gives the same rules up to a renumbering of the rule ids (every item prints as
    exactly the elements it came from; an empty alternative prints as ``""``, which adds no element).
    """
    names = _printable_names(rule_names)
    used = {v for rule in rules for k, v in rule if k in (TEXT_TOKEN, TEXT_TOKEN_NOT)}
    # a token reference whose element a {0} removed still has to tokenize, as llama.cpp resolves it while
    # parsing: keep it as "<text>{0}", which adds neither an element nor a rule
    unused = "".join(f" {token_texts[i].decode('utf-8', 'surrogateescape')}{{0}}"
                     for i in range(len(token_texts)) if i not in used)
    lines = []
    for rid, rule in enumerate(rules):
        alternatives: list[list[Element]] = [[]]
        for kind, value in rule:
            if kind == _T.END:
                break
            if kind == _T.ALT:
                alternatives.append([])
            else:
                alternatives[-1].append((kind, value))
        body = " | ".join(_format_alternative(a, names, token_texts) for a in alternatives)
        lines.append(f"{names[rid]} ::= {body}{unused if rid == 0 else ''}")
    return "\n".join(lines) + "\n"
