"""Tool calls: from OpenAI-style ``tools`` / ``tool_choice`` to a grammar, its triggers, and a parser for the reply.

Two formats so far:

- ``hermes`` (Qwen 2.5, Qwen 3 JSON, Hermes 2 Pro / 3: templates that render ``<tool_call>`` blocks): one
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block per call. With ``tool_choice: "auto"``
  the grammar, its laziness and its WORD trigger ``<tool_call>\\n`` are llama-server's own, rule for rule
  (``chat-auto-parser-generator.cpp``, ``build_tool_parser_json_native``; ``tests/test_tools_server.py`` compares the
  text with the real llama-server's ``__verbose``).
- ``generic`` (ours, for templates that cannot render tools: ChatML, which the default model gets, and Gemma 3):
  the tools are described in a system message and the calls use the same ``<tool_call>`` blocks under a lazy
  grammar. llama-server silently drops the tools there.

Deliberate differences from llama-server (CHANGELOG "Deviations"): ``tool_choice: "required"`` is an eager grammar
whose reply *is* tool calls (llama-server lets free text come first); a named ``tool_choice`` is honoured (only that
tool; llama-server treats it as ``"auto"``); ``parallel_tool_calls: false`` means one call (llama-server still
accepts several blocks); a reply that does not parse comes back as content with ``parse_error`` set, never an
error; every call's arguments are validated against its tool's schema (``ToolCall.issues``).

Example:
    >>> tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    ...           "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]
    >>> setup = tool_call_setup(tools, "auto", fmt="hermes")
    >>> setup.grammar_lazy, setup.grammar_triggers
    (True, [{'type': 1, 'value': '<tool_call>\\n'}])
    >>> msg = parse_reply('Sure.<tool_call>\\n{"name": "add", "arguments": {"a": 2}}\\n</tool_call>', setup)
    >>> msg.content, msg.tool_calls[0].name, msg.tool_calls[0].arguments
    ('Sure.', 'add', '{"a": 2}')
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConstrainedError

__all__ = ["ParsedReply", "ToolCall", "ToolCallSetup", "ToolError", "detect_format", "generic_messages",
           "generic_system_prompt", "normalize_tools", "parse_reply", "tool_call_setup"]

TOOL_OPEN = "<tool_call>\n"
TOOL_CLOSE = "</tool_call>"
WORD, PATTERN, PATTERN_FULL, TOKEN = 1, 2, 3, 0

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


class ToolError(ConstrainedError):
    """Bad ``tools`` / ``tool_choice`` (llama-server's message where it has one)."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Any        # as given (the prompt shows it)
    schema: Any            # for grammars and validation: {} / null / missing -> a closed empty object


def normalize_tools(tools: Any) -> list[Tool]:
    """``common_chat_tools_parse_oaicompat``: each tool needs ``type: "function"`` and ``function.name``."""
    if not isinstance(tools, list):
        raise ToolError("tools must be an array")
    out = []
    for t in tools:
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
            raise ToolError(f"Unsupported tool type: {json.dumps(t)[:200]}")
        f = t["function"]
        name = f.get("name")
        if not isinstance(name, str) or not name:
            raise ToolError("Missing tool name")
        desc = f.get("description", "")
        if desc is None:
            desc = ""     # llama-server: HTTP 500 on a null description; we take it as empty
        if not isinstance(desc, str):
            raise ToolError(f"tool {name}: description must be a string")
        params = f.get("parameters", {})
        schema = params if isinstance(params, dict) and params else {"type": "object", "properties": {}}
        out.append(Tool(name, desc, params if params is not None else {}, schema))
    return out


def detect_format(template_source: str | None) -> str:
    """``hermes`` for templates that render ``<tool_call>`` JSON blocks, else ``generic`` (ours)."""
    src = template_source or ""
    if "<tool_call>" in src and "tools" in src and "<function=" not in src:
        return "hermes"
    return "generic"


def _rule_name(name: str) -> str:
    # common_peg rule_name(): runs of characters outside [a-zA-Z0-9-] become "-"
    import re

    return re.sub(r"[^a-zA-Z0-9-]+", "-", name)


def _lit(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


@dataclass
class ToolCallSetup:
    """What a chat request with tools becomes (llama-server's ``common_chat_params``)."""

    fmt: str
    tools: list[Tool]
    tool_choice: str
    parallel: bool
    grammar: str | None
    grammar_lazy: bool
    grammar_triggers: list[dict[str, Any]]
    preserved_tokens: list[str]
    system_prompt: str | None = None         # the generic format's tool description (None: the template's)
    named: str | None = None                 # a named tool_choice

    def lazy_grammar(self, vocab: Any = None) -> Any:
        """The grammar as a :class:`~constrained.grammar.Grammar` (lazy with its triggers when ``grammar_lazy``):
        pass it to ``constrained.llama.generate(grammar=...)``."""
        from ..grammar import Grammar
        from ..grammar.lazy_grammar import lazy_grammar
        from ..grammar.lazy_regex import regex_escape

        if self.grammar is None:
            return None
        g = Grammar.from_gbnf(self.grammar)
        if not self.grammar_lazy:
            return g
        patterns, tokens = [], []
        for t in self.grammar_triggers:
            if t["type"] == WORD:
                tid = vocab.special_token_id(t["value"]) if vocab is not None else None
                if tid is not None:
                    tokens.append(tid)             # server-schema.cpp: a one-token word becomes a TOKEN trigger
                else:
                    patterns.append(regex_escape(t["value"]))
            elif t["type"] == PATTERN:
                patterns.append(t["value"])
            elif t["type"] == PATTERN_FULL:
                v = t["value"]
                patterns.append(("" if v.startswith("^") else "^") + v + ("" if v.endswith("$") else "$"))
            else:
                tokens.append(int(t["token"]))
        return lazy_grammar(g, patterns, tokens)


def tool_call_setup(tools: Any, tool_choice: Any = "auto", parallel_tool_calls: bool | None = None, *,
                    fmt: str = "hermes") -> ToolCallSetup:
    """The grammar, laziness, triggers and preserved tokens for ``tools`` in format ``fmt``.

    Raises:
        ToolError: bad tools, an unknown ``tool_choice`` string (``Invalid tool_choice: x``, as llama-server), a
            named choice that is not among the tools.
    """
    ts = normalize_tools(tools)
    named = None
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function") if isinstance(tool_choice.get("function"), dict) else tool_choice
        named = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(named, str) or named not in {t.name for t in ts}:
            raise ToolError(f"tool_choice names an unknown tool: {named!r}")
        choice = "required"
    elif tool_choice in ("auto", "none", "required"):
        choice = tool_choice
    else:
        raise ToolError(f"Invalid tool_choice: {tool_choice}")
    parallel = True if parallel_tool_calls is None else bool(parallel_tool_calls)
    setup = ToolCallSetup(fmt, ts, choice, parallel, None, False, [], [], None, named)
    if fmt == "generic":
        setup.system_prompt = generic_system_prompt(ts)
    if choice == "none" or not ts:
        return setup
    chosen = [t for t in ts if named is None or t.name == named]
    setup.grammar = _hermes_grammar(chosen, parallel if choice == "auto" else parallel, choice)
    setup.grammar_lazy = choice == "auto"
    setup.grammar_triggers = [{"type": WORD, "value": TOOL_OPEN}] if choice == "auto" else []
    setup.preserved_tokens = ["<tool_call>", "</tool_call>"]
    return setup


def _hermes_grammar(tools: list[Tool], parallel: bool, choice: str) -> str:
    """The GBNF of ``build_tool_parser_json_native`` with per-call ``<tool_call>`` markers.

    ``auto``: llama-server's lazy grammar (rules sorted bytewise as ``build_grammar`` prints them). ``required``
    (ours): the reply is one or more calls (one when not ``parallel``), nothing before them.
    """
    from ..json_schema._json import load
    from ..json_schema.converter import Converter
    from ..json_schema.nodes import build_document

    conv = Converter()
    for name, body in PEG_JSON_RULES.items():
        conv.add_rule(name, body)
    alts = []
    for t in sorted(tools, key=lambda t: _rule_name("tool-" + t.name)):
        rn = _rule_name("tool-" + t.name)
        schema_rule = conv.visit(build_document(load(t.schema)).root, rn + "-schema")
        conv.add_rule(rn, '"{" space "\\"name\\"" space ":" space ("\\"" ' + _lit(t.name) + ' "\\"") space "," '
                      'space "\\"arguments\\"" space ":" space ' + schema_rule + ' space "}"')
    for t in tools:
        alts.append(_rule_name("tool-" + t.name))
    call = "(" + " | ".join(alts) + ")"
    if choice == "auto":
        more = f' (space "," space {call})*' if parallel else ""
        conv.add_rule("tool-call", f'"<tool_call>\\n" space {call}{more} space "</tool_call>"')
        conv.add_rule("tool-calls", "(tool-call? space)+")
        conv.add_rule("root", "tool-call | tool-calls")
    else:
        conv.add_rule("tool-call", f'"<tool_call>\\n" space {call} space "</tool_call>"')
        conv.add_rule("root", "(tool-call space)+" if parallel else "tool-call space")
    conv.check_errors()
    return conv.format_grammar()


def generic_system_prompt(tools: list[Tool]) -> str:
    """Our tool description for templates that cannot render tools (put in the system message)."""
    lines = ["You can call these tools. To call one, reply with a block", "<tool_call>",
             '{"name": "<tool name>", "arguments": {<arguments as JSON>}}', "</tool_call>",
             "one block per call, and nothing after the last block. Tools:"]
    for t in tools:
        lines.append(json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters},
                                ensure_ascii=False))
    return "\n".join(lines)


