"""The constraint kinds of vLLM, SGLang and Outlines beside GBNF and JSON schemas: ``choice``, ``regex`` and
xgrammar's structural tags, each as GBNF for our engine (see :meth:`Grammar.from_choice`,
:meth:`Grammar.from_regex`, :meth:`Grammar.from_structural_tag`).

**Structural tags** (xgrammar's ``Grammar.from_structural_tag(tags, triggers)``, vLLM's ``structural_tag``
``{"structures": [{"begin", "schema", "end"}...], "triggers": [...]}``, or xgrammar's
``{"type": "structural_tag", "format": {"type": "triggered_tags", ...}}`` with tag contents of type
``json_schema``): free text until one of the triggers appears, then one of the tags whose ``begin`` starts with that
trigger, the JSON its schema describes (converted as llama-server converts schemas), its ``end``, and free text
again, until the next trigger. Generation may end anywhere in free text, never inside a tag. Triggers are found
where they first end (an Aho-Corasick automaton over code points; the same as xgrammar's dispatch): at
``"aaab"`` with the trigger ``"aa"`` the tag must begin at the first ``a``.

The waiting phase before the first trigger is a lazy grammar (:class:`~constrained.grammar.lazy_grammar.LazyGrammar`,
llama.cpp's lazy sampler: nothing masked until a trigger, then the text from the trigger is replayed into the
grammar); after the first tag the free text is the automaton written as GBNF rules. With ``at_least_one`` the
output must start with a tag (as in xgrammar: no free text before the first one), a plain grammar;
``stop_after_first`` ends the output after the first tag.

Example:
    >>> print(choice_gbnf(["yes", 'a "b"']), end="")
    root ::= "yes" | "a \\"b\\""
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import GrammarSyntaxError

__all__ = ["StructuralTag", "Tag", "choice_gbnf", "gbnf_literal", "parse_structural_tag", "structural_tag_gbnf"]


def gbnf_literal(s: str) -> str:
    """``s`` as a GBNF string literal (quotes, backslashes and control characters escaped).

    >>> gbnf_literal('a"\\n')
    '"a\\\\"\\\\x0A"'
    """
    out = []
    for ch in s:
        c = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif c < 0x20 or c == 0x7F:
            out.append(f"\\x{c:02X}")
        elif 0xD800 <= c <= 0xDFFF:
            raise GrammarSyntaxError(f"a lone surrogate U+{c:04X} has no UTF-8 text")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choice_gbnf(choices: Sequence[str]) -> str:
    """GBNF whose ``root`` is exactly one of ``choices`` (vLLM's ``choice``)."""
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence):
        raise GrammarSyntaxError("choices must be a list of strings")
    if not choices:
        raise GrammarSyntaxError("choice needs at least one alternative")
    for c in choices:
        if not isinstance(c, str):
            raise GrammarSyntaxError(f"every choice must be a str, got {type(c).__name__}")
    return "root ::= " + " | ".join(gbnf_literal(c) for c in choices) + "\n"


# ---------------------------------------------------------------------------------------------- structural tags

@dataclass(frozen=True)
class Tag:
    """One structure: ``begin``, then JSON of ``schema``, then ``end``."""

    begin: str
    schema: Any
    end: str


@dataclass(frozen=True)
class StructuralTag:
    """Tags dispatched by triggers (xgrammar's ``triggered_tags``)."""

    tags: tuple[Tag, ...]
    triggers: tuple[str, ...]
    at_least_one: bool = False
    stop_after_first: bool = False


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise GrammarSyntaxError(f"structural tag: {what} must be a string, got {type(value).__name__}")
    return value


