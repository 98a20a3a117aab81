"""Tool calls: from OpenAI-style ``tools`` / ``tool_choice`` to a grammar, its triggers, and a parser for the reply.

The formats (``tool_call_setup_for_template`` picks one by the chat template, as llama-server dispatches):

- llama-server's JSON formats, reproduced (:mod:`constrained.chat.tool_formats`: the data; ``tool_grammar``: the
  grammar text, rule for rule; ``tool_parse``: the reply): ``hermes`` (Qwen 2.5, Hermes 2 Pro / 3: a
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block per call), ``qwen3`` (the same, with
  ``<think>`` reasoning), ``llama3`` (Llama 3.1 / 3.2 / 3.3: a bare ``{"name": ..., "parameters": {...}}``),
  ``mistral_nemo`` (``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]``).
  ``tests/chat/test_tools_server.py`` compares grammars, triggers, prompts and parses with the real llama-server.
- ``generic`` (ours, for every other template: those that cannot render tools, ChatML, which the default model
  gets, and Gemma 3, and those whose llama-server format is not reproduced): the tools are described in a system
  message and the calls use ``<tool_call>`` blocks under a lazy grammar. llama-server silently drops the tools of
  the former.

Deliberate differences from llama-server (CHANGELOG "Deviations"): ``tool_choice: "required"`` is an eager grammar
whose reply *is* tool calls (llama-server lets free text come first; ``llama_server_compat=True`` gives its
setups for ``required`` and named choices); a named ``tool_choice`` is honoured (only that
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

import functools
import json
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ToolError
from .tool_formats import FORMATS, ToolFormat, format_for_template
from .tool_grammar import build_tool_grammar
from .tool_parse import ParseFailure, parse_json_tools

__all__ = ["NESTED_TOO_DEEPLY", "ParsedReply", "ToolCall", "ToolCallSetup", "ToolError", "detect_format", "generic_messages",
           "generic_system_prompt", "normalize_tools", "parse_reply", "template_messages", "template_tools", "tool_call_setup",
           "tool_call_setup_for_template"]

TOOL_OPEN = "<tool_call>\n"
TOOL_CLOSE = "</tool_call>"
WORD, PATTERN, PATTERN_FULL, TOKEN = 1, 2, 3, 0

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
    """The format llama-server gives a template (``hermes``, ``qwen3``, ``llama3``, ``mistral_nemo``: see
    :mod:`constrained.chat.tool_formats`), else ``generic`` (ours, for templates without tool support or with a
    format not reproduced here)."""
    from .handlers import autoparser_tools, handler_for

    h = handler_for(template_source)
    if h is not None and "tools" in (template_source or ""):
        return h
    f = format_for_template(template_source)
    if f is not None:
        return f.name
    return "autoparser" if autoparser_tools(template_source) else "generic"


def template_tools(tools: Any) -> list[dict[str, Any]]:
    """The tools as llama-server hands them to the chat template: ``{"type": "function", "function": {"name",
    "description", "parameters"}}`` in that key order, ``description`` ``""`` and ``parameters`` ``{}`` when absent
    (``common_chat_tools_to_json_oaicompat``).

    >>> template_tools([{"type": "function", "function": {"name": "now"}}])
    [{'type': 'function', 'function': {'name': 'now', 'description': '', 'parameters': {}}}]
    """
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters}} for t in normalize_tools(tools)]


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
    generation_prompt: str = ""              # the template's (llama-server's ``generation_prompt``)
    prefill: bool = False                    # the grammar starts with the generation prompt: feed it that first
    llama_server_compat: bool = False        # llama-server's setup for required / named (see tool_call_setup)
    handler: Any = None                      # a specialised handler's arena (peg_arena.ArenaSetup)
    object_arguments: bool = True            # caps.supports_object_arguments: past calls' arguments as objects

    @property
    def format(self) -> ToolFormat:
        """The JSON format's data (the generic format writes Hermes-style ``<tool_call>`` blocks; the XML format
        of ``qwen3_coder`` has none: its ``handler`` parses)."""
        return FORMATS[self.fmt if self.fmt in FORMATS else "hermes"]

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
                    fmt: str = "hermes", llama_server_compat: bool = False, template_source: str | None = None,
                    extract_reasoning: bool = True, enable_thinking: bool = True,
                    generation_prompt: str | None = None) -> ToolCallSetup:
    """The grammar, laziness, triggers and preserved tokens for ``tools`` in format ``fmt``.

    ``fmt``: ``generic`` (ours) or a key of :data:`~constrained.chat.tool_formats.FORMATS` (``hermes``, ``qwen3``,
    ``llama3``, ``mistral_nemo``). ``parallel_tool_calls`` None: the template's default (Llama 3.x: false).
    ``tool_choice`` ``auto`` and ``none`` are llama-server's setup. ``required`` and a named function are ours by
    default: the reply is the call(s) and nothing else, only the named tool for a named choice, one call when
    ``parallel_tool_calls`` is false (an eager grammar, not prefilled). ``llama_server_compat=True`` gives
    llama-server's instead: ``required`` lets free text come before the first call (its eager grammar starts with
    the generation prompt: ``prefill`` is set) and a named choice is ``auto``.

    ``fmt`` a specialised handler of :mod:`constrained.chat.handlers` (``qwen3_coder``, ``kimi_k2``,
    ``ministral_3``, ``functionary_v3_2``) needs ``template_source`` and ``extract_reasoning``
    (``reasoning_format`` is not ``none``); its ``required`` is llama-server's eager grammar in both modes (free
    text, then at least one call), a named choice (ours) keeps only that tool, ``parallel_tool_calls: false``
    allows one call (as llama-server's grammar). ``generation_prompt``: the request's (the reply is parsed after
    it, and some handlers' setups depend on it, e.g. Ling 3's think block left open); None: a one-message
    conversation's.

    Raises:
        ToolError: bad tools, an unknown ``tool_choice`` string (``Invalid tool_choice: x``, as llama-server), a
            named choice that is not among the tools, an unknown ``fmt``.
    """
    from .handlers import HANDLERS

    if fmt in HANDLERS or fmt == "autoparser":
        return _handler_setup(fmt, tools, tool_choice, parallel_tool_calls, template_source, extract_reasoning,
                              llama_server_compat, enable_thinking, generation_prompt)
    if fmt != "generic" and fmt not in FORMATS:
        raise ToolError(f"unknown tool-call format: {fmt!r} (generic, {', '.join(FORMATS)})")
    ts = normalize_tools(tools)
    choice, named = _choice(tool_choice, ts, llama_server_compat)
    f = FORMATS["hermes" if fmt == "generic" else fmt]
    parallel = (f.parallel_default if fmt != "generic" else True) if parallel_tool_calls is None \
        else bool(parallel_tool_calls)
    setup = ToolCallSetup(fmt, ts, choice, parallel, None, False, [], [], None, named,
                          generation_prompt=f.generation_prompt if fmt != "generic" else "",
                          llama_server_compat=llama_server_compat)
    if fmt == "generic":
        setup.system_prompt = generic_system_prompt(ts)
    else:
        setup.preserved_tokens = f.preserved_tokens     # the analysis' markers, whatever the request
    if choice == "none" or not ts:
        return setup
    if fmt == "generic":
        setup.preserved_tokens = f.preserved_tokens
    chosen = [t for t in ts if named is None or t.name == named]
    if choice == "auto":
        if not f.trigger:
            return setup                  # Llama 3.x: no marker to trigger on, no grammar (llama-server)
        setup.grammar = build_tool_grammar(f, chosen, parallel=parallel, mode="auto")
        setup.grammar_lazy = True
        setup.grammar_triggers = [{"type": WORD, "value": f.trigger}]
    elif llama_server_compat and fmt != "generic":
        setup.grammar = build_tool_grammar(f, chosen, parallel=parallel, mode="required")
        setup.prefill = True
    else:
        setup.grammar = build_tool_grammar(f, chosen, parallel=parallel, mode="call")
    return setup


def template_messages(messages: Sequence[dict[str, Any]], setup: ToolCallSetup) -> list[dict[str, Any]]:
    """The conversation as llama-server hands it to a template that renders tool calls (the workarounds of
    ``common_chat_templates_apply_jinja``, ``common/chat.cpp:1282-1291``): a null content becomes ``""``
    (``requires_non_null_content``) and string ``arguments`` of past tool calls become JSON objects
    (``func_args_not_string``). The generic format goes through :func:`generic_messages` instead.

    Raises:
        ToolError: arguments that are not JSON (llama-server: ``Failed to parse tool call arguments as JSON``).

    >>> s = tool_call_setup([{"type": "function", "function": {"name": "now"}}], fmt="hermes")
    >>> template_messages([{"role": "assistant", "content": None, "tool_calls": [{"type": "function",
    ...     "function": {"name": "now", "arguments": "{}"}}]}], s)[0]
    {'role': 'assistant', 'content': '', 'tool_calls': [{'type': 'function', 'function': {'name': 'now', 'arguments': {}}}]}
    """
    if setup.fmt == "generic":
        return generic_messages(messages, setup)
    out = []
    for m in messages:
        m = dict(m)
        if "content" in m and m["content"] is None:
            m["content"] = ""
        if isinstance(m.get("tool_calls"), list):
            calls = []
            for c in m["tool_calls"]:
                c = dict(c)
                f = c.get("function")
                if isinstance(f, dict) and isinstance(f.get("arguments"), str) and setup.object_arguments:
                    f = dict(f)
                    try:
                        f["arguments"] = json.loads(f["arguments"]) if f["arguments"].strip() else {}
                    except ValueError:
                        raise ToolError("Failed to parse tool call arguments as JSON") from None
                    c["function"] = f
                calls.append(c)
            m["tool_calls"] = calls
        out.append(m)
    return out


def tool_call_setup_for_template(template_source: str | None, tools: Any, tool_choice: Any = "auto",
                                 parallel_tool_calls: bool | None = None, *,
                                 llama_server_compat: bool = False, extract_reasoning: bool = True,
                                 enable_thinking: bool = True, generation_prompt: str | None = None) -> ToolCallSetup:
    """:func:`tool_call_setup` in the format llama-server uses for this chat template (``generic`` when it has
    none that is reproduced here, e.g. ChatML, Gemma 3): the server needs no per-format knowledge.

    >>> s = tool_call_setup_for_template("{{ '[AVAILABLE_TOOLS]' }}{{ tools }}{{ '[TOOL_CALLS]' }}",
    ...                                  [{"type": "function", "function": {"name": "now"}}])
    >>> s.fmt, s.grammar_triggers, s.parallel
    ('mistral_nemo', [{'type': 1, 'value': '[TOOL_CALLS]'}], True)
    """
    return tool_call_setup(tools, tool_choice, parallel_tool_calls, fmt=detect_format(template_source),
                           llama_server_compat=llama_server_compat, template_source=template_source,
                           extract_reasoning=extract_reasoning, enable_thinking=enable_thinking,
                           generation_prompt=generation_prompt)


def _choice(tool_choice: Any, ts: list[Tool], llama_server_compat: bool) -> tuple[str, str | None]:
    named = None
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function") if isinstance(tool_choice.get("function"), dict) else tool_choice
        named = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(named, str) or named not in {t.name for t in ts}:
            raise ToolError(f"tool_choice names an unknown tool: {named!r}")
        if llama_server_compat:           # json_value(..., "tool_choice", "auto"): an object is a type error
            return "auto", None
        return "required", named
    if tool_choice in ("auto", "none", "required"):
        return tool_choice, None
    raise ToolError(f"Invalid tool_choice: {tool_choice}")


@functools.lru_cache(maxsize=32)
def _generation_prompt(src: str) -> str:
    """``common_chat_template_generation_prompt`` of a one-message conversation (the parser's start, for
    :func:`parse_reply`; the server passes the request's own). Cached by source: compiling a template costs
    hundreds of milliseconds."""
    from .template import ChatTemplates, generation_prompt

    return generation_prompt(ChatTemplates(src), [{"role": "user", "content": "hi"}], {"preserve_reasoning": True})


def _handler_setup(fmt: str, tools: Any, tool_choice: Any, parallel_tool_calls: bool | None, src: str | None,
                   extract_reasoning: bool, llama_server_compat: bool, enable_thinking: bool = True,
                   generation_prompt: str | None = None) -> ToolCallSetup:
    from .caps import template_caps
    from .handlers import GENERATION_PROMPTS, build, preserved_tokens

    ts = normalize_tools(tools)
    choice, named = _choice(tool_choice, ts, llama_server_compat)
    if parallel_tool_calls is None:
        parallel = bool(template_caps(src or "")["supports_parallel_tool_calls"]) if src else True
    else:
        parallel = bool(parallel_tool_calls)
    gen = generation_prompt if generation_prompt is not None else \
        _generation_prompt(src) if src else GENERATION_PROMPTS.get(fmt, "")
    h = build(fmt, src, ts, tool_choice=choice if ts else "none", parallel=parallel,
              extract_reasoning=extract_reasoning, names=None if named is None else [named], generation_prompt=gen,
              enable_thinking=enable_thinking)
    return ToolCallSetup(fmt, ts, choice, parallel, h.grammar, h.lazy,
                         [{"type": k, "value": v} for k, v in h.triggers], preserved_tokens(fmt, src), None, named,
                         generation_prompt=gen, prefill=h.grammar is not None and not h.lazy,
                         llama_server_compat=llama_server_compat, handler=h,
                         object_arguments=bool(template_caps(src)["supports_object_arguments"]) if src else True)



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


def new_tool_call_id() -> str:
    # server-common.cpp: 32 random alphanumerics
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(32))


#: the parse error (or issue) of model text nested deeper than the parsers go
NESTED_TOO_DEEPLY = "the tool call is nested too deeply to parse"


def _no_surrogates(s: str) -> str:
    """``s`` with lone surrogates (from a ``\\ud800`` escape) as U+FFFD, so it encodes as UTF-8."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def parse_reply(text: str, setup: ToolCallSetup, *, ids: Sequence[str] = ()) -> ParsedReply:
    """The reply (the generated text, without the generation prompt) as reasoning, content and tool calls, in the
    setup's format (:mod:`constrained.chat.tool_parse`).

    The content is the text up to the first tool marker (``<tool_call>\\n``; ``[TOOL_CALLS]``; for Llama 3.x the
    first ``{``), leading whitespace dropped; then only calls of declared tools and whitespace may follow. A reply
    that breaks these rules has ``parse_error`` set (llama-server: HTTP 500): it is returned whole as content, or,
    when complete calls came first (the next one cut off by ``max_tokens``, say), with those calls. Each call's
    arguments are checked against its tool's schema (``ToolCall.issues``); an id the model wrote (Mistral Nemo) is
    kept, else it is ``ids[i]`` or 32 random alphanumerics as llama-server's. A reply that parses to nothing (cut
    by ``max_tokens`` inside a marker, ``<tool``; only whitespace) is returned as content, as llama-server answers it.
    """
    if setup.handler is not None:
        return _parse_handler_reply(text, setup, ids)
    f = setup.format
    if setup.tool_choice == "none" or not setup.tools:
        if f.reasoning and setup.fmt != "generic":       # the content parser still takes the reasoning out
            r = parse_json_tools(text, f, (), parallel=False, tools=False)
            if not (r.content or r.reasoning):
                return ParsedReply(text)                 # an empty message: the generated text (as below)
            return ParsedReply(r.content, reasoning_content=r.reasoning)
        return ParsedReply(text)
    names = {t.name: t for t in setup.tools}
    allowed = names if setup.named is None else {setup.named: names[setup.named]}
    # ours: a named choice or parallel off restricts what counts; llama-server's parser reads what its grammar allows
    parallel = setup.parallel or (setup.fmt in ("hermes", "qwen3", "generic"))
    try:
        r = parse_json_tools(text, f, allowed, parallel=parallel)
        why = None
    except ParseFailure as e:
        r, why = e.partial, str(e)
    except RecursionError:
        return ParsedReply(text, reasoning_content="", parse_error=NESTED_TOO_DEEPLY)
    calls = []
    for name, args, cid in r.calls:
        try:
            value = json.loads(args)
        except (ValueError, RecursionError):
            value = None
        i = len(calls)
        try:
            issues = validate_arguments(value, names[name].schema)
        except RecursionError:
            issues = (NESTED_TOO_DEEPLY,)
        calls.append(ToolCall(name, _no_surrogates(args) if isinstance(value, dict) else "{}",
                              cid or (ids[i] if i < len(ids) else new_tool_call_id()), issues))
    if why is not None and not calls:
        return ParsedReply(text, reasoning_content="", parse_error=why)
    if not (r.content or r.reasoning or calls):
        # llama-server answers an empty parsed message with the generated text (server-task.cpp:415-422): a reply
        # cut by max_tokens inside a marker (`<tool`), or whitespace only
        return ParsedReply(text)
    return ParsedReply(r.content, calls, r.reasoning, parse_error=why)


def _parse_handler_reply(text: str, setup: ToolCallSetup, ids: Sequence[str]) -> ParsedReply:
    """A specialised handler's reply (its PEG parser after ``setup.generation_prompt``); a reply it rejects is
    all content with ``parse_error`` (llama-server: HTTP 500)."""
    from .peg import PegFail

    try:
        m = setup.handler.parse(setup.generation_prompt, text)
    except PegFail as e:
        return ParsedReply(text, parse_error=str(e))
    except RecursionError:
        return ParsedReply(text, parse_error=NESTED_TOO_DEEPLY)
    if m.empty():
        return ParsedReply(text)                         # llama-server answers an empty message with the text
    names = {t.name: t for t in setup.tools}
    calls = []
    for i, (name, args, cid) in enumerate(m.tool_calls):
        try:
            value = json.loads(args)
            issues = validate_arguments(value, names[name].schema) if name in names else ()
        except ValueError:
            issues = ("arguments are not complete JSON (cut off by max_tokens?)",)
        except RecursionError:
            issues = (NESTED_TOO_DEEPLY,)
        calls.append(ToolCall(name, _no_surrogates(args), cid or (ids[i] if i < len(ids) else new_tool_call_id()),
                              issues))
    return ParsedReply(m.content, calls, m.reasoning_content)


def validate_arguments(args: Any, schema: Any) -> tuple[str, ...]:
    """jsonschema's complaints about ``args`` under ``schema`` (``constrained.json_schema.validation`` is on this layer)."""
    try:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        errors = sorted(cls(schema).iter_errors(args), key=lambda e: list(e.absolute_path))
    except Exception as e:  # noqa: BLE001 - a schema the validator cannot use is reported, not raised
        return (f"arguments not validated: {e}",)
    return tuple(f"{'/'.join(map(str, e.absolute_path)) or '#'}: {e.message}" for e in errors)