def generic_messages(messages: Sequence[dict[str, Any]], setup: ToolCallSetup) -> list[dict[str, Any]]:
    """The conversation as a template without tool support can render it (our generic format): the tool
    description joins the system message (one is added if there is none), an assistant's ``tool_calls`` become
    ``<tool_call>`` blocks in its content, and ``tool`` messages keep their role and content.

    >>> s = tool_call_setup([{"type": "function", "function": {"name": "now"}}], "auto", fmt="generic")
    >>> m = generic_messages([{"role": "user", "content": "time?"}, {"role": "assistant", "tool_calls": [
    ...     {"type": "function", "function": {"name": "now", "arguments": "{}"}}]}], s)
    >>> m[0]["role"], m[2]["content"]
    ('system', '<tool_call>\\n{"name": "now", "arguments": {}}\\n</tool_call>')
    """
    out = [dict(m) for m in messages]
    if setup.system_prompt:
        if out and out[0].get("role") == "system":
            out[0]["content"] = f"{out[0].get('content') or ''}\n\n{setup.system_prompt}".lstrip()
        else:
            out.insert(0, {"role": "system", "content": setup.system_prompt})
    for m in out:
        calls = m.pop("tool_calls", None) if m.get("role") == "assistant" else None
        if calls:
            blocks = []
            for c in calls:
                f = c.get("function", c)
                args = f.get("arguments", "{}")
                args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                blocks.append(f'{TOOL_OPEN}{{"name": {json.dumps(f.get("name"), ensure_ascii=False)}, '
                              f'"arguments": {args}}}\n{TOOL_CLOSE}')
            m["content"] = ((m.get("content") or "") + "\n".join(blocks))
    return out