def _schema(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as err:
            raise GrammarSyntaxError(f"structural tag: a schema given as text is not JSON: {err}") from err
    if hasattr(value, "model_json_schema"):
        return value.model_json_schema()
    if not isinstance(value, (Mapping, bool)):
        raise GrammarSyntaxError(f"structural tag: a schema must be a JSON schema, got {type(value).__name__}")
    return value


def _tag(item: Any) -> Tag:
    if isinstance(item, Tag):
        return item
    get = item.get if isinstance(item, Mapping) else lambda k, d=None: getattr(item, k, d)
    schema = get("schema", None)
    if schema is None:
        schema = get("schema_", None)
    if schema is None:
        raise GrammarSyntaxError("structural tag: every structure needs 'begin', 'schema' and 'end'")
    return Tag(_str(get("begin"), "'begin'"), _schema(schema), _str(get("end"), "'end'"))


def _new_format(fmt: Any) -> StructuralTag:
    if not isinstance(fmt, Mapping) or fmt.get("type") != "triggered_tags":
        kind = fmt.get("type") if isinstance(fmt, Mapping) else type(fmt).__name__
        raise GrammarSyntaxError(f"structural tag: only the 'triggered_tags' format is supported, got {kind!r}")
    unknown = set(fmt) - {"type", "triggers", "tags", "at_least_one", "stop_after_first", "excludes"}
    if unknown:
        raise GrammarSyntaxError(f"structural tag: unknown keys {sorted(unknown)} in triggered_tags")
    if fmt.get("excludes"):
        raise GrammarSyntaxError("structural tag: 'excludes' is not supported")
    tags = []
    for t in fmt.get("tags") or ():
        if not isinstance(t, Mapping) or t.get("type", "tag") != "tag":
            raise GrammarSyntaxError("structural tag: triggered_tags takes tags of type 'tag'")
        content = t.get("content")
        if not isinstance(content, Mapping) or content.get("type") != "json_schema" or \
                content.get("style", "json") != "json":
            raise GrammarSyntaxError("structural tag: only 'json_schema' contents (style 'json') are supported")
        end = t.get("end")
        if isinstance(end, list) and len(end) == 1:
            end = end[0]
        tags.append(Tag(_str(t.get("begin"), "'begin'"), _schema(content.get("json_schema")), _str(end, "'end'")))
    return StructuralTag(tuple(tags), tuple(_str(x, "a trigger") for x in fmt.get("triggers") or ()),
                         bool(fmt.get("at_least_one", False)), bool(fmt.get("stop_after_first", False)))


def parse_structural_tag(spec: Any = None, triggers: Sequence[str] | None = None) -> StructuralTag:
    """Read a structural tag in any of the shapes xgrammar and vLLM take (see the module's notes).

    ``spec`` is a list of structures (with ``triggers``), a dict (or its JSON text) with ``structures`` and
    ``triggers``, or xgrammar's ``{"type": "structural_tag", "format": {"type": "triggered_tags", ...}}``.

    >>> st = parse_structural_tag([{"begin": "<f>", "schema": {"type": "integer"}, "end": "</f>"}], ["<f"])
    >>> st.triggers, st.tags[0].end
    (('<f',), '</f>')
    """
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except ValueError as err:
            raise GrammarSyntaxError(f"structural tag: not JSON: {err}") from err
    if isinstance(spec, StructuralTag):
        st = spec
    elif triggers is not None:
        if isinstance(triggers, (str, bytes)):
            raise GrammarSyntaxError("structural tag: triggers must be a list of strings")
        if isinstance(spec, Mapping) or not isinstance(spec, Sequence):
            raise GrammarSyntaxError("structural tag: with triggers, the first argument is the list of structures")
        st = StructuralTag(tuple(_tag(x) for x in spec), tuple(_str(t, "a trigger") for t in triggers))
    elif isinstance(spec, Mapping) and "structures" in spec:
        unknown = set(spec) - {"type", "structures", "triggers"}
        if unknown:
            raise GrammarSyntaxError(f"structural tag: unknown keys {sorted(unknown)}")
        trig = spec.get("triggers")
        if not isinstance(trig, Sequence) or isinstance(trig, (str, bytes)):
            raise GrammarSyntaxError("structural tag: 'triggers' must be a list of strings")
        structures = spec["structures"]
        if not isinstance(structures, Sequence) or isinstance(structures, (str, bytes)):
            raise GrammarSyntaxError("structural tag: 'structures' must be a list")
        st = StructuralTag(tuple(_tag(x) for x in structures), tuple(_str(t, "a trigger") for t in trig))
    elif isinstance(spec, Mapping) and "format" in spec:
        if spec.get("type", "structural_tag") != "structural_tag":
            raise GrammarSyntaxError("structural tag: 'type' must be 'structural_tag'")
        st = _new_format(spec["format"])
    else:
        raise GrammarSyntaxError("structural tag: expected {'structures': [...], 'triggers': [...]}, "
                                 "{'type': 'structural_tag', 'format': {...}} or (structures, triggers)")
    if not st.triggers:
        raise GrammarSyntaxError("structural tag: at least one trigger is needed")
    if any(not t for t in st.triggers):
        raise GrammarSyntaxError("structural tag: a trigger cannot be empty")
    if not st.tags:
        raise GrammarSyntaxError("structural tag: at least one structure is needed")
    for tag in st.tags:
        n = sum(tag.begin.startswith(t) for t in st.triggers)
        if n != 1:
            raise GrammarSyntaxError(f"structural tag: the begin {tag.begin!r} must start with exactly one trigger "
                                     f"({'none' if n == 0 else n} of {list(st.triggers)} do)")
    return st


def _trigger_of(tag: Tag, triggers: tuple[str, ...]) -> str:
    return next(t for t in triggers if tag.begin.startswith(t))


def _class(chars: Sequence[int], negate: bool = False) -> str:
    from ..json_schema.regex import gbnf_class

    if not chars:
        return "[\\x00-\\U0010FFFF]" if negate else "[^\\x00-\\U0010FFFF]"
    ranges = []
    for c in sorted(chars):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    body = gbnf_class(tuple((a, b) for a, b in ranges))
    return "[^" + body[1:] if negate else body


def _free_text(triggers: tuple[str, ...], name: str, after: Mapping[str, str], can_end: bool) -> list[str]:
    """Rules ``name-<q>`` for text that has no trigger yet (state = the longest trigger prefix it ends with); the
    character completing trigger ``t`` continues with rule ``after[t]``. Returns the rules (start: ``name-0``)."""
    prefixes = sorted({t[:k] for t in triggers for k in range(len(t))}, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(prefixes)}
    alphabet = sorted({ord(c) for t in triggers for c in t})
    by_len = sorted(triggers, key=len, reverse=True)
    lines = []
    for p in prefixes:
        targets: dict[str, list[int]] = {}
        for c in alphabet:
            s = p + chr(c)
            done = next((t for t in by_len if s.endswith(t)), None)      # the earliest-starting trigger ending here
            if done is not None:
                target = after[done]
            else:
                k = next(k for k in range(len(s) + 1) if s[k:] in index)  # the longest suffix still a prefix
                target = f"{name}-{index[s[k:]]}"
            targets.setdefault(target, []).append(c)
        home = set(targets.pop(f"{name}-0", ()))   # characters that lead back to the start join the negated class
        alts = [f"{_class([c for c in alphabet if c not in home], negate=True)} {name}-0"]
        alts += [f"{_class(cs)} {target}" for target, cs in targets.items()]
        if can_end:
            alts.append('""')
        lines.append(f"{name}-{index[p]} ::= " + " | ".join(alts))
    return lines


JsonRules = Callable[[Any, str], tuple[str, list[str]]]
"""``(schema, prefix) -> (start rule, GBNF lines)``: a schema's rules with every name prefixed."""


def structural_tag_gbnf(st: StructuralTag, *, lazy: bool, json_rules: JsonRules) -> str:
    """The GBNF for ``st``: with ``lazy``, ``root`` starts at the first trigger (the waiting phase is the lazy
    grammar's); without, ``root`` is the whole output. ``json_rules`` writes each tag's schema."""
    lines: list[str] = []
    content = []
    for i, tag in enumerate(st.tags):
        root, rules = json_rules(tag.schema, f"tag{i}-")
        lines += rules
        content.append(root)
    tail = "" if st.stop_after_first else " post-0"
    after = {}
    for k, trig in enumerate(st.triggers):
        alts = [f"{gbnf_literal(tag.begin[len(trig):]) if len(tag.begin) > len(trig) else chr(34) * 2} "
                f"{content[i]} {gbnf_literal(tag.end) if tag.end else chr(34) * 2}"
                for i, tag in enumerate(st.tags) if _trigger_of(tag, st.triggers) == trig]
        if alts:
            lines.append(f"after-{k} ::= (" + " | ".join(alts) + ")" + tail)
            after[trig] = f"after-{k}"
        else:
            after[trig] = "nothing"
    if "nothing" in after.values():
        lines.append("nothing ::= [^\\x00-\\U0010FFFF]")
    if not st.stop_after_first:
        lines += _free_text(st.triggers, "post", after, can_end=True)
    if lazy or st.at_least_one:     # the output from the first trigger on (with at_least_one: the whole output)
        starts = [f"{gbnf_literal(t)} {after[t]}" for t in st.triggers if after[t] != "nothing"]
        head = "root ::= " + " | ".join(starts)
    else:
        lines += _free_text(st.triggers, "pre", after, can_end=True)
        head = "root ::= pre-0"
    return "\n".join([head, *lines]) + "\n"
