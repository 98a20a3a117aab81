"""Specialised tool-call handlers (``constrained.chat.handlers``) against llama.cpp's own
(``common_chat_templates_apply`` / ``common_chat_parse`` through ``oracle/shims/render_shim.cpp``): the cases and
the comparisons shared by ``tests/chat/test_handler_ports.py`` (a fixed sample) and ``scripts/handler_sweep.py``
(everything).

- ``setup_differences(name, toolsets, choices, parallels, formats)``: our server's ``chat_params`` (with
  ``llama_server_compat``) against the shim for a plain conversation and one with a past call and its result:
  prompt, grammar text, laziness, triggers, preserved tokens, generation prompt. ``named`` is a named
  ``tool_choice`` (llama-server reads it as ``auto``).
- ``parse_differences(name, replies, choices, parallels, formats)``: every prefix of each reply parsed as partial,
  and the whole as final, by ``tool_call_setup_for_template(..., llama_server_compat=True)``'s handler and by
  ``common_chat_parse``: the same message (content, reasoning, calls), or both fail.

Example:
    >>> sorted(REPLIES)[:3]
    ['deepseek_v3_2', 'functionary_v3_2', 'gemma4']
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from oracle.sdist import llama_cpp_source

D = llama_cpp_source() / "models" / "templates"


def _fn(name: str, params: Any = None, desc: str = "d") -> dict[str, Any]:
    f: dict[str, Any] = {"name": name, "description": desc}
    if params is not None:
        f["parameters"] = params
    return {"type": "function", "function": f}


WEATHER = _fn("get_weather", {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"enum": ["c", "f"]}}, "required": ["city"]})
PING = _fn("ping")
MIXED = _fn("q", {"type": "object", "properties": {
    "a": {"type": "string"}, "b": {"type": ["string", "integer"]},
    "c": {"type": "object", "properties": {"x": {"type": "number"}}},
    "d": {"type": ["null", "boolean", "array"]}}, "required": ["a", "b", "c"]})
NESTED = _fn("n.é", {"type": "object", "properties": {
    "deep": {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}, "required": ["l"]},
    "e": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "f": {"type": "integer", "minimum": 3}},
    "required": ["f", "e", "deep"]})
REF = _fn("r", {"type": "object", "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                "properties": {"p": {"$ref": "#/$defs/pt"}, "flag": {"type": "boolean"}}, "required": ["p"]})
ARRAYS = _fn("tag_items", {"type": "object", "properties": {
    "ids": {"type": "array", "items": {"type": "integer"}}, "opt": {"type": "string"},
    "pts": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}},
                                       "required": ["x"]}}}, "required": ["ids"]})
#: no parameters, enums / optional fields, mixed types and nested objects, arrays, a name outside [a-zA-Z0-9-]
#: with anyOf, $ref, two and three tools
TOOLSETS = {"weather": [WEATHER], "weather+ping": [WEATHER, PING], "mixed": [MIXED], "ping": [PING],
            "nested+mixed+weather": [NESTED, MIXED, WEATHER], "ref": [REF], "arrays": [ARRAYS]}
CHOICES = ("auto", "required", "none", "named")
PARALLELS = (True, False, None)
FORMATS = ("deepseek", "none")


def src(name: str) -> str:
    return (D / name).read_text()


@functools.cache
def _templates(name: str) -> Any:
    from constrained.chat import ChatTemplates

    return ChatTemplates(src(name))       # compiled once per template


def conversations(tools: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A plain conversation, one with a past call (id, arguments) and its result, one with past reasoning."""
    f = tools[0]["function"]["name"]
    return [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
            [{"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "abcDEF123",
                                                                  "function": {"name": f, "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny"}, {"role": "user", "content": "Now?"}],
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": "Sunny.", "reasoning_content": "Easy."},
             {"role": "user", "content": "And tomorrow?"}]]


def _choice(choice: str, tools: list[dict[str, Any]]) -> Any:
    return {"type": "function", "function": {"name": tools[-1]["function"]["name"]}} if choice == "named" else choice


