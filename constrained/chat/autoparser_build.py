"""llama-server's autoparser tool-call parser and grammar (common/chat-auto-parser-generator.cpp,
``common_chat_peg_builder::standard_json_tools``), built on :mod:`constrained.chat.peg_arena` from the analysis of
:mod:`constrained.chat.autoparser_tools`.

The parsers get arena ids in the order GCC evaluates the C++ expressions, and some grammar rules are named after
an id (``until-<id>``). To keep the code close to the C++ it is written with lazy expressions (:class:`_E`):
``a + b`` builds ``b`` first, then ``a``, then the sequence (the right operand of ``+`` and ``|`` first);
``a << b`` builds ``a``, ``b``, then the space between; a string operand becomes its literal inside the operator
(after the other operand); ``_E.ev`` builds an expression where the C++ assigns it to a variable.

Example:
    >>> from constrained.chat.template import ChatTemplates
    >>> from constrained.chat.autoparser_tools import analyze_template
    >>> from constrained.chat.tools import normalize_tools
    >>> src = ("{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}{% for c in m.tool_calls or [] %}"
    ...        "<tool_call>\\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\\n"
    ...        "</tool_call>{% endfor %}<|im_end|>\\n{% endfor %}{% if tools %}{% endif %}")
    >>> s = build_setup(analyze_template(ChatTemplates(src)), normalize_tools([{"type": "function",
    ...     "function": {"name": "now"}}]), tool_choice="auto", parallel=True, extract_reasoning=True,
    ...     generation_prompt="<|im_start|>assistant\\n")
    >>> s.lazy, s.triggers
    (True, [(1, '<tool_call>\\n')])
    >>> s.parse("<|im_start|>assistant\\n", 'ok<tool_call>\\n{"name": "now", "arguments": {}}</tool_call>').tool_calls
    [('now', '{}', '')]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .autoparser_tools import Analysis
from .peg_arena import ArenaSetup, Builder

__all__ = ["build_setup"]

WORD = 1
_SP = " \t\n\v\f\r"


class _E:
    """A lazy parser expression of builder ``b``."""

    def __init__(self, b: Builder, fn: Callable[[], int]) -> None:
        self.b, self.fn, self.id = b, fn, None

    def ev(self) -> int:
        if self.id is None:
            self.id = self.fn()
        return self.id

    def var(self) -> _E:
        """The expression built now (a C++ variable)."""
        i = self.ev()
        return _E(self.b, lambda: i)

    def __add__(self, o: _E | str) -> _E:
        b = self.b
        if isinstance(o, str):
            def f() -> int:
                left = self.ev()
                return b.seq(left, b.literal(o))
            return _E(b, f)

        def g() -> int:
            right = o.ev()
            return b.seq(self.ev(), right)
        return _E(b, g)

    def __radd__(self, o: str) -> _E:
        b = self.b

        def f() -> int:
            right = self.ev()
            return b.seq(b.literal(o), right)
        return _E(b, f)

    def __or__(self, o: _E) -> _E:
        b = self.b

        def g() -> int:
            right = o.ev()
            return b.choice(self.ev(), right)
        return _E(b, g)

    def __lshift__(self, o: _E) -> _E:
        b = self.b

        def g() -> int:
            left = self.ev()
            right = o.ev()
            return b.seq(left, b.space(), right)
        return _E(b, g)


class _P:
    """``common_chat_peg_builder`` with lazy expressions."""

    def __init__(self) -> None:
        self.b = Builder()

    def _e(self, fn: Callable[[], int]) -> _E:
        return _E(self.b, fn)

    def _wrap(self, method: Callable[..., int], child: _E, *extra: Any) -> _E:
        return self._e(lambda: method(child.ev(), *extra))

    def eps(self) -> _E:
        return self._e(self.b.eps)

    def end(self) -> _E:
        return self._e(self.b.end)

    def space(self) -> _E:
        return self._e(self.b.space)

    def rest(self) -> _E:
        return self._e(self.b.rest)

    def literal(self, s: str) -> _E:
        return self._e(lambda: self.b.literal(s))

    def until(self, s: str) -> _E:
        return self._e(lambda: self.b.until(s))

    def choice(self, *xs: _E) -> _E:
        return self._e(lambda: self.b.choice(*[x.ev() for x in xs]))

    def optional(self, x: _E) -> _E:
        return self._wrap(self.b.optional, x)

    def zero_or_more(self, x: _E) -> _E:
        return self._wrap(self.b.zero_or_more, x)

    def one_or_more(self, x: _E) -> _E:
        return self._e(lambda: self.b.repeat(x.ev(), 1, -1))

    def repeat(self, x: _E, lo: int, hi: int) -> _E:
        return self._e(lambda: self.b.repeat(x.ev(), lo, hi))

    def peek(self, x: _E) -> _E:
        return self._wrap(self.b.peek, x)

    def atomic(self, x: _E) -> _E:
        return self._wrap(self.b.atomic, x)

    def tag(self, t: str, x: _E) -> _E:
        return self._e(lambda: self.b.tag(t, x.ev()))

    def _atag(self, t: str, x: _E) -> _E:
        return self._e(lambda: self.b.atomic(self.b.tag(t, x.ev())))

    def rule(self, name: str, x: _E) -> _E:
        return self._e(lambda: self.b.rule(name, x.ev()))

    def trigger_rule(self, name: str, x: _E) -> _E:
        return self._e(lambda: self.b.trigger_rule(name, x.ev()))

    def ac(self, x: _E, delim: str) -> _E:
        return self._e(lambda: self.b.ac(x.ev(), [delim]))

    def schema(self, name: str, node: Any) -> _E:
        return self._e(lambda: self.b.schema(self.b.json(), name, node))

    def string_content(self, q: str) -> _E:
        return self._e(lambda: self.b.string_content(q))

    def json_number(self) -> _E:
        return self._e(self.b.json_number)

    def content(self, x: _E) -> _E:
        return self.tag("content", x)

    def reasoning(self, x: _E) -> _E:
        return self.tag("reasoning", x)

    def tool(self, x: _E) -> _E:
        return self.tag("tool", x)

    def tool_open(self, x: _E) -> _E:
        return self._atag("tool-open", x)

    def tool_close(self, x: _E) -> _E:
        return self._atag("tool-close", x)

    def tool_id(self, x: _E) -> _E:
        return self._atag("tool-id", x)

    def tool_name(self, x: _E) -> _E:
        return self._atag("tool-name", x)

    def tool_args(self, x: _E) -> _E:
        return self.tag("tool-args", x)

    def tool_arg(self, x: _E) -> _E:
        return self.tag("tool-arg", x)

    def tool_arg_open(self, x: _E) -> _E:
        return self._atag("tool-arg-open", x)

    def tool_arg_close(self, x: _E) -> _E:
        return self._atag("tool-arg-close", x)

    def tool_arg_name(self, x: _E) -> _E:
        return self._atag("tool-arg-name", x)

    def tool_arg_string_value(self, x: _E) -> _E:
        return self.tag("tool-arg-string-value", x)

    def tool_arg_json_value(self, x: _E) -> _E:
        return self.tag("tool-arg-value", x)

    def prefix(self, s: str, delim: str) -> _E:
        if not s:
            return self.eps()
        if not delim:
            return self.literal(s)
        i = s.find(delim)
        return self.literal(s if i < 0 else s[:i])

    def optspace(self, tag: str) -> _E:
        """``optspace``, built when the expression is (a function call operand)."""
        return self._e(lambda: self._optspace(tag).ev())

    def _optspace(self, tag: str) -> _E:
        # common_chat_peg_builder::optspace: statements, each ``parser += ...`` built in turn
        parser = self.eps().var()
        n = len(tag)
        eop = next((i for i, c in enumerate(tag) if c not in _SP), n)
        sos = next((i for i in range(n, 0, -1) if tag[i - 1] not in _SP), n)
        for i in range(eop):
            parser = (parser + self.optional(self.literal(tag[i]))).var()
        parser = (parser + self.literal(tag[eop:sos] if sos >= eop else "")).var()
        for i in range(sos, n):
            parser = (parser + self.optional(self.literal(tag[i]))).var()
        return parser


def _trim(s: str) -> str:
    return s.strip(_SP)


def _schema_node(tool: Any) -> Any:
    from ..json_schema import nodes as N
    from ..json_schema.json_text import load

    p = tool.parameters
    if p is None or p == {}:
        p = {"type": "object", "properties": {}}
    return N.build_document(load(p)).root


def build_setup(a: Analysis, tools: Sequence[Any], *, tool_choice: str, parallel: bool, extract_reasoning: bool,
                generation_prompt: str) -> ArenaSetup:
    """``peg_generator::generate_parser``'s parser, grammar, laziness and triggers for ``tools``
    (:class:`~constrained.chat.tools.Tool`; ``tool_choice`` ``auto`` / ``required`` / ``none``)."""
    p = _P()
    p.eps().var()                              # parser_build_context: reasoning_parser(p.eps())
    r, c, t = a.reasoning, a.content, a.tools
    extracting = extract_reasoning and r.mode != "none"
    # reasoning.build_parser
    if extracting and r.mode in ("tag_based", "tools_only") and r.end:
        if r.start:
            rp = p.optional(p.optspace(r.start) + p.reasoning(p.until(_trim(r.end))) + p.optspace(r.end))
        else:
            rp = p.optional(p.reasoning(p.until(_trim(r.end))) + p.optspace(r.end))
    else:
        rp = p.eps()
    rp = rp.var()
    parser = p.eps().var()
    has_tools = bool(tools)
    pure = r.mode == "none"
    if has_tools and tool_choice != "none" and a.supports_tool_calls:
        parser = _tools_parser(p, a, rp, tools, tool_choice, parallel).var()
        pure = False
    elif c.always_wrapped:
        if extracting:
            parser = (rp + c.start + p.content(p.until(c.end)) + c.end + p.end()).var()
        else:
            parser = (p.content(p.until(c.start)) + c.start + p.content(p.until(c.end)) + c.end + p.end()).var()
    else:
        parser = (rp + p.content(p.rest()) + p.end()).var()
    rs = _trim(r.start)
    root = (p.prefix(generation_prompt, rs) + parser) if pure else (p.prefix(generation_prompt, rs) << parser)
    root_id = root.ev()
    b = p.b
    has_fmt = t.mode != "NONE" and has_tools
    trigger = t.section_start or t.per_call_start
    include = has_fmt and ((tool_choice == "auto" and bool(trigger)) or tool_choice == "required")
    if not include:
        return ArenaSetup(None, False, [], b.parser(root_id))
    lazy = tool_choice == "auto"
    triggers: list[tuple[int, str]] = []
    if lazy:
        triggers.append((WORD, trigger))
        if t.openai_wrapper_trigger:
            triggers.append((WORD, '{"type": "function",'))
    return ArenaSetup(b.grammar(root_id, lazy=lazy), lazy, triggers, b.parser(root_id))


def _tools_parser(p: _P, a: Analysis, rp: _E, tools: Sequence[Any], choice: str, parallel: bool) -> _E:
    mode = a.tools.mode
    if mode == "JSON_NATIVE":
        return _json_native(p, a, rp, tools, choice, parallel)
    if mode == "TAG_WITH_JSON":
        return _tag_json(p, a, rp, tools, choice, parallel)
    if mode == "TAG_WITH_TAGGED":
        return _tag_tagged(p, a, rp, tools, choice, parallel)
    return p.eps()


def _json_native(p: _P, a: Analysis, rp: _E, tools: Sequence[Any], choice: str, parallel: bool) -> _E:
    t = a.tools
    name_field, args_field = t.name_field, t.args_field
    if t.function_field and t.function_field != "function" and "." not in name_field:
        name_field, args_field = t.function_field + "." + name_field, t.function_field + "." + args_field
    tools_parser = p.eps().var()
    req = choice == "required"
    if not t.section_start and t.per_call_start:
        single = _standard_json_tools(p, t.per_call_start, t.per_call_end, tools, parallel, req, name_field,
                                      args_field, t).var()
        tools_parser = p.trigger_rule("tool-calls", p.one_or_more(single + p.space())).var()
    else:
        tools_parser = _standard_json_tools(p, t.section_start, t.section_end, tools, parallel, req, name_field,
                                            args_field, t).var()
    if a.content.always_wrapped:
        wrapped = p.optional(a.content.start + p.content(p.until(a.content.end)) + a.content.end).var()
        return rp + wrapped + tools_parser + p.end()
    start = t.section_start or t.per_call_start or "{"
    return rp + p.optional(p.content(p.until(start))) + tools_parser + p.end()


def _id_choice(p: _P, key: str) -> _E:
    return p.atomic(p.literal('"' + key + '"') + p.space() + p.literal(":") + p.space()
                    + p.choice(p.literal('"') + p.tool_id(p.string_content('"')) + p.literal('"'),
                               p.tool_id(p.json_number())))


def _standard_json_tools(p: _P, start: str, end: str, tools: Sequence[Any], parallel: bool, force: bool,
                         name_key: str, args_key: str, t: Any) -> _E:
    if not tools:
        return p.eps()
    ename, eargs = name_key or "name", args_key or "arguments"
    p.eps().var()                               # tool_choices = eps()
    if t.fun_name_is_key:
        choices = _function_is_key(p, tools, args_key, eargs, t.id_field, t.gen_id_field)
    elif "." in ename or "." in eargs:
        raise NotImplementedError("nested tool-call keys")   # no sdist template (function_field is "function")
    else:
        choices = p.choice().var()
        nk = p.literal('"' + ename + '"').var()
        ak = p.literal('"' + eargs + '"').var()
        for tool in tools:
            name = tool.name
            node = _schema_node(tool)
            tname = (nk + p.space() + p.literal(":") + p.space()
                     + p.atomic(p.literal('"') + p.tool_name(p.literal(name)) + p.literal('"'))).var()
            targs = (ak + p.space() + p.literal(":") + p.space()
                     + p.tool_args(p.schema("tool-" + name + "-schema", node))).var()
            idp = p.eps().var()
            if t.id_field:
                idp = _id_choice(p, t.id_field).var()
            gidp = p.eps().var()
            if t.gen_id_field:
                gidp = _id_choice(p, t.gen_id_field).var()
            pairs = [(tname, ename), (targs, eargs)]
            if t.id_field:
                pairs.append((p.optional(idp).var(), t.id_field))
            if t.gen_id_field:
                pairs.append((p.optional(gidp).var(), t.gen_id_field))
            order = t.parameter_order
            pairs.sort(key=lambda x: order.index(x[1]) if x[1] in order else len(order))
            tf = p.eps().var()
            if t.openai_wrapper_trigger:
                tf = p.optional(p.literal('"type"') + p.space() + p.literal(":") + p.space()
                                + p.literal('"function"') + p.space() + p.literal(",") + p.space()).var()
            body = (p.tool_open(p.literal("{")) + p.space() + tf).var()
            for i, (x, _) in enumerate(pairs):
                body = (body + x).var()
                if i < len(pairs) - 1:
                    body = (body + p.space() + p.literal(",") + p.space()).var()
            body = (body + p.space() + p.tool_close(p.literal("}"))).var()
            choices = (choices | p.rule("tool-" + name, p.tool(body))).var()
    calls = choices
    if parallel:
        calls = (calls + p.zero_or_more(p.space() + p.literal(",") + p.space() + choices)).var()
    if t.tools_array_wrapped:
        calls = (p.literal("[") + p.space() + calls + p.space() + p.literal("]")).var()
    section = p.trigger_rule("tool-call", p.literal(start) + p.space() + calls + p.space() + p.literal(end)).var()
    return section if force else p.optional(section)


def _function_is_key(p: _P, tools: Sequence[Any], args_key: str, eargs: str, id_key: str, gen_key: str) -> _E:
    choices = p.choice().var()
    for tool in tools:
        name = tool.name
        node = _schema_node(tool)
        inner: list[_E] = []
        if id_key:
            idp = p.atomic(p.literal('"' + id_key + '"') + p.space() + p.literal(":") + p.space()
                           + p.literal('"') + p.tool_id(p.string_content('"')) + p.literal('"')).var()
            inner.append(p.optional(idp + p.space() + p.optional(p.literal(",") + p.space())).var())
        if gen_key:
            gp = _id_choice(p, gen_key).var()
            inner.append(p.optional(gp + p.space() + p.optional(p.literal(",") + p.space())).var())
        args = p.eps().var()
        if not args_key:
            args = p.tool_args(p.schema("tool-" + name + "-schema", node)).var()
        else:
            args = (p.literal('"' + eargs + '"') + p.space() + p.literal(":") + p.space()
                    + p.tool_args(p.schema("tool-" + name + "-schema", node))).var()
        inner.append(args)
        obj = p.eps().var()
        if not args_key and len(inner) == 1:
            obj = inner[0]
        else:
            obj = (p.literal("{") + p.space()).var()
            for i, x in enumerate(inner):
                obj = (obj + x).var()
                if i < len(inner) - 1:
                    obj = (obj + p.space()).var()
            obj = (obj + p.space() + p.literal("}")).var()
        tp = p.tool(p.tool_open(p.literal("{")) + p.space() + p.literal('"') + p.tool_name(p.literal(name))
                    + p.literal('"') + p.space() + p.literal(":") + p.space() + obj + p.space()
                    + p.tool_close(p.literal("}"))).var()
        choices = (choices | p.rule("tool-" + name, tp)).var()
    return choices


def _func_parser(p: _P, t: Any, name: str, call_id: _E, have_id: bool, args: _E, peek: _E | None) -> _E:
    # analyze_tools::build_func_parser
    opened = p.tool_open(t.name_prefix + p.tool_name(p.literal(name)) + t.name_suffix).var()
    matched = False
    fp = p.eps().var()
    if t.args_separator:
        opened = (opened + p.space() + p.literal(t.args_separator)).var()
    if t.name_suffix:
        fp = (opened + call_id + p.space() + args).var()
        matched = True
    elif have_id:
        fp = (p.atomic(opened + call_id) + p.space() + args).var()
        matched = True
    elif peek is not None:
        fp = (p.atomic(opened + call_id + p.space() + peek) + args).var()
        matched = True
    else:
        fp = (opened + call_id + p.space() + args).var()
    if t.close:
        fp = (fp + p.space() + p.tool_close(p.literal(t.close))).var()
    elif t.per_call_end:
        cp = (p.peek(p.space() + p.literal(t.per_call_end)) if t.tolerate_intertag_whitespace
              else p.peek(p.literal(t.per_call_end))).var()
        fp = (fp + p.tool_close(cp)).var()
    else:
        fp = (fp + p.tool_close(p.space())).var()
    if not matched:
        fp = p.atomic(fp).var()
    return fp


def _call_id_section(p: _P, t: Any, wrap_suffix: bool) -> tuple[_E, bool]:
    eps = p.eps().var()                         # call_id_section = p.eps()
    if (t.call_id_pos == "BETWEEN_FUNC_AND_ARGS" and t.call_id_prefix and (t.call_id_suffix or t.args_start)):
        if t.call_id_suffix:
            if wrap_suffix:        # tag_tagged: the suffix inside the optional
                return p.optional(t.call_id_prefix + p.tool_id(p.until(t.call_id_suffix)) + t.call_id_suffix).var(), True
            return (p.optional(t.call_id_prefix + p.tool_id(p.until(t.call_id_suffix))) + t.call_id_suffix).var(), True
        return p.optional(t.call_id_prefix + p.tool_id(p.until(t.args_start))).var(), True
    return eps, False


def _sections(p: _P, t: Any, rp: _E, tool_choice: _E, choice: str, parallel: bool, tagged: bool) -> _E:
    p.eps().var()                               # tool_calls = p.eps()
    if t.per_call_start:
        if tagged:
            wrapped = (t.per_call_start + p.space() + tool_choice + p.space() + t.per_call_end).var()
            if parallel:
                calls = p.trigger_rule("tool-call", wrapped + p.zero_or_more(p.space() + wrapped) + p.space()).var()
            else:
                calls = p.trigger_rule("tool-call", wrapped + p.space()).var()
            if t.section_start:
                tail = p.end() if not t.section_end else p.literal(t.section_end) + p.space()
                calls = p.trigger_rule("tool-calls", p.literal(t.section_start) + p.space() + calls + p.space()
                                       + tail).var()
        else:
            wrapped = (t.per_call_start + tool_choice + t.per_call_end).var()
            if parallel:
                calls = p.trigger_rule("tool-call", wrapped + p.zero_or_more(p.space() + wrapped)).var()
            else:
                calls = p.trigger_rule("tool-call", wrapped).var()
            if t.section_start:
                tail = p.end() if not t.section_end else p.literal(t.section_end)
                calls = p.trigger_rule("tool-calls", p.literal(t.section_start) + p.space() + calls + p.space()
                                       + tail).var()
    else:
        sep = ", "
        if tagged:
            if parallel:
                calls = p.trigger_rule("tool-call", t.section_start + p.space() + tool_choice
                                       + p.zero_or_more(sep + tool_choice) + p.space() + t.section_end).var()
            else:
                calls = p.trigger_rule("tool-call", t.section_start + p.space() + tool_choice + p.space()
                                       + t.section_end).var()
        else:
            if parallel:
                calls = p.trigger_rule("tool-call", t.section_start + tool_choice + p.zero_or_more(sep + tool_choice)
                                       + t.section_end).var()
            else:
                calls = p.trigger_rule("tool-call", t.section_start + tool_choice + t.section_end).var()
    if choice != "required":
        calls = p.optional(calls).var()
    marker = t.section_start or t.per_call_start
    before = (p.eps() if not marker else p.until(marker)).var()
    return rp + p.optional(p.content(before)) + calls + p.end()


def _tag_json(p: _P, a: Analysis, rp: _E, tools: Sequence[Any], choice: str, parallel: bool) -> _E:
    t = a.tools
    tc = p.choice().var()
    for tool in tools:
        name = tool.name
        node = _schema_node(tool)
        cid, have = _call_id_section(p, t, False)
        args = p.tool_args(p.schema("tool-" + name + "-schema", node)).var()
        if t.args_start:
            args = (p.literal(t.args_start) + args).var()
        if t.args_end:
            args = (args + p.literal(t.args_end)).var()
        peek = p.peek(p.literal(t.args_start)).var() if t.args_start else None
        fp = _func_parser(p, t, name, cid, have, args, peek)
        tc = (tc | p.rule("tool-" + name, fp)).var()
    return _sections(p, t, rp, tc, choice, parallel, False)


def _tag_tagged(p: _P, a: Analysis, rp: _E, tools: Sequence[Any], choice: str, parallel: bool) -> _E:
    from .peg_arena import _may_be_string
    from .qwen3_coder import _params

    t = a.tools
    until_suffix = p.rule("until-suffix", p.until(t.arg_value_suffix)).var()
    tc = p.choice().var()
    for tool in tools:
        name = tool.name
        req_p: list[_E] = []
        opt_p: list[_E] = []
        for pname, node, required in _params(tool):
            opened = p.tool_arg_open(t.arg_name_prefix + p.tool_arg_name(p.literal(pname)) + t.arg_name_suffix)
            if _may_be_string(node):
                value = p.ac(p.tool_arg_string_value(until_suffix) + p.tool_arg_close(p.literal(t.arg_value_suffix)),
                             t.arg_value_suffix)
            else:
                value = (p.tool_arg_json_value(p.schema("tool-" + name + "-arg-" + pname + "-schema", node))
                         + p.tool_arg_close(p.literal(t.arg_value_suffix)))
            arg = p.tool_arg(opened + t.arg_value_prefix + value).var()
            named = p.rule("tool-" + name + "-arg-" + pname, arg).var()
            (req_p if required else opt_p).append(named)
        seq = p.eps().var()
        for i, x in enumerate(req_p):
            if i > 0:
                seq = (seq + p.space()).var()
            seq = (seq + x).var()
        if opt_p:
            any_opt = p.choice().var()
            for x in opt_p:
                any_opt = (any_opt | x).var()
            seq = (seq + p.repeat(p.space() + any_opt, 0, -1)).var()
        if t.args_start:
            seq = (p.literal(t.args_start) + seq).var()
        if t.args_end:
            seq = (seq + p.literal(t.args_end)).var()
        cid, have = _call_id_section(p, t, True)
        peek = p.peek(p.literal(t.arg_name_prefix)).var() if (t.arg_name_prefix and req_p) else None
        fp = _func_parser(p, t, name, cid, have, seq, peek)
        tc = (tc | p.rule("tool-" + name, fp)).var()
    return _sections(p, t, rp, tc, choice, parallel, True)
