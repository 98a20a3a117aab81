"""The tool-call analysis of llama-server's differential template autoparser (``analyze_tools``,
common/chat-diff-analyzer.cpp:768-1635, and the tool parts of ``autoparser::analyze_template``).

llama-server renders probe conversations with one call, two calls, other names, other arguments, other values and
other ids, diffs the outputs and reads the tool-call syntax off the differences: the format (``JSON_NATIVE``: the
call is a JSON object; ``TAG_WITH_JSON``: a tagged name with JSON arguments; ``TAG_WITH_TAGGED``: tagged names and
tagged arguments), the section and per-call markers, the function-name markers, the argument markers and the call
id's place. :mod:`constrained.chat.autoparser_build` turns the result into llama-server's parser and grammar.

The small parsers the analysis runs on the rendered texts (``build_tagged_peg_parser``: strict, not lenient) are
written here as plain functions over bytes, with the same PEG semantics (ordered choice, greedy repetition without
backtracking, ``until`` stopping at a delimiter or at a delimiter's start that reaches the end of the input).

Example:
    >>> from constrained.chat.template import ChatTemplates
    >>> src = ("{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}{% for c in m.tool_calls or [] %}"
    ...        "<tool_call>\\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\\n"
    ...        "</tool_call>{% endfor %}<|im_end|>\\n{% endfor %}{% if tools %}{% endif %}")
    >>> a = analyze_template(ChatTemplates(src))
    >>> a.tools.mode, a.tools.per_call_start, a.tools.per_call_end
    ('JSON_NATIVE', '<tool_call>\\n', '</tool_call>')
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .autoparser import (
    ARG_FIRST,
    ARG_SECOND,
    ASSISTANT_MSG,
    CALL_ID_001,
    FUN_FIRST,
    FUN_SECOND,
    USER_MSG,
    Content,
    Reasoning,
    _probe_render,
    _probe_tools,
    analyze_content,
    analyze_reasoning,
    diff_split,
    trim_whitespace,
)
from .template import ChatTemplates

__all__ = ["Analysis", "ToolsAnalysis", "analyze_template"]

CALL_ID_002 = "call00002"
CALL_ID_999 = "call99999"
_WS = b" \t\n\v\f\r"

# ----------------------------------------------------------------------------------------------------------------
# the strict tagged PEG parsers of the analysis: a parser is f(s, pos) -> (end, tags) or None; tags are
# (name, text) pairs in the AST's visiting order (a later one wins, as tag_based_peg_mapper's map assignment)

_Res = tuple[int, list[tuple[str, bytes]]] | None
_Parser = Callable[[bytes, int], _Res]


def _lit(x: bytes) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        return (pos + len(x), []) if s.startswith(x, pos) else None
    return f


def _until(*delims: bytes) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        i = pos
        n = len(s)
        while i < n:
            for d in delims:
                if s.startswith(d, i) or (n - i < len(d) and d.startswith(s[i:])):
                    return i, []
            i += 1
        return n, []
    return f


def _space(s: bytes, pos: int) -> _Res:
    while pos < len(s) and s[pos] in _WS:
        pos += 1
    return pos, []


def _any(s: bytes, pos: int) -> _Res:
    if pos >= len(s):
        return None
    c = s[pos]
    n = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 1
    return min(pos + n, len(s)), []


def _rest(s: bytes, pos: int) -> _Res:
    return len(s), []


def _end(s: bytes, pos: int) -> _Res:
    return (pos, []) if pos == len(s) else None


def _seq(*ps: _Parser) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        tags: list[tuple[str, bytes]] = []
        for p in ps:
            r = p(s, pos)
            if r is None:
                return None
            pos = r[0]
            tags += r[1]
        return pos, tags
    return f


def _choice(*ps: _Parser) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        for p in ps:
            r = p(s, pos)
            if r is not None:
                return r
        return None
    return f


def _many(p: _Parser) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        tags: list[tuple[str, bytes]] = []
        while True:
            r = p(s, pos)
            if r is None or r[0] == pos:
                return pos, tags
            pos = r[0]
            tags += r[1]
    return f


def _opt(p: _Parser) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        r = p(s, pos)
        return r if r is not None else (pos, [])
    return f


def _not(p: _Parser) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        return None if p(s, pos) is not None else (pos, [])
    return f


def _tag(name: str, p: _Parser) -> _Parser:
    def f(s: bytes, pos: int) -> _Res:
        r = p(s, pos)
        return None if r is None else (r[0], [(name, s[pos:r[0]]), *r[1]])
    return f


_marker = _choice(_seq(_lit(b"<"), _until(b">"), _lit(b">")), _seq(_lit(b"["), _until(b"]"), _lit(b"]")))


def _parse(p: _Parser, s: bytes) -> dict[str, bytes] | None:
    """``parse_and_extract``: the tags of a parse from the start, None if it fails."""
    r = p(s, 0)
    return None if r is None else dict(r[1])


def _parse_anywhere(p: _Parser, s: bytes) -> dict[str, bytes] | None:
    """``parse_anywhere_and_extract``: the first position where ``p`` parses."""
    if not s:
        return _parse(p, s)
    for i in range(len(s)):
        r = p(s, i)
        if r is not None:
            return dict(r[1])
    return None


def _last_marker() -> _Parser:
    return _seq(_marker, _many(_seq(_not(_marker), _any)), _end)


def _trim_leading(s: bytes) -> bytes:
    return s.lstrip(_WS)


def _until_common_prefix(full: bytes, left: bytes, right: bytes) -> bytes:
    n = 0
    while n < min(len(left), len(right)) and left[n] == right[n]:
        n += 1
    if n == 0:
        return b""
    pos = full.find(left[:n])
    return b"" if pos < 0 else full[:pos]


# ----------------------------------------------------------------------------------------------------------------


@dataclass
class ToolsAnalysis:
    """``analyze_tools``' fields (``tool_format_analysis``, ``tool_function_analysis``,
    ``tool_arguments_analysis``, ``tool_id_analysis``), as text."""

    mode: str = "NONE"                     # NONE, JSON_NATIVE, TAG_WITH_JSON, TAG_WITH_TAGGED
    section_start: str = ""
    section_end: str = ""
    per_call_start: str = ""
    per_call_end: str = ""
    fun_name_is_key: bool = False
    tools_array_wrapped: bool = False
    openai_wrapper_trigger: bool = False
    function_field: str = "function"
    name_field: str = "name"
    args_field: str = "arguments"
    id_field: str = ""
    gen_id_field: str = ""
    parameter_order: list[str] = field(default_factory=list)
    name_prefix: str = ""                  # function.*
    name_suffix: str = ""
    args_separator: str = ""
    close: str = ""
    args_start: str = ""                   # arguments.*
    args_end: str = ""
    arg_name_prefix: str = ""
    arg_name_suffix: str = ""
    arg_value_prefix: str = ""
    arg_value_suffix: str = ""
    arg_separator: str = ""
    tolerate_intertag_whitespace: bool = False
    call_id_pos: str = "NONE"              # NONE, PRE_FUNC_NAME, BETWEEN_FUNC_AND_ARGS, POST_ARGS
    call_id_prefix: str = ""
    call_id_suffix: str = ""


@dataclass
class Analysis:
    """``autoparser::analyze_template``: reasoning, content, tools, the preserved tokens and extra stops."""

    reasoning: Reasoning
    content: Content
    tools: ToolsAnalysis
    supports_tool_calls: bool
    preserved_tokens: list[str]
    additional_stops: list[str]


def _call(name: str, args: dict[str, Any], cid: str = CALL_ID_001) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


_FIRST = _call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"})
_SECOND = _call(FUN_SECOND, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, CALL_ID_002)


def _asst(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": list(calls)}


class _Tools:
    """The analysis state on bytes (the C++ strings)."""

    def __init__(self, t: ChatTemplates, r: Reasoning, parallel: bool) -> None:
        self.t = t
        self.f: dict[str, Any] = {k: (v.encode() if isinstance(v, str) else v)
                                  for k, v in ToolsAnalysis().__dict__.items() if k != "parameter_order"}
        self.f["parameter_order"] = []
        self.user = {"role": "user", "content": USER_MSG}
        self._calls(r, parallel)
        if self.f["mode"] not in (b"NONE", b"JSON_NATIVE"):
            if parallel:
                self._per_call_markers()
            self._function_markers()
            if self.f["mode"] == b"TAG_WITH_TAGGED":
                self._arg_name_markers()
                self._arg_value_markers()
            # extract_argument_separator: the common prefix of ARG_FIRST and ARG_SECOND is empty, so it finds "";
            # extract_args_markers works only on JSON_NATIVE, which never gets here
            self._call_id_markers()

    def compare(self, a: dict[str, Any], b: dict[str, Any]) -> tuple[tuple[bytes, bytes, bytes, bytes], bytes, bytes] | None:
        oa = _probe_render(self.t, [self.user, a], False, True, _probe_tools())
        ob = _probe_render(self.t, [self.user, b], False, True, _probe_tools())
        if oa is None or ob is None:
            return None
        return diff_split(oa, ob), oa, ob

    def _calls(self, r: Reasoning, parallel: bool) -> None:
        c = self.compare({"role": "assistant", "content": ASSISTANT_MSG}, _asst(_FIRST))
        if c is None:
            return
        hay = c[0][3]
        if not hay:
            return
        fun, arg = FUN_FIRST.encode(), ARG_FIRST.encode()

        def in_json(needle: bytes) -> bool:
            p = _seq(_choice(_lit(b"{"), _lit(b":")), _space, _tag("dq", _seq(_lit(b'"'), _lit(needle), _lit(b'"'))))
            return _parse_anywhere(p, hay) is not None

        f = self.f
        f["mode"] = b"JSON_NATIVE" if in_json(fun) else b"TAG_WITH_JSON" if in_json(arg) else b"TAG_WITH_TAGGED"
        clean = hay
        rs, re_ = r.start.encode(), r.end.encode()
        if rs and (pos := hay.find(rs)) >= 0:
            clean = hay[:pos] + hay[pos + len(rs):]
        if re_ and (pos := clean.find(re_)) >= 0:
            clean = clean[:pos] + clean[pos + len(re_):]
        if f["mode"] == b"JSON_NATIVE":
            self._json_native(clean, fun, arg)
            if parallel:
                self._json_parallel()
        else:
            self._non_json(clean, fun)
        f["section_end"] = trim_whitespace(f["section_end"])
        f["per_call_end"] = trim_whitespace(f["per_call_end"])

    def _json_parallel(self) -> None:
        c = self.compare(_asst(_FIRST), _asst(_FIRST, _SECOND))
        if c is None:
            return
        f = self.f
        if f["section_start"] and f["section_start"] in c[0][3]:
            f["per_call_start"], f["per_call_end"] = f["section_start"], f["section_end"]
            f["section_start"] = f["section_end"] = b""

    def _json_native(self, clean: bytes, fun: bytes, arg: bytes) -> None:
        f = self.f
        js, je = clean.find(b"{"), clean.rfind(b"}")
        if js < 0 or je < 0:
            raise ValueError("no JSON object in the tool call")       # std::out_of_range / parse_error in C++
        cut = clean[js:je + 1]
        struct = json.loads(cut.decode("utf-8"))
        if not isinstance(struct, dict):
            raise ValueError("the tool call is not a JSON object")

        def dump(v: Any) -> str:
            return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

        def register(prefix: str, k: str, v: Any) -> None:
            key = (prefix + "." + k if prefix else k).encode()
            if isinstance(v, str) and "call0000" in v:
                f["id_field"] = key
            elif isinstance(v, str) and v == fun.decode():
                f["name_field"] = key
            elif arg.decode() in dump(v):
                f["args_field"] = key
            elif "id" in k:
                f["gen_id_field"] = key

        for k, v in struct.items():
            if k == fun.decode():
                f["fun_name_is_key"] = True
                f["name_field"] = f["args_field"] = b""
            else:
                if isinstance(v, dict) and arg.decode() not in dump(v):
                    f["function_field"] = k.encode()
                    for k2, v2 in v.items():
                        register(k, k2, v2)
                register("", k, v)
        arr = _tag("pre", _seq(_lit(b"["), _space))
        post = _tag("post", _seq(_space, _lit(b"]")))
        tags = _parse_anywhere(_seq(arr, _lit(cut), post), clean)
        if tags is not None:
            f["tools_array_wrapped"] = True
            js -= len(tags.get("pre", b""))
            je += len(tags.get("post", b""))
        je += 1
        located = []
        for k in ("name_field", "args_field", "id_field", "gen_id_field"):
            if f[k]:
                p = clean.find(f[k])
                located.append((p if p >= 0 else 1 << 64, f[k]))
        f["parameter_order"] = [n for _, n in sorted(located)]
        f["section_start"] = _trim_leading(clean[:js])
        f["section_end"] = trim_whitespace(clean[je:])
        if f["tools_array_wrapped"] and f["section_end"] == b"]":
            f["section_end"] = b""

    def _non_json(self, clean: bytes, fun: bytes) -> None:
        f = self.f
        fm = _tag("fun_marker", _choice(
            _seq(_tag("fun_pre", _seq(_lit(b"<"), _until(b">", fun))), _lit(fun),
                 _tag("fun_post", _seq(_not(_seq(_space, _lit(b"<"))), _until(b">"), _lit(b">"))), _space),
            _seq(_tag("fun_pre", _seq(_lit(b"["), _until(b"]", fun))), _lit(fun),
                 _tag("fun_post", _seq(_not(_seq(_space, _lit(b"["), _until(b"]"), _lit(b"]"))), _space)))))
        fun_res = _parse_anywhere(fm, clean)
        marker = fun_res["fun_marker"] if fun_res is not None else fun
        per_tool = _seq(_tag("sec_start", _seq(_marker, _space)), _tag("call_start", _seq(_marker, _space)),
                        _tag("fun_pre", _until(marker)), _lit(marker), _tag("rest", _rest))
        section = _seq(_tag("sec_start", _seq(_marker, _space)), _lit(marker), _tag("rest", _rest))
        res = _parse_anywhere(per_tool, clean)
        if res is not None:
            double = _seq(_tag("call_end", _seq(_marker, _space)), _tag("sec_end", _seq(_marker, _space)), _end)
            res_end = _parse_anywhere(double, res.get("rest", b""))
            f["name_prefix"] = (fun_res or {}).get("fun_pre", b"") + f["name_prefix"]
        else:
            res = _parse_anywhere(section, clean)
            single = _seq(_tag("sec_end", _seq(_marker, _space)), _end)
            res_end = _parse_anywhere(single, (res or {}).get("rest", b""))
        res, res_end = res or {}, res_end or {}
        f["per_call_start"] = res.get("call_start", b"")
        f["per_call_end"] = res_end.get("call_end", b"")
        f["section_start"] = res.get("sec_start", b"")
        f["section_end"] = res_end.get("sec_end", b"")

    def _per_call_markers(self) -> None:
        c = self.compare(_asst(_FIRST), _asst(_FIRST, _SECOND))
        if c is None:
            return
        (_, suffix, _, right), oa, ob = c
        f = self.f
        second = _trim_leading(diff_split(suffix, right)[3])
        if f["section_start"] and second.startswith(f["section_start"]):
            f["per_call_start"], f["per_call_end"] = f["section_start"], f["section_end"]
            f["section_start"] = f["section_end"] = b""
        if f["per_call_end"]:
            one, two = oa.count(f["per_call_end"]), ob.count(f["per_call_end"])
            if one > 0 and one == two:
                f["section_end"] = f["per_call_end"]
                f["per_call_end"] = b""

    def _function_markers(self) -> None:
        c = self.compare(_asst(_FIRST), _asst(_SECOND))
        if c is None:
            return
        prefix, suffix, left, right = c[0]
        f = self.f
        ff, fs = FUN_FIRST.encode(), FUN_SECOND.encode()
        if ff not in left or fs not in right:
            return
        pm = f["per_call_start"] or f["section_start"]
        if pm and prefix.rfind(pm) >= 0:
            f["name_prefix"] = prefix[prefix.rfind(pm) + len(pm):]
        tags = _parse(_seq(_tag("pre", _until(ff)), _lit(ff), _tag("post", _many(_seq(_not(_marker), _any)))), left)
        if tags is not None:
            f["name_prefix"] += tags.get("pre", b"")
            f["name_suffix"] = tags.get("post", b"")
        if f["mode"] == b"TAG_WITH_JSON":
            non_json = _choice(_marker, _seq(_not(_lit(b"{")), _not(_lit(b"[")), _any))
            after = _seq(_many(_seq(_not(_marker), _any)), _marker)
            tags = _parse(_seq(_tag("ext", _many(non_json)), after), suffix)
            if tags is not None:
                f["name_suffix"] += tags.get("ext", b"")
        else:
            tags = _parse(_tag("ext", _many(_seq(_not(_marker), _any))), suffix)
            if tags is not None:
                ext = tags.get("ext", b"")
                f["name_suffix"] += ext
                arg_start = _seq(_marker, _space, _choice(_lit(ARG_FIRST.encode()), _lit(ARG_SECOND.encode())))
                st = _parse(_seq(_tag("sep", _many(_seq(_not(arg_start), _any))), arg_start), suffix[len(ext):])
                if st is not None:
                    f["args_separator"] = trim_whitespace(st.get("sep", b""))
        sm = f["per_call_end"] or f["section_end"]
        closer = b""
        if not sm:
            nc = self.compare(_asst(_FIRST), {"role": "assistant", "content": ASSISTANT_MSG})
            if nc is not None:
                nl = nc[0][2]
                p = nl.find(b"YYYY")
                closer = nl[p + 4:] if p >= 0 else nl[3:]      # npos + 4 wraps to 3 in C++
        else:
            p = suffix.find(sm)
            closer = suffix if p < 0 else suffix[:p]
        if closer:
            if f["mode"] == b"TAG_WITH_TAGGED":
                tags = _parse(_seq(_until(b"YYYY"), _lit(b"YYYY"), _space, _marker, _space, _tag("close", _rest)), closer)
                if tags is not None:
                    f["close"] = tags.get("close", b"")
            elif f["mode"] == b"TAG_WITH_JSON":
                tags = _parse(_seq(_until(b"YYYY"), _lit(b"YYYY"), _tag("post_val", _rest)), closer)
                if tags is not None:
                    post = tags.get("post_val", b"")
                    pos = max(post.rfind(b"}"), post.rfind(b"]"))
                    if 0 <= pos < len(post) - 1:
                        f["close"] = _trim_leading(post[pos + 1:])
        f["close"] = _trim_leading(f["close"])

    def _arg_name_markers(self) -> None:
        c = self.compare(_asst(_call(FUN_FIRST, {ARG_FIRST: "XXXX"})), _asst(_call(FUN_FIRST, {ARG_SECOND: "YYYY"})))
        if c is None:
            return
        prefix, suffix, left, right = c[0]
        if not left or not right:
            return
        f = self.f
        a1, a2 = ARG_FIRST.encode(), ARG_SECOND.encode()
        lt = _parse_anywhere(_seq(_tag("pre", _until(a1)), _lit(a1), _tag("suffix", _until(b'"', b"X"))), left)
        rt = _parse_anywhere(_seq(_tag("pre", _until(a2)), _lit(a2), _tag("suffix", _until(b'"', b"Y"))), right)
        if (lt is not None and rt is not None and lt.get("pre", b"") and lt.get("pre", b"") == rt.get("pre", b"")
                and lt.get("suffix", b"") == rt.get("suffix", b"")):
            f["arg_name_prefix"] = lt.get("pre", b"")
            f["arg_name_suffix"] = lt.get("suffix", b"")
        elif left.startswith(a1) and right.startswith(a2):
            last = _last_marker()
            pt = _parse(_seq(_many(_seq(_not(last), _any)), _tag("name_prefix", last)), prefix)
            f["arg_name_prefix"] = pt.get("name_prefix", b"") if pt is not None else prefix
            after = left[len(a1):] + suffix
            st = _parse_anywhere(_tag("suffix", _seq(_many(_seq(_not(_marker), _any)), _marker, _space)), after)
            if st is not None:
                f["arg_name_suffix"] = st.get("suffix", b"")

    def _arg_value_markers(self) -> None:
        c = self.compare(_asst(_call(FUN_FIRST, {ARG_FIRST: "XXXX"})), _asst(_call(FUN_FIRST, {ARG_FIRST: "YYYY"})))
        if c is None:
            return
        prefix, suffix, left, right = c[0]
        if left != b"XXXX" or right != b"YYYY":
            return
        f = self.f
        ending = ARG_FIRST.encode() + f["arg_name_suffix"]
        if prefix.rfind(ending) >= 0:
            prefix = prefix[prefix.rfind(ending) + len(ending):]
        if prefix:
            last = _last_marker()
            pt = _parse(_seq(_many(_seq(_not(last), _any)), _tag("val_prefix", last)), prefix)
            f["arg_value_prefix"] = pt.get("val_prefix", b"") if pt is not None else prefix
        vs = suffix
        if f["close"]:
            p = vs.find(f["close"])
            if p >= 0:
                vs = vs[:p]
        elif f["per_call_end"] or f["section_end"]:
            em = f["per_call_end"] or f["section_end"]
            p = vs.find(em)
            if p >= 0:
                vs = vs[:p]
        if trim_whitespace(vs):
            f["arg_value_suffix"] = vs

    def _call_id_markers(self) -> None:
        c = self.compare(_asst(_FIRST), _asst(_call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, CALL_ID_999)))
        if c is None:
            return
        prefix, suffix, left, right = c[0]
        if not left and not right:
            return
        f = self.f
        common = b"call"
        i1, i2 = CALL_ID_001.encode(), CALL_ID_999.encode()
        n = 0
        while n < min(len(i1), len(i2)) and i1[n] == i2[n]:
            n += 1
        common = i1[:n]
        fn = FUN_FIRST.encode()
        in_pre, in_suf = prefix.rfind(fn), suffix.find(fn)

        def last_marker(s: bytes) -> bytes:
            last = _last_marker()
            r = _parse_anywhere(_seq(_many(_seq(_not(last), _any)), _tag("m", _marker)), s)
            return r.get("m", b"") if r is not None else b""

        def first_marker(s: bytes) -> bytes:
            r = _parse_anywhere(_tag("m", _marker), s)
            return r.get("m", b"") if r is not None else b""

        if in_pre >= 0 and in_suf < 0:
            a_pre, a_suf = prefix.find(b"{", in_pre), suffix.find(b"{")
            if a_suf >= 0 and a_pre < 0:
                f["call_id_pos"] = b"BETWEEN_FUNC_AND_ARGS"
                after = prefix[in_pre + len(fn):]
                p = _seq(_tag("prefix", _marker), _many(_seq(_not(_marker), _not(_lit(common)), _any)), _lit(common))
                r = _parse_anywhere(p, after)
                f["call_id_prefix"] = r.get("prefix", b"") if r is not None else last_marker(after)
                sp = _seq(_many(_seq(_not(_marker), _not(_lit(b"{")), _any)), _tag("suffix", _marker))
                r = _parse_anywhere(sp, suffix)
                if r is not None:
                    f["call_id_suffix"] = r.get("suffix", b"")
            elif a_pre >= 0:
                f["call_id_pos"] = b"POST_ARGS"
                after = prefix[a_pre:]
                cb = after.rfind(b"}")
                if cb >= 0:
                    f["call_id_prefix"] = last_marker(after[cb + 1:])
                f["call_id_suffix"] = first_marker(suffix)
        elif in_suf >= 0 and in_pre < 0:
            f["call_id_pos"] = b"PRE_FUNC_NAME"
            f["call_id_prefix"] = last_marker(prefix)
            f["call_id_suffix"] = first_marker(suffix[:in_suf])
        if f["call_id_prefix"] == f["args_end"]:
            f["call_id_prefix"] = b""
        if f["call_id_suffix"] == f["args_start"]:
            f["call_id_suffix"] = b""
        if f["call_id_pos"] != b"NONE" and f["call_id_suffix"] and f["per_call_end"].startswith(f["call_id_suffix"]):
            f["per_call_end"] = b""

    def result(self) -> ToolsAnalysis:
        d = {k: (v.decode("utf-8", "replace") if isinstance(v, bytes) else v) for k, v in self.f.items()}
        d["parameter_order"] = [x.decode("utf-8", "replace") for x in self.f["parameter_order"]]
        return ToolsAnalysis(**d)


_PRESERVE = ("section_start", "section_end", "per_call_start", "per_call_end", "name_prefix", "name_suffix",
             "args_separator", "close", "args_start", "args_end", "arg_name_prefix", "arg_name_suffix",
             "arg_separator", "arg_value_prefix", "arg_value_suffix", "call_id_prefix", "call_id_suffix")


def analyze_template(t: ChatTemplates) -> Analysis:
    """``autoparser::analyze_template`` for ``t`` (cached on it): reasoning, content, tools (when the template
    renders tool calls), the preserved tokens (every marker, trimmed, then the workarounds' own)."""
    cached = getattr(t, "_analysis", None)
    if cached is not None:
        return cached
    from .caps import template_caps

    caps = template_caps(t.source)
    r = analyze_reasoning(t)
    c = analyze_content(t, r)
    pre_r, pre_c = _unpatched(t, r, c)
    tools = _Tools(t, pre_r, bool(caps["supports_parallel_tool_calls"])).result() if caps["supports_tool_calls"] \
        else ToolsAnalysis()
    src = t.source
    # the workarounds of chat-diff-analyzer.cpp:36-205 run after collect_preserved_tokens: the reasoning and content
    # patches are already in analyze_reasoning / analyze_content (whose markers the tokens are collected from
    # here, so a patched marker is collected as the C++ workaround pushes it)
    tokens: list[str] = []

    def add(x: str) -> None:
        x = x.strip(" \t\n\v\f\r")
        if x and x not in tokens:
            tokens.append(x)

    def push(*xs: str) -> None:
        tokens.extend(xs)

    for x in (pre_r.start, pre_r.end, pre_c.start, pre_c.end):
        add(x)
    for k in _PRESERVE:
        add(getattr(tools, k))
    stops: list[str] = []
    if ("content.split('</think>')" in src and "reasoning_content" not in src and "<SPECIAL_12>" not in src
            and pre_r.mode == "none"):
        push("<think>", "</think>")
    if "Write your thoughts between <think></think> and write your response between <response></response>" in src:
        push("<think>", "</think>", "<response>", "</response>")
    if "<|CHATBOT_TOKEN|>" in src and "<|END_OF_TURN_TOKEN|>" in src and not pre_c.start:
        push("<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>")
    if ('set has_code_interpreter = tools | selectattr("type", "equalto", "code_interpreter") | list | length > 0'
            in src):
        tools.name_prefix = tools.section_start = tools.section_end = tools.close = ""
        tools.per_call_start, tools.per_call_end = "<function=", "</function>"
        tokens = ["<|eot_id|>", "<|eom_id|>", "<function=", ">", "</function>"]
    if "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'" in src:
        tools.section_start, tools.section_end = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
        tools.per_call_start, tools.name_prefix = "<｜tool▁call▁begin｜>function", "<｜tool▁sep｜>"
        tools.per_call_end, tools.close = "<｜tool▁call▁end｜>", "```"
    if all(k in src for k in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        tools.mode, tools.section_start, tools.section_end = "JSON_NATIVE", "", ""
        tools.per_call_start, tools.per_call_end, tools.tools_array_wrapped = "<TOOLCALL>", "</TOOLCALL>", True
        tokens = ["<SPECIAL_11>", "</think>", "<TOOLCALL>", "</TOOLCALL>"]
    if 'Respond in the format {"name": function name' in src and "Do not use variables." in src:
        tools.openai_wrapper_trigger = True
    if "laguna_glm_thinking" in src:
        tools.arg_value_prefix = tools.arg_value_prefix.strip(" \t\n\v\f\r")
        tools.arg_value_suffix = tools.arg_value_suffix.strip(" \t\n\v\f\r")
        tools.arg_separator = tools.arg_separator.strip(" \t\n\v\f\r")
        tools.tolerate_intertag_whitespace = True
        stops.append("</assistant>")
    if "Bailing V3 chat template" in src:
        tools.arg_value_suffix = tools.arg_value_suffix.strip(" \t\n\v\f\r")
        tools.tolerate_intertag_whitespace = True
    out = Analysis(r, c, tools, bool(caps["supports_tool_calls"]), tokens, stops)
    t._analysis = out  # type: ignore[attr-defined]
    return out


def _unpatched(t: ChatTemplates, r: Reasoning, c: Content) -> tuple[Reasoning, Content]:
    """The reasoning and content markers before the workarounds (collect_preserved_tokens runs before them)."""
    from . import autoparser as ap

    src = t.source
    patched = ("content.split('</think>')" in src or "Write your thoughts between <think>" in src
               or "<SPECIAL_10>" in src or "laguna_glm_thinking" in src or "<|CHATBOT_TOKEN|>" in src
               or "set has_code_interpreter" in src)
    if not patched:
        return r, c
    rd: dict[str, Any] = {"mode": "none", "start": b"", "end": b""}
    ap._presence(t, rd)
    ap._thinking_enabled(t, rd)
    from .caps import template_caps

    if template_caps(src)["supports_tool_calls"]:
        ap._scope(t, rd)
    raw_r = Reasoning(rd["mode"], rd["start"].decode("utf-8", "replace"), rd["end"].decode("utf-8", "replace"))
    return raw_r, ap._content(t, raw_r)