def setup_differences(name: str, toolsets: Iterable[str] = TOOLSETS, choices: Sequence[str] = CHOICES,
                      parallels: Sequence[bool | None] = PARALLELS, formats: Sequence[str] = FORMATS,
                      convs: Sequence[int] = (0, 1, 2), thinking: Sequence[bool | None] = (None,),
                      ) -> tuple[int, list[tuple[Any, ...]]]:
    """``(cases compared, [(case, field) that differ])`` (``thinking``: ``chat_template_kwargs.enable_thinking``,
    None: not sent)."""
    from constrained.server.chat_api import chat_params
    from constrained.server.errors import HttpError
    from oracle.render import chat_apply

    s = src(name)
    t = _templates(name)
    n, bad = 0, []
    for ts in toolsets:
        tools = TOOLSETS[ts]
        for ci, msgs in enumerate(conversations(tools)):
            if ci not in convs:
                continue
            for choice in choices:
                for par in parallels:
                    for rf, et in [(f, e) for f in formats for e in thinking]:
                        body: dict[str, Any] = {"messages": msgs, "tools": tools, "reasoning_format": rf,
                                                "tool_choice": _choice(choice, tools)}
                        if par is not None:
                            body["parallel_tool_calls"] = par
                        if et is not None:
                            body["chat_template_kwargs"] = {"enable_thinking": et}
                        theirs = chat_apply(s, {**body, "tool_choice": "auto" if choice == "named" else choice})
                        case = (ts, ci, choice, par, rf, et)
                        n += 1
                        try:
                            o = chat_params({**body, "llama_server_compat": True}, t, jinja=True)
                        except HttpError as e:
                            if "error" not in theirs:
                                bad.append((case, f"ours raised {e}"))
                            continue
                        if "error" in theirs:
                            bad.append((case, f"theirs raised {theirs['error'][:80]}"))
                            continue
                        mine = {"prompt": o["prompt"], "grammar": o.get("grammar", ""),
                                "grammar_lazy": o["grammar_lazy"], "preserved_tokens": o["preserved_tokens"],
                                "generation_prompt": o["generation_prompt"],
                                "grammar_triggers": [{"type": x["type"], "value": x["value"]}
                                                     for x in o["grammar_triggers"]]}
                        for k, v in mine.items():
                            if v != theirs[k]:
                                bad.append((case, k))
    return n, bad


def _call(handler: str, name: str, args: dict[str, Any]) -> str:
    """A call in the handler's own syntax (as the model writes it)."""
    import json

    if handler == "gemma4":
        def g(v: Any) -> str:
            if isinstance(v, str):
                return f'<|"|>{v}<|"|>'
            if isinstance(v, dict):
                return "{" + ",".join(f"{k}:{g(x)}" for k, x in v.items()) + "}"
            if isinstance(v, list):
                return "[" + ",".join(g(x) for x in v) + "]"
            return json.dumps(v)
        return f"<|tool_call>call:{name}{g(args)}<tool_call|>"
    if handler == "deepseek_v3_2":          # one invoke; FCBLOCK becomes the template's block name
        ps = "".join(f'<｜DSML｜parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
                     f'{v if isinstance(v, str) else json.dumps(v)}</｜DSML｜parameter>\n' for k, v in args.items())
        return f'<｜DSML｜invoke name="{name}">\n{ps}</｜DSML｜invoke>'
    if handler == "kimi_k3":
        ps = "".join(f'<|open|>argument key="{k}" type="{"string" if isinstance(v, str) else "json"}"<|sep|>'
                     f'{v if isinstance(v, str) else json.dumps(v)}<|close|>argument<|sep|>' for k, v in args.items())
        return f'<|open|>call tool="{name}" index="{next(_K3)}"<|sep|>{ps}<|close|>call<|sep|>'
    if handler == "minimax_m3":
        return f'{MM}<invoke name="{name}">\n' + "".join(_mm(k, v) + "\n" for k, v in args.items()) + f"{MM}</invoke>"
    raise KeyError(handler)


MM = "]<]minimax[>["


def _mm(tag: str, v: Any) -> str:
    import json

    if isinstance(v, dict):
        inner = "".join(_mm(k, x) for k, x in v.items())
    elif isinstance(v, list):
        inner = "".join(_mm("item", x) for x in v)
    else:
        inner = v if isinstance(v, str) else json.dumps(v)
    return f"{MM}<{tag}>{inner}{MM}</{tag}>"


def _mmcalls(*invokes: str) -> str:
    return f"{MM}<tool_call>\n" + "\n".join(invokes) + f"\n{MM}</tool_call>"


_K3 = itertools.count()


def _dsml(*invokes: str) -> str:
    return "<｜DSML｜FCBLOCK>\n" + "\n".join(invokes) + "\n</｜DSML｜FCBLOCK>"


