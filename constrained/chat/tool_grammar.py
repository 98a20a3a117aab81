"""Tool-call grammars for the JSON formats, as llama-server's PEG builder prints them.

``build_tool_parser_json_native`` / ``standard_json_tools`` / ``build_json_tools_flat_keys``
(``common/chat-auto-parser-generator.cpp:196-238``, ``common/chat-peg-parser.cpp:779-954``) build a PEG parser per
request; its GBNF (``common/peg-parser.cpp:1606-1815``) is the grammar llama-server samples with. The rule text is
reproduced here from the same pieces: one ``tool-<name>`` rule per tool (fields in the template's order, the
arguments through the JSON-schema converter), the calls of one section (comma-separated when
``parallel_tool_calls``; inside ``[ ]`` for Mistral Nemo), the section with its markers, and for an eager
(``required``) grammar the generation prompt, the reasoning block and the ``until`` rule of free text before the
first call, an Aho-Corasick "contains none of" grammar (``gbnf_excluding_grammar``, ``common/trie.cpp``).

Example:
    >>> print(excluding_grammar("until-7", ["ab"]))
    until-7 ::= | [a] until-7-01 | [^a] until-7
    until-7-01 ::= | [a] until-7-01 | [^ab] until-7
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Sequence
from typing import Any

from .tool_formats import ToolFormat

__all__ = ["PEG_JSON_RULES", "build_tool_grammar", "excluding_grammar", "including_grammar", "response_format_grammar",
           "rule_name"]

# the rules llama.cpp's PEG builder emits for its generic JSON parser (common/peg-parser.cpp json()), which are
# reachable from every tool rule and from the response_format grammar of --jinja (constrained.server.chat_api)
PEG_JSON_RULES = {
    "json-array": '"[" space ("]" | json-value (space "," space json-value)* space "]")',
    "json-bool": '"true" | "false"',
    "json-null": '"null"',
    "json-number": '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? (("e" | "E") [+-]? [0-9]+)?',
    "json-object": '"{" space ("}" | json-string space ":" space json-value (space "," space json-string space ":" '
                   'space json-value)* space "}")',
    "json-string": '"\\"" ( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""',
    "json-value": "json-object | json-array | json-string | json-number | json-bool | json-null",
}

_STRING_CHARS = '( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )*'   # string_content('"')


def rule_name(name: str) -> str:
    """``rule_name()`` of peg-parser.cpp: runs of characters outside ``[a-zA-Z0-9-]`` become ``-``."""
    return re.sub(r"[^a-zA-Z0-9-]+", "-", name)


def _lit(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _escape_class_char(c: str) -> str:
    # gbnf_escape_char_class (peg-parser.cpp:1389)
    if c in "-][\\":
        return "\\" + c
    if c in "\n\t\r":
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}[c]
    o = ord(c)
    if 0x20 <= o <= 0x7E:
        return c
    if o <= 0xFF:
        return f"\\x{o:02X}"
    if o <= 0xFFFF:
        return f"\\u{o:04X}"
    return f"\\U{o:08X}"


def _char_class(chars: Sequence[str], negate: bool) -> str:
    return ("[^" if negate else "[") + "".join(_escape_class_char(c) for c in chars) + "]"


def _aho_corasick(strings: Sequence[str]) -> tuple[list[dict[str, int]], list[int], list[bool], list[str]]:
    """``common_trie`` + ``common_aho_corasick``: children, failure links, terminal flags, sorted alphabet."""
    children: list[dict[str, int]] = [{}]
    pattern = [False]
    for w in strings:
        cur = 0
        for ch in w:
            nxt = children[cur].get(ch)
            if nxt is None:
                children.append({})
                pattern.append(False)
                nxt = len(children) - 1
                children[cur][ch] = nxt
            cur = nxt
        pattern[cur] = True
    fail = [0] * len(children)
    order: list[int] = []
    queue = deque([0])
    while queue:
        u = queue.popleft()
        order.append(u)
        for ch, v in sorted(children[u].items(), key=lambda kv: ord(kv[0])):
            if u != 0:
                f = fail[u]
                while f and ch not in children[f]:
                    f = fail[f]
                t = children[f].get(ch)
                fail[v] = t if t is not None and t != v else 0
            queue.append(v)
    terminal = [False] * len(children)
    for u in order:
        terminal[u] = pattern[u] or (u != 0 and terminal[fail[u]])
    alphabet = sorted({ch for c in children for ch in c}, key=ord)

    return children, fail, terminal, alphabet


def _ac_grammar(prefix: str, strings: Sequence[str], including: bool) -> str:
    # gbnf_ac_grammar (peg-parser.cpp): one rule per non-terminal state of the Aho-Corasick automaton
    children, fail, terminal, alphabet = _aho_corasick(strings)

    def nxt(state: int, ch: str) -> int:
        while state and ch not in children[state]:
            state = fail[state]
        return children[state].get(ch, 0)

    def name(s: int) -> str:
        return prefix if s == 0 else f"{prefix}-{s:02d}"

    lines = []
    for q in range(len(children)):
        if terminal[q]:
            continue
        buckets: dict[int, list[str]] = {}
        specific: list[str] = []
        completing: list[str] = []
        for c in alphabet:
            d = nxt(q, c)
            if terminal[d]:
                completing.append(c)
                specific.append(c)
            elif d != 0:
                buckets.setdefault(d, []).append(c)
                specific.append(c)
        if including:
            alts = [_char_class(completing, False)] if completing else []
            alts += [f"{_char_class(buckets[d], False)} {name(d)}" for d in sorted(buckets)]
            alts.append(f"{_char_class(specific, True)} {name(0)}")
            rhs = " | ".join(alts)
        else:
            rhs = "|"
            for d in sorted(buckets):
                rhs += f" {_char_class(buckets[d], False)} {name(d)} |"
            rhs += f" {_char_class(specific, True)} {name(0)}"
        lines.append(f"{name(q)} ::= {rhs}")
    if terminal[0]:
        lines.append(f"{prefix} ::= |")
    return "\n".join(lines)


def excluding_grammar(prefix: str, strings: Sequence[str]) -> str:
    """The rules of text containing none of ``strings`` (``gbnf_excluding_grammar``), start rule ``prefix``."""
    return _ac_grammar(prefix, strings, False)


def including_grammar(prefix: str, strings: Sequence[str]) -> str:
    """The rules of text up to and including the first of ``strings`` (``gbnf_including_grammar``), start rule
    ``prefix``.

    >>> print(including_grammar("ac-3", ["ab"]))
    ac-3 ::= [a] ac-3-01 | [^a] ac-3
    ac-3-01 ::= [b] | [a] ac-3-01 | [^ab] ac-3
    """
    return _ac_grammar(prefix, strings, True)


def _optspace(tag: str) -> str:
    """``optspace(tag)``: the tag trimmed, each leading/trailing whitespace character optional."""
    core = tag.strip()
    if not core:
        return ""
    i = tag.index(core)
    parts = [_lit(c) + "?" for c in tag[:i]] + [_lit(core)] + [_lit(c) + "?" for c in tag[i + len(core):]]
    return " ".join(parts)


def build_tool_grammar(fmt: ToolFormat, tools: Sequence[Any], *, parallel: bool, mode: str) -> str:
    """The GBNF for ``tools`` (objects with ``.name`` and ``.schema``) in format ``fmt``.

    ``mode``: ``"auto"`` (llama-server's lazy grammar: only the rules reachable from the trigger rules),
    ``"required"`` (llama-server's eager grammar: generation prompt, optional reasoning, free text up to the first
    call, then the calls; it is prefilled with the generation prompt) or ``"call"`` (ours for ``required`` and a named
    choice: the reply is the calls and nothing else, no prefill).
    """
    from ..json_schema.converter import Converter
    from ..json_schema.json_text import load
    from ..json_schema.nodes import build_document

    conv = Converter()
    for n, body in PEG_JSON_RULES.items():
        conv.add_rule(n, body)
    type_field = ('("\\"type\\"" space ":" space "\\"function\\"" space "," space)?' if fmt.openai_wrapper else "")
    for t in sorted(tools, key=lambda t: rule_name("tool-" + t.name)):
        rn = rule_name("tool-" + t.name)
        schema_rule = conv.visit(build_document(load(t.schema)).root, rn + "-schema")
        fields = [f'"\\"{fmt.name_field}\\"" space ":" space ("\\"" {_lit(t.name)} "\\"")',
                  f'"\\"{fmt.args_field}\\"" space ":" space {schema_rule}']
        if fmt.id_field:
            fields.append(f'("\\"{fmt.id_field}\\"" space ":" space ("\\"" {_STRING_CHARS} "\\"" | json-number))?')
        body = ' space "," space '.join(fields)
        conv.add_rule(rn, f'"{{" space {type_field + " " if type_field else ""}{body} space "}}"')
    call = "(" + " | ".join(rule_name("tool-" + t.name) for t in tools) + ")"
    per_call = not fmt.section_start and bool(fmt.per_call_start)
    # ours ("call") puts one call in each per-call block; llama-server's allow a comma-separated list inside
    calls = call + (f' (space "," space {call})*' if parallel and not (per_call and mode == "call") else "")
    if fmt.array_wrapped:
        calls = f'"[" space {calls} space "]"'
    start, end = (fmt.per_call_start, fmt.per_call_end) if per_call else (fmt.section_start, fmt.section_end)
    conv.add_rule("tool-call", f"{_lit(start)} space {calls} space {_lit(end)}")
    if mode == "auto":
        if per_call:
            conv.add_rule("tool-calls", "(tool-call? space)+")
            conv.add_rule("root", "tool-call | tool-calls")
        else:
            conv.add_rule("root", "tool-call")
    elif mode == "required":
        n = fmt.until_base + fmt.until_per_tool * len(tools) + (8 if parallel else 0)
        parts = []
        if fmt.generation_prompt:
            gp = fmt.generation_prompt
            if fmt.reasoning and fmt.reasoning[0].strip() in gp:
                gp = gp[:gp.index(fmt.reasoning[0].strip())]
            parts.append(_lit(gp))
        parts.append("space")
        if fmt.reasoning:
            start_tag, end_tag = fmt.reasoning
            r_id = fmt.reasoning_until_id
            parts.append(f"({_optspace(start_tag)} until-{r_id} {_optspace(end_tag)})?")
            for line in excluding_grammar(f"until-{r_id}", [end_tag.strip()]).split("\n"):
                k, v = line.split(" ::= ", 1)
                conv.add_rule(k, v)
        parts.append(f"until-{n}?")
        for line in excluding_grammar(f"until-{n}", [fmt.tool_start]).split("\n"):
            k, v = line.split(" ::= ", 1)
            conv.add_rule(k, v)
        if per_call:
            conv.add_rule("tool-calls", "(tool-call space)+")
            parts.append("tool-calls")
        else:
            parts.append("tool-call")
        conv.add_rule("root", " ".join(parts))
    else:
        if per_call:
            conv.add_rule("root", "(tool-call space)+" if parallel else "tool-call space")
        else:
            conv.add_rule("root", "tool-call space")
    conv.check_errors()
    return conv.format_grammar()


def _optspace_count(tag: str) -> int:
    # the parsers optspace(tag) adds to the PEG arena: eps, then per whitespace character literal + optional +
    # sequence, and the trimmed tag's literal + sequence
    core = tag.strip()
    if not core:
        return 1 + 3 * len(tag)
    i = tag.index(core)
    return 1 + 3 * i + 2 + 3 * (len(tag) - i - len(core))


def response_format_grammar(schema: Any, generation_prompt: str, reasoning: tuple[str, str] | None = None,
                            reasoning_start: str = "") -> str:
    """The GBNF of llama-server's ``response_format`` parser for an autoparser template
    (``autoparser::build_parser``, chat-auto-parser-generator.cpp:115-134): the generation prompt up to the
    reasoning start tag (``p.prefix``), space, the reasoning block when it is extracted (``reasoning``: the start
    and end markers as the template writes them; its ``until`` rule is named after its arena id, built right after
    the end tag's ``optspace``, which GCC evaluates first), space, then the schema's JSON bare or in a
    ```` ```json ```` fence; the schema's rules named under ``response-format-schema``. ``reasoning_start``: the
    template's start marker, for the prefix even when reasoning is not extracted.

    >>> g = response_format_grammar({"type": "integer"}, "<a>\\n<think>\\n", ("<think>", "</think>"), "<think>")
    >>> [line for line in g.splitlines() if line.startswith("root")]
    ['root ::= "<a>\\\\n" space ("<think>" until-4 "</think>")? space ("```json" space response-format space "```" | space response-format space)']
    """
    from ..json_schema.converter import Converter
    from ..json_schema.json_text import load
    from ..json_schema.nodes import build_document

    conv = Converter()
    for n, body in PEG_JSON_RULES.items():
        conv.add_rule(n, body)
    schema_rule = conv.visit(build_document(load(schema)).root, "response-format-schema")
    conv.add_rule("response-format", schema_rule)
    rs = reasoning_start.strip()
    prefix = generation_prompt[:generation_prompt.find(rs)] if rs and rs in generation_prompt else generation_prompt
    parts = [_lit(prefix)] if prefix else []
    parts.append("space")
    if reasoning is not None and reasoning[1].strip():
        start, end = reasoning
        uid = 1 + _optspace_count(end)
        block = " ".join(x for x in (_optspace(start) if start.strip() else "", f"until-{uid}", _optspace(end)) if x)
        parts.append(f"({block})?")
        for line in excluding_grammar(f"until-{uid}", [end.strip()]).split("\n"):
            k, v = line.split(" ::= ", 1)
            conv.add_rule(k, v)
    parts.append('space ("```json" space response-format space "```" | space response-format space)')
    conv.add_rule("root", " ".join(parts))
    conv.check_errors()
    return conv.format_grammar()