@dataclass
class ToolCall:
    name: str
    arguments: str                           # the raw JSON text, as generated (right-trimmed)
    id: str = ""
    issues: tuple[str, ...] = ()             # schema validation problems (empty: valid)

    def to_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}, "id": self.id}


@dataclass
class ParsedReply:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning_content: str = ""
    parse_error: str | None = None           # set when the text did not parse: then it is all content

    def message(self) -> dict[str, Any]:
        """``common_chat_msg::to_json_oaicompat`` (content ``""``, never null)."""
        m: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content:
            m["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            m["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return m


def _new_id() -> str:
    # server-common.cpp: 32 random alphanumerics
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(32))


def parse_reply(text: str, setup: ToolCallSetup, *, ids: Sequence[str] = ()) -> ParsedReply:
    """The reply as content and tool calls (the ``<tool_call>`` formats' parser).

    The content is the text before the first ``<tool_call>\\n`` with leading whitespace dropped (the parser's
    ``space`` after the generation prompt); each block must hold ``{"name": <a tool>, "arguments": {...}}``; only
    whitespace may follow the last block. A reply that breaks these rules has ``parse_error`` set (llama-server:
    HTTP 500): it is returned whole as content, or, when complete calls came first (the next one cut off by
    ``max_tokens``, say), with those calls.
    """
    if setup.tool_choice == "none" or not setup.tools:
        return ParsedReply(text)
    body = text.lstrip()
    i = body.find(TOOL_OPEN)
    if i < 0:
        return ParsedReply(body)
    content, rest = body[:i], body[i:]
    calls: list[ToolCall] = []
    names = {t.name: t for t in setup.tools}

    def fail(why: str) -> ParsedReply:
        # nothing parsed: all content; after complete calls (e.g. the next one cut off by max_tokens): keep them
        return ParsedReply(content, calls, parse_error=why) if calls else ParsedReply(text, parse_error=why)

    dec = json.JSONDecoder()
    while rest.strip():
        rest = rest.lstrip()
        if not rest.startswith(TOOL_OPEN):
            return fail(f"text after the tool calls: {rest[:60]!r}")
        rest = rest[len(TOOL_OPEN):]
        objs = []
        while True:
            rest = rest.lstrip()
            try:
                obj, end = dec.raw_decode(rest)
            except json.JSONDecodeError as e:
                return fail(f"a tool call is not JSON (or is cut off): {e}")
            raw = rest[:end]
            objs.append((obj, raw))
            rest = rest[end:].lstrip()
            if rest.startswith(","):
                rest = rest[1:]
                continue
            break
        if not rest.startswith(TOOL_CLOSE):
            return fail("a <tool_call> block is not closed")
        rest = rest[len(TOOL_CLOSE):]
        for obj, raw in objs:
            if not isinstance(obj, dict) or obj.get("name") not in names or "arguments" not in obj:
                return fail(f"not a call of a declared tool: {raw[:80]!r}")
            args_raw = _arguments_text(raw)
            calls.append(ToolCall(obj["name"], args_raw, ids[len(calls)] if len(calls) < len(ids) else _new_id(),
                                  _validate(obj["arguments"], names[obj["name"]].schema)))
    return ParsedReply(content, calls)


def _arguments_text(raw: str) -> str:
    """The raw text of the ``arguments`` value inside a call object's text (the model's own spacing)."""
    dec = json.JSONDecoder()
    k = raw.find('"arguments"')
    j = raw.index(":", k + len('"arguments"')) + 1
    while raw[j].isspace():
        j += 1
    _, end = dec.raw_decode(raw, j)
    return raw[j:end].rstrip()


def _validate(args: Any, schema: Any) -> tuple[str, ...]:
    """jsonschema's complaints about ``args`` under ``schema`` (``constrained.validation`` is on this layer)."""
    try:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        errors = sorted(cls(schema).iter_errors(args), key=lambda e: list(e.absolute_path))
    except Exception as e:  # noqa: BLE001 - a schema the validator cannot use is reported, not raised
        return (f"arguments not validated: {e}",)
    return tuple(f"{'/'.join(map(str, e.absolute_path)) or '#'}: {e.message}" for e in errors)