def replies(handler: str, source: str) -> list[str]:
    """:data:`REPLIES` for a template (DeepSeek: its call block's name)."""
    block = "tool_calls" if "function_calls" not in source else "function_calls"
    return [r.replace("FCBLOCK", block) for r in REPLIES[handler]]


W = {"city": 'Pa"ris é', "days": 3}
WJ = '{"city": "Pa\\"ris é", "days": 3}'
SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def _kimi(name: str, i: int, args: str) -> str:
    return f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{args}<|tool_call_end|>"

#: replies per handler: content, reasoning, one and two calls, nested values, an unknown tool, text after the
#: calls, malformed ones, multi-byte text
REPLIES: dict[str, list[str]] = {
    "kimi_k2": ["Just text.", f"<think>Let me see</think>Sure.{SB}{_kimi('get_weather', 0, WJ)}{SE}",
                f"{SB}{_kimi('get_weather', 0, WJ)}{_kimi('ping', 1, '{}')}{SE}", f"no section {_kimi('ping', 3, '{}')}",
                f"<think>thinking, then a call {SB}{_kimi('ping', 0, '{}')}", f"{SB}{_kimi('nope', 0, '{}')}{SE}",
                f"{SB}{_kimi('ping', 0, '{}')}{SE} and after", "<think>only thinking", "émoji 🎉"],
    "ministral_3": ["Just text.", f"[THINK]Let me see[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{WJ}",
                    f"[TOOL_CALLS]get_weather[ARGS]{WJ}[TOOL_CALLS]ping[ARGS]{{}}", "[TOOL_CALLS]nope[ARGS]{}",
                    "[TOOL_CALLS]ping[ARGS]{} after", "[THINK]only thinking", "émoji 🎉 [TOOL"],
    "gpt_oss": ["<|channel|>analysis<|message|>Think é<|end|><|start|>assistant<|channel|>final<|message|>Hello 🎉",
                "<|channel|>analysis<|message|>Need it<|end|><|start|>assistant to=functions.get_weather<|channel|>"
                f"commentary <|constrain|>json<|message|>{WJ}", "<|channel|>commentary to=functions.ping<|message|>{}",
                "<|channel|>commentary<|message|>Let me check<|end|><|start|>assistant to=functions.ping<|channel|>"
                "commentary<|message|>{}", "<|channel|>final<|message|>Hi", "plain text",
                "<|channel|>commentary to=assistant<|channel|>final<|message|>x",
                " to=browser.search<|channel|>commentary<|message|>{}<|end|>",
                "<|channel|>commentary to=functions.nope<|message|>{}"],
    "functionary_v3_2": ["all\nJust text.", f"get_weather\n{WJ}", f"all\nLet me check.>>>get_weather\n{WJ}>>>ping\n{{}}",
                         "all\nx>>>nope\n{}", "ping\n{} after", "all\némoji 🎉 >>", "nope"],
    "gemma4": [
        "Just text.", "<|channel>thought\nLet me see<channel|>Sure." + _call("gemma4", "get_weather", W),
        _call("gemma4", "get_weather", W) + _call("gemma4", "ping", {}),
        "<|channel>thought\nhm<channel|>" + _call("gemma4", "q", {"a": "x", "b": 2, "c": {"x": 1.5}, "d": [True, None]}),
        _call("gemma4", "nope", {}), _call("gemma4", "ping", {}) + " and after", "<|channel>thought\nonly thinking",
        "text<|channel>thought\nmid<channel|>more" + _call("gemma4", "get_weather", {"city": "a\nb"}),
        "<|channel><|channel>thought\nx<channel|>y", "émoji 🎉<channel|>tail", "<|tool_call>call:get_weather{city:3",
        "<|tool_call>call:get_weather{city:<|\"|>x<|\"|>,}<tool_call|>"],
    "deepseek_v3_2": [
        "Let me see</think>Sure.\n\n" + _dsml(_call("deepseek_v3_2", "get_weather", W)),
        "hm</think>" + _dsml(_call("deepseek_v3_2", "get_weather", W), _call("deepseek_v3_2", "ping", {})),
        "straight to a call\n\n" + _dsml(_call("deepseek_v3_2", "ping", {})),
        "</think>Just text.", "only thinking é", "x</think>" + _dsml(_call("deepseek_v3_2", "nope", {})),
        "x</think>" + _dsml(_call("deepseek_v3_2", "ping", {})) + " and after",
        "</think>" + _dsml(_call("deepseek_v3_2", "q", {"a": "x\ny", "b": "2", "c": {"x": 1.5}, "d": [True, None]})),
        '</think><｜DSML｜FCBLOCK>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="false">'
        '"P"</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜FCBLOCK>',
        "</think>émoji 🎉 <｜DSML｜FCBL"],
    "kimi_k3": [
        "Let me see<|close|>think<|sep|><|open|>response<|sep|>Sure.<|close|>response<|sep|><|open|>tools<|sep|>"
        + _call("kimi_k3", "get_weather", W) + "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
        "hm<|close|>think<|sep|><|open|>tools<|sep|>" + _call("kimi_k3", "get_weather", W)
        + _call("kimi_k3", "ping", {}) + "<|close|>tools<|sep|>",
        "hm<|close|>think<|sep|><|open|>response<|sep|>Just text é.<|close|>response<|sep|><|close|>message<|sep|>",
        "only thinking", "x<|open|>response<|sep|>no closer<|open|>tools<|sep|>" + _call("kimi_k3", "q", {
            "a": "x\ny", "b": 2, "c": {"x": 1.5}, "d": [True, None]}) + "<|close|>tools<|sep|>",
        "x<|close|>think<|sep|><|open|>tools<|sep|>" + _call("kimi_k3", "nope", {}) + "<|close|>tools<|sep|>",
        "x<|close|>think<|sep|><|open|>tools<|sep|>" + _call("kimi_k3", "ping", {}) + "<|close|>tools<|sep|> after",
        "émoji 🎉<|close|>think<|sep|><|open|>response<|sep|>🎉<|open|>to"],
    "minimax_m3": [
        "<mm:think>Let me see</mm:think>Sure." + _mmcalls(_call("minimax_m3", "get_weather", W)),
        "</mm:think>" + _mmcalls(_call("minimax_m3", "get_weather", W), _call("minimax_m3", "ping", {})),
        "Just text é.", "<mm:think>only thinking", "<mm:think> \n</mm:think>x",
        _mmcalls(_call("minimax_m3", "q", {"a": "x\ny", "b": "2", "c": {"x": 1.5}, "d": [True, None]})),
        _mmcalls(_call("minimax_m3", "tag_items", {"ids": [1, 2], "pts": [{"x": 1}, {"x": 2.5}], "opt": "o"})),
        _mmcalls(_call("minimax_m3", "nope", {})), _mmcalls(_call("minimax_m3", "ping", {})) + " and after",
        "émoji 🎉 ]<]minimax[>[<tool"],
}


