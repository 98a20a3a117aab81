"""Setup and reply-parse comparisons of our specialised tool-call handlers (``constrained.chat.handler_*``) with
llama.cpp's (``common_chat_templates_apply`` / ``common_chat_parse`` through ``oracle/shims/render_shim.cpp``).

``setup_results`` runs our server's ``chat_params`` (``llama_server_compat``) beside the shim for every tool set x
tool_choice auto / required / none / named x parallel on / off / absent x reasoning_format deepseek / none x two
conversations (a past call with its result; a past answer with reasoning) and gives each case's fields that
differ; ``parse_results`` parses every prefix of each reply as partial and the whole as final with both.
``scripts/tool_call_sweep.py --shim`` runs the whole sweep; ``tests/chat/test_handlers_lfm2_more.py`` a sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from oracle.render import chat_apply, chat_parse_body, parsed_message
from oracle.sdist import llama_cpp_source

__all__ = ["CHOICES", "REPLIES", "TEMPLATES", "TOOLSETS", "parse_results", "setup_results", "template_source"]


def _fn(name: str, params: Any = None, desc: str = "") -> dict[str, Any]:
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
ODD = _fn("n.é", {"type": "object", "properties": {
    "deep": {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}, "required": ["l"]},
    "e": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "f": {"type": "integer", "minimum": 3}},
    "required": ["f", "e", "deep"]})
REF = _fn("r", {"type": "object", "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                "properties": {"p": {"$ref": "#/$defs/pt"}, "flag": {"type": "boolean"}}, "required": ["p"]})
#: no parameters, nested objects, enums, arrays, optional fields, several tools, $refs
TOOLSETS = {"weather": [WEATHER], "weather+ping": [WEATHER, PING], "mixed": [MIXED], "ping": [PING],
            "odd+mixed+weather": [ODD, MIXED, WEATHER], "ref": [REF]}
CHOICES: list[Any] = ["auto", "required", "none", "named"]

#: the sdist templates of each handler ported here
TEMPLATES = {
    "lfm2": ["LFM2-8B-A1B.jinja"],
    "lfm2_5": ["LFM2.5-8B-A1B.jinja", "LFM2.5-Instruct.jinja"],
    "cohere2moe": ["Cohere2MoE.jinja"],
    "gigachat_v3": ["GigaChat3-10B-A1.8B.jinja"],
    "ling3": ["inclusionai-ling-3.0-flash.jinja"],
    "minicpm5": ["openbmb-MiniCPM5-1B.jinja"],
    "muse_glimmer": ["muse-glimmer.jinja"],
}

#: the parse sweep's tools (GigaChat 3: llama.cpp's jinja throws on MIXED's type list, a listed deviation)
PARSE_TOOLS: dict[str, list[dict[str, Any]]] = {"gigachat_v3": [WEATHER, PING]}

_W = '{"city": "Pa\\"ris é", "days": 3}'
#: replies per handler (content, reasoning, one and two calls, an unknown tool, text after the calls, a cut one,
#: multi-byte text); every prefix is parsed
REPLIES: dict[str, list[str]] = {
    "lfm2": ["Just text.", "<think>Let me see</think>Sure.<|tool_call_start|>[get_weather(city=\"Paris\", days=3)]"
             "<|tool_call_end|>",
             "<|tool_call_start|>[get_weather(city='Pa\\'ris é', units=\"c\"), ping()]<|tool_call_end|>",
             "<|tool_call_start|>[q(a=\"x\", b=7, c={'x': 1.5}, d=[True, None, false])]<|tool_call_end|>",
             "<|tool_call_start|>[q(a='y', b='z', c={\"x\": -2e3}, d=None)]<|tool_call_end|>",
             "<|tool_call_start|>[nope()]<|tool_call_end|>", "<|tool_call_start|>[ping()]<|tool_call_end|> after",
             "<think>only thinking", "émoji 🎉 <|tool_call_st"],
}
REPLIES["lfm2_5"] = REPLIES["lfm2"]
_A = '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": ' + _W + '}'
REPLIES["cohere2moe"] = [
    "Let me see<|END_THINKING|><|START_TEXT|>Just text é 🎉<|END_TEXT|><|END_OF_TURN_TOKEN|>",
    "<|START_THINKING|>hm<|END_THINKING|><|START_ACTION|>[\n    " + _A + "\n]<|END_ACTION|>",
    '<|END_THINKING|><|START_ACTION|>[' + _A + ', {"tool_call_id": 1, "tool_name": "ping", "parameters": {}}]'
    '<|END_ACTION|><|END_OF_TURN_TOKEN|>',
    'x<|START_ACTION|>[{"tool_name": "ping", "parameters": {}}]<|END_ACTION|>',
    '<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": "nope", "parameters": {}}]<|END_ACTION|>',
    "<|START_TEXT|>no thinking", "only thinking", "<|END_THINKING|><|START_TEXT|>a<|END_TEXT|> after"]
_G = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
REPLIES["gigachat_v3"] = [
    "Just text é 🎉", "Sure." + _G + '{"name": "get_weather", "arguments": ' + _W + "}",
    _G + '{"name": "ping", "arguments": {}}', _G + '{"name":"ping" , "arguments":{}} after',
    _G + '{"name": "ping", "arguments": {}}' + _G + '{"name": "ping", "arguments": {}}',
    _G + '{"name": "nope", "arguments": {}}', "cut <|message_sep|>\n\nfunction c"]


def _ling(name: str, **args: str) -> str:
    return "<tool_call>" + name + "\n" + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"
                                               for k, v in args.items()) + "</tool_call>"


REPLIES["ling3"] = [
    "Let me see</think>Just text é 🎉<|role_end|>", "hm</think>\n\nSure." + _ling("get_weather", city="Pa\"ris", days="3"),
    "</think>" + _ling("q", a="x y", b="7", c='{"x": 1.5}') + "\n" + _ling("ping") + "<|role_end|>",
    "thinking, then a call " + _ling("q", c='{"x": 1}', b="seven", a="s", d="[true]") + " after",
    "</think>" + _ling("nope"), "</think><tool_call>get_weather  <arg_key>units</arg_key><arg_value>c</arg_value>"
    "</tool_call>", "only thinking", "</think>cut <tool_call>get_wea"]


def _cpm(name: str, **args: str) -> str:
    return f'<function name="{name}">' + "".join(f'<param name="{k}">{v}</param>' for k, v in args.items()) + \
        "</function>"


REPLIES["minicpm5"] = [
    "<think>Let me see</think>\n\nJust text é 🎉", "Sure." + _cpm("get_weather", city="Pa\"ris", days="3"),
    "<think>hm</think>" + _cpm("q", a="<![CDATA[x</param>y]]>", b="7", c='{"x": 1.5}', d="[true]") + "\n"
    + _cpm("ping"), _cpm("get_weather", units="c") + " after", _cpm("nope"), "<think>only thinking",
    'cut <function name="get_wea']


def _muse(name: str, to: str = "functions", **args: str) -> str:
    return (f' to={to}<|message|><atem:function_calls>\n<atem:invoke name="{name}">'
            + "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>' for k, v in args.items())
            + "</atem:invoke>\n</atem:function_calls>")


REPLIES["muse_glimmer"] = [
    " to=self<|message|>Let me see<|eom|><|start|>assistant to=user<|message|>Just text é 🎉<|eot|>",
    "<|message|>plain", " to=self<|message|>hm<|eom|><|start|>assistant" + _muse("get_weather", city="Pa\"ris", days="3"),
    _muse("q", a="x", b="7", c='{"x": 1.5}') + "<|eom|><|start|>assistant" + _muse("ping", to="tools"),
    " to=user<|message|>Checking.<|eom|><|start|>assistant" + _muse("ping") + " after", _muse("nope"),
    " to=self<|message|>only thinking", ' to=functions<|message|><atem:function_calls><atem:invoke name="get_w']


def template_source(name: str) -> str:
    return (llama_cpp_source() / "models" / "templates" / name).read_text()


def _choice(c: Any, tools: list[dict[str, Any]]) -> Any:
    return {"type": "function", "function": {"name": tools[0]["function"]["name"]}} if c == "named" else c


def conversations(tools: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    first = tools[0]["function"]["name"]
    return [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "abcDEF123", "function": {
             "name": first, "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny"}, {"role": "user", "content": "Now?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": "Sunny.", "reasoning_content": "Easy."},
         {"role": "user", "content": "And tomorrow?"}]]


def setup_bodies(toolsets: dict[str, list[dict[str, Any]]] | None = None,
                 choices: list[Any] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    for toolset, tools in (toolsets or TOOLSETS).items():
        for ci, msgs in enumerate(conversations(tools)):
            for choice in choices or CHOICES:
                for par in (True, False, None):
                    for rf in ("deepseek", "none"):
                        body: dict[str, Any] = {"messages": msgs, "tools": tools,
                                                "tool_choice": _choice(choice, tools), "reasoning_format": rf}
                        if par is not None:
                            body["parallel_tool_calls"] = par
                        yield f"{toolset}/conv{ci}/{choice}/par={par}/{rf}", body


def setup_results(name: str, bodies: Any = None) -> Iterator[tuple[str, list[str]]]:
    """Each case's label and the fields of our setup that differ from llama.cpp's ([] = identical; ``error``:
    one side refused the request)."""
    from constrained.chat import ChatTemplates
    from constrained.server.chat_api import chat_params
    from constrained.server.errors import HttpError

    src = template_source(name)
    t = ChatTemplates(src)
    for label, body in bodies if bodies is not None else setup_bodies():
        # llama-server reads tool_choice with json_value(body, "tool_choice", "auto"): an object is a type error
        # and gives the default (the shim's json read throws instead), so a named choice is llama-server's auto
        named = isinstance(body.get("tool_choice"), dict)
        theirs = chat_apply(src, {**body, "tool_choice": "auto"} if named else body)
        try:
            o = chat_params({**body, "llama_server_compat": True}, t, jinja=True)
        except HttpError:
            yield label, [] if "error" in theirs else ["error"]
            continue
        if "error" in theirs:
            yield label, ["error"]
            continue
        mine = {"prompt": o["prompt"], "grammar": o.get("grammar", ""), "grammar_lazy": o["grammar_lazy"],
                "preserved_tokens": o["preserved_tokens"], "generation_prompt": o["generation_prompt"],
                "grammar_triggers": [{"type": x["type"], "value": x["value"]} for x in o["grammar_triggers"]]}
        yield label, [k for k in mine if mine[k] != theirs[k]]


def parse_results(name: str, handler: str, *, choice: str, parallel: bool, rf: str, step: int = 1,
                  tools: list[dict[str, Any]] | None = None) -> Iterator[tuple[str, bool, dict, dict]]:
    """``(text, partial, ours, theirs)`` for every ``step``-th prefix (partial) and the whole (final) of each reply
    of ``handler``: ``{"ok": True, "msg"}`` / ``{"ok": False}`` each."""
    from constrained.chat.tools import tool_call_setup_for_template

    src = template_source(name)
    tools = tools or PARSE_TOOLS.get(handler, [WEATHER, MIXED, PING])
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": parallel, "reasoning_format": rf}
    gen = chat_apply(src, body)["generation_prompt"]
    setup = tool_call_setup_for_template(src, tools, choice, parallel, llama_server_compat=True,
                                         extract_reasoning=rf != "none")
    texts: list[tuple[str, bool]] = []
    for r in REPLIES[handler]:
        texts += [(r[:i], True) for i in range(0, len(r) + 1, step)] + [(r, False)]
    theirs = chat_parse_body(src, body, texts)
    for (text, partial), t in zip(texts, theirs, strict=True):
        mine = parsed_message(setup.handler.parse, gen, text, partial)
        yield text, partial, mine, ({"ok": True, "msg": t["msg"]} if t["ok"] else {"ok": False})