_replies = replies


def parse_differences(name: str, handler: str, replies: Sequence[str] | None = None,
                      choices: Sequence[str] = ("auto", "required"), parallels: Sequence[bool] = (True, False),
                      formats: Sequence[str] = FORMATS, tools: Sequence[dict[str, Any]] | None = None,
                      step: int = 1, thinking: Sequence[bool] = (True,)) -> tuple[int, int, list[tuple[Any, ...]]]:
    """``(texts parsed, of which with calls, [(case, text, partial, theirs, ours)] that differ])``: every
    ``step``-th prefix of each reply (partial) and the whole (final)."""
    from constrained.chat.tools import tool_call_setup_for_template
    from oracle.render import chat_apply, chat_parse_body, parsed_message

    s = src(name)
    tools = list(tools or [WEATHER, MIXED, PING])
    n = n_calls = 0
    bad = []
    for choice in choices:
        for par in parallels:
            for rf, et in [(f, e) for f in formats for e in thinking]:
                body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice,
                        "parallel_tool_calls": par, "reasoning_format": rf,
                        "chat_template_kwargs": {"enable_thinking": et}}
                gen = chat_apply(s, body)["generation_prompt"]
                setup = tool_call_setup_for_template(s, tools, choice, par, llama_server_compat=True,
                                                     extract_reasoning=rf != "none", enable_thinking=et)
                texts: list[tuple[str, bool]] = []
                for r in (_replies(handler, s) if replies is None else replies):
                    texts += [(r[:i], True) for i in range(0, len(r) + 1, step)] + [(r, False)]
                theirs = chat_parse_body(s, body, texts)
                for (text, partial), th in zip(texts, theirs, strict=True):
                    mine = parsed_message(setup.handler.parse, gen, text, partial)
                    expect = {"ok": True, "msg": th["msg"]} if th["ok"] else {"ok": False}
                    n += 1
                    n_calls += bool(th["ok"] and th["msg"].get("tool_calls"))
                    if mine != expect:
                        bad.append(((choice, par, rf, et), text, partial, expect, mine))
    return n, n_calls, bad
