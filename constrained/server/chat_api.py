"""``/v1/chat/completions`` bodies → ``/completion`` parameters, as ``oaicompat_chat_params_parse``
(server-common.cpp:1224-1451): the checks and their messages, ``response_format`` / ``json_schema`` / ``grammar``,
the chat template, ``logprobs`` / ``top_logprobs``, and every other key copied through.

Errors raised as :class:`~.errors.HttpError` carry llama-server's status: ``std::invalid_argument`` is 400,
``std::runtime_error`` is 500 (``ex_wrapper``).

Example:
    >>> from constrained.chat import ChatTemplates
    >>> p = chat_params({"messages": [{"role": "user", "content": "Hi"}], "response_format": {"type": "json_object"}},
    ...                 ChatTemplates(None), jinja=False)
    >>> p["prompt"], p["grammar_type"]
    ('<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n', 'tool_calls')
"""

from __future__ import annotations

import json
from typing import Any

from sampler.request import json_type_name

from ..chat import ChatTemplateError, ChatTemplates
from ..chat.reply_parsers import AutoChatParser, ReplySpec, ResponseFormatParser
from ..chat.template import generation_prompt
from ..chat.tool_grammar import PEG_JSON_RULES
from ..json_schema import convert_json_schema
from .errors import HttpError

__all__ = ["MEDIA_PARTS", "REASONING_FORMATS", "chat_params", "parser_for", "response_format_grammar"]


# common_reasoning_format_from_name's names (chat.cpp:889)
REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


# the media part types llama-server loads (each refused without a projector), by what they carry
MEDIA_PARTS = {"image_url": "image", "input_audio": "audio", "input_video": "video", "video_url": "video"}


def _bad(msg: str) -> HttpError:
    return HttpError(msg, "invalid_request_error")


def _server(msg: str) -> HttpError:
    return HttpError(msg, "server_error")


def _jv(d: Any, key: str, default: Any, kind: type | tuple[type, ...]) -> Any:
    """``json_value``: the default when absent, null or of the wrong type."""
    if not isinstance(d, dict) or key not in d or d[key] is None:
        return default
    v = d[key]
    if kind is bool:
        return v if isinstance(v, bool) else default
    if kind is int:
        return v if isinstance(v, int) and not isinstance(v, bool) else default
    return v if isinstance(v, kind) else default


def chat_params(body: dict[str, Any], templates: ChatTemplates, *, jinja: bool, prefill_assistant: bool = True,
                chat_template_kwargs: dict[str, Any] | None = None,
                reasoning_format: str = "deepseek", reasoning_budget: int = -1,
                reasoning_budget_message: str = "") -> dict[str, Any]:
    """The ``/completion`` body a chat request becomes (``prompt`` rendered, grammar chosen). ``reasoning_format``
    is the server's ``--reasoning-format`` (the request's field wins); ``reasoning_budget`` /
    ``reasoning_budget_message`` its ``--reasoning-budget`` / ``--reasoning-budget-message`` (the request's
    ``reasoning_budget_tokens`` / ``thinking_budget_tokens`` and ``reasoning_budget_message`` win): with the
    template's thinking tags they become the reasoning-budget sampler's fields (server-common.cpp:1412-1427)."""
    out: dict[str, Any] = {}
    tools = body.get("tools")
    has_tools = isinstance(tools, list) and len(tools) > 0
    if jinja and has_tools:                   # the GGUF's tool_use template renders requests with tools
        templates = templates.for_tools()
    tool_choice = _jv(body, "tool_choice", "auto", str)
    if not jinja:
        if has_tools:
            raise _server("tools param requires --jinja flag")
        if tool_choice != "auto":
            raise _server("tool_choice param requires --jinja flag")
    stop = body.get("stop")
    out["stop"] = [stop] if isinstance(stop, str) else (stop if isinstance(stop, list) else [])
    json_schema = body.get("json_schema")
    grammar = _jv(body, "grammar", "", str)
    # a string is a JSON value, not a schema: no grammar here; the /completion side refuses it (copied through)
    chat_schema = None if isinstance(json_schema, str) else json_schema
    if json_schema is not None and grammar:
        raise _server("Cannot use both json_schema and grammar")
    json_schema = chat_schema
    if "response_format" in body:
        rf = _jv(body, "response_format", {}, dict)
        rtype = _jv(rf, "type", "", str)
        if rtype == "json_object":
            if "schema" in rf or _empty(json_schema):
                json_schema = rf.get("schema", {}) if rf.get("schema") is not None else {}
        elif rtype == "json_schema":
            wrapper = _jv(rf, "json_schema", {}, dict)
            json_schema = wrapper.get("schema", {}) if wrapper.get("schema") is not None else {}
        elif rtype and rtype != "text":
            raise _bad(f'response_format type must be one of "text" or "json_object", but got: {rtype}')
    if isinstance(json_schema, dict) and not json_schema:
        json_schema = {"type": "object"}
    if "messages" not in body:
        raise _bad("'messages' is required")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise _bad("Expected 'messages' to be an array")
    for msg in messages:
        role = _jv(msg, "role", "", str)
        has_content = isinstance(msg, dict) and "content" in msg
        if role != "assistant" and not has_content:
            raise _bad("All non-assistant messages must contain 'content'")
        if role == "assistant":
            if not has_content and not (isinstance(msg, dict) and "tool_calls" in msg):
                raise _bad("Assistant message must contain either 'content' or 'tool_calls'!")
            if not has_content:
                continue
        content = msg["content"]
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise _bad("Expected 'content' to be a string or an array")
        for part in content:         # oaicompat_content_load_media (server-common.cpp:1151), no projector here
            ptype = _jv(part, "type", "", str)
            media = MEDIA_PARTS.get(ptype)
            if media is not None:    # a runtime_error there: ex_wrapper answers 500 server_error
                raise _server(f"{media} input is not supported - hint: if this is unexpected, you may need to "
                              "provide the mmproj")
            if ptype != "text":
                raise _bad("unsupported content[].type")
    msgs = [_parse_msg(m) for m in messages]
    add_gen = _jv(body, "add_generation_prompt", True, bool)
    cont = body.get("continue_final_message")
    continuation = bool(cont) if "continue_final_message" in body else False
    if not continuation and prefill_assistant and msgs and msgs[-1]["role"] == "assistant":
        if len(msgs) >= 2 and msgs[-2]["role"] == "assistant":
            raise _bad("Cannot have 2 or more assistant messages at the end of the list.")
        continuation = True
        add_gen = False
    if continuation and add_gen:
        raise _bad("Cannot set both add_generation_prompt and continue_final_message to true.")
    if continuation and msgs and msgs[-1]["role"] == "assistant" and msgs[-1].get("tool_calls"):
        raise _bad("Cannot continue an assistant message that contains tool calls.")
    if "reasoning_format" in body:          # common_reasoning_format_from_name (chat.cpp:889)
        rf = body["reasoning_format"]
        if not isinstance(rf, str):
            raise _server("[json.exception.type_error.302] type must be string, but is " + json_type_name(rf))
        if rf not in REASONING_FORMATS:
            raise _server(f"Unknown reasoning format: {rf}")
        reasoning_format = rf
    if has_tools and tool_choice != "none":
        if "grammar" in body:
            raise _bad("Cannot use custom grammar constraints with tools.")
        out["parse_tool_calls"] = True
    tool_plan = None
    if jinja and has_tools:                # tools_api: the tool setup (the generic format rewrites the messages)
        from .tools_api import plan_tools

        # the handler's parser depends on enable_thinking (DeepSeek V3.2 / V4, MiniMax M3): the request's, else on
        ctk = body.get("chat_template_kwargs")       # (a bad value is refused below, after the tools' errors)
        kw_et = {**(chat_template_kwargs or {}), **(ctk if isinstance(ctk, dict) else {})}.get("enable_thinking")
        tool_plan = plan_tools(body, templates, reasoning_format, enable_thinking=kw_et if isinstance(kw_et, bool)
                               else True)
        if tool_plan is not None:
            msgs = tool_plan.messages(msgs)
            tools = tool_plan.template_tools
    # common_params_parse (arg.cpp:961): preserve_reasoning is on unless the server's kwargs say otherwise
    kwargs = {"preserve_reasoning": True, **(chat_template_kwargs or {})}
    for k, v in _jv(body, "chat_template_kwargs", {}, dict).items():
        kwargs[k] = v
    enable_thinking = True
    if jinja:                # server-context.cpp:1444: on when the template supports thinking
        from ..chat.autoparser_prompt import supports_thinking

        try:
            enable_thinking = supports_thinking(templates)
        except ChatTemplateError:
            enable_thinking = False
    et = kwargs.get("enable_thinking")
    if isinstance(et, str):
        raise _bad('invalid type for "enable_thinking" (expected boolean, got string)')
    if isinstance(et, bool):
        enable_thinking = et
    applied = None
    try:
        if jinja:
            from ..chat.autoparser_prompt import server_apply

            applied = server_apply(templates, msgs, add_generation_prompt=add_gen, continue_final_message=continuation,
                                   tools=tools if has_tools else None, chat_template_kwargs=kwargs,
                                   enable_thinking=enable_thinking)
            prompt = applied.prompt
        else:
            prompt = templates.apply_legacy(msgs, add_gen)
    except ChatTemplateError as e:
        if jinja:
            from ..chat.autoparser_prompt import specialized_handler

            if specialized_handler(templates.source) is None:
                # the autoparser renders inside generate_parser: an invalid_argument, HTTP 400 (chat.cpp:1362-1364);
                # the text after the prefix is ours (llama.cpp's jinja adds the failing source position)
                raise _bad("Unable to generate parser for this template. Automatic parser generation failed: "
                           f"{e}") from None
        raise _server(str(e)) from None
    out["chat_format"] = 0
    out["prompt"] = prompt
    if jinja:                  # the autoparser's delimiters: the slot checkpoints at user-message starts
        from ..chat import message_delimiters

        out["message_delimiters"] = [{"role": r, "delimiter": d} for r, d in message_delimiters(templates)]
    if not jinja:
        # common_chat_templates_apply_legacy: the schema's grammar (or the body's grammar), typed tool_calls
        g = ""
        if not _empty(json_schema):
            try:
                g = convert_json_schema(json_schema).gbnf
            except Exception as e:  # noqa: BLE001
                raise _bad(f"JSON schema conversion failed:\n{_schema_errors(e)}") from None
        else:
            g = grammar
        if g:
            out["grammar"] = g
            out["grammar_type"] = "tool_calls"
    gen_prompt = ""
    # no tool-call parser (no tools, llama-server's handling of a template without tool support, tool_choice none):
    # the reply is read by the template's own parser, after the rendered generation prompt
    own_parser = tool_plan is None or not tool_plan.active
    if jinja:
        if own_parser and applied is not None:
            gen_prompt = applied.parser_generation_prompt
        else:
            gen_prompt = generation_prompt(templates, msgs, kwargs, enable_thinking)
        if not _empty(json_schema):
            try:
                out["grammar"] = _response_format_grammar(templates, json_schema, gen_prompt,
                                                          reasoning_format != "none")
            except Exception as e:  # noqa: BLE001
                raise _bad("Unable to generate parser for this template. Automatic parser generation failed: "
                           + _autoparser_schema_error(e)) from None
            out["grammar_type"] = "tool_calls"
            out["_response_format"] = _response_format_spec(templates, gen_prompt, reasoning_format != "none")
        elif grammar:
            out["grammar"] = grammar
        out["_chat_format_name"] = "peg-native"
        if not _empty(json_schema) and "grammar" in out:    # response_format after the reasoning: its parser
            from ..chat.autoparser import analyze_reasoning
            from ..chat.autoparser_prompt import specialized_handler

            if specialized_handler(templates.source) is None:
                try:
                    r = analyze_reasoning(templates)
                except ChatTemplateError:
                    r = None
                if r is not None:
                    out["_reply"] = ReplySpec(gen_prompt, r.mode, r.start, r.end, extract=reasoning_format != "none",
                                              response_format=True)
        if own_parser and _empty(json_schema):           # the reply parser: the autoparser's or a handler's
            from ..chat.autoparser import analyze_content, analyze_reasoning
            from ..chat.autoparser_prompt import specialized_handler

            handler = specialized_handler(templates.source)
            extract = reasoning_format != "none"
            if handler is None:
                r = analyze_reasoning(templates)
                c = analyze_content(templates, r)
                # llama-server parses the reply after the generation prompt with a prefill's continuation, so a
                # content-only template needs the parser too when the prompt was continued (its content first)
                if r.mode != "none" or c.always_wrapped or applied.generation_prompt != gen_prompt:
                    out["_reply"] = ReplySpec(gen_prompt, r.mode, r.start, r.end, c.start if c.always_wrapped
                                              else "", c.end if c.always_wrapped else "", extract)
            else:
                kind = ""
                last = msgs[-1] if continuation and msgs else None
                if last is not None and (last.get("content") or last.get("reasoning_content")):
                    kind = "reasoning" if last.get("reasoning_content") and not last.get("content") else "content"
                out["_reply"] = ReplySpec(gen_prompt, extract=extract, handler=handler,
                                          enable_thinking=enable_thinking, source=templates.source, continuation=kind)
    out["grammar_lazy"] = False
    out["grammar_triggers"] = []
    out["preserved_tokens"] = []
    out["generation_prompt"] = applied.generation_prompt if own_parser and applied is not None else gen_prompt
    if tool_plan is not None and _empty(json_schema):     # response_format wins over tools, as llama-server
        if jinja and tool_plan.active:
            tool_plan.for_generation_prompt(body, templates, reasoning_format, gen_prompt)
        out.update(tool_plan.params())
        out["_tools"] = tool_plan
    if jinja:                # the reasoning budget, when the template has thinking tags (server-common.cpp:1412)
        from ..chat.thinking import thinking_tags

        budget = _jv(body, "reasoning_budget_tokens", _jv(body, "thinking_budget_tokens", -1, int), int)
        if budget == -1:
            budget = reasoning_budget
        start_tag, end_tags = thinking_tags(templates)
        if end_tags:
            out["reasoning_budget_tokens"] = budget
            out["reasoning_budget_start_tag"] = start_tag
            out["reasoning_budget_end_tags"] = end_tags
            out["reasoning_budget_message"] = _jv(body, "reasoning_budget_message", reasoning_budget_message, str)
            out["reasoning_control"] = _jv(body, "reasoning_control", False, bool)
    if _jv(body, "logprobs", False, bool):
        if has_tools and _jv(body, "stream", False, bool):
            raise _bad("logprobs is not supported with tools + stream")
        out["n_probs"] = _jv(body, "top_logprobs", 20, int)
    elif body.get("top_logprobs") is not None:
        raise _bad("top_logprobs requires logprobs to be set to true")
    if jinja:                # the handler's additional_stops after the request's (server-common.cpp:1403)
        from ..chat.autoparser_prompt import specialized_handler

        if specialized_handler(templates.source) == "ling3":
            from ..chat.handler_ling3 import STOPS

            stop = body.get("stop")
            out["stop"] = ([stop] if isinstance(stop, str) else list(stop) if isinstance(stop, list) else []) + STOPS
    for k, v in body.items():
        if k not in out or k == "n_predict":
            out[k] = v
    return out


def _gbnf_literal(text: str) -> str:
    out = ['"']
    for ch in text:
        out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}.get(ch, ch))
    out.append('"')
    return "".join(out)


def _response_format_grammar(templates: ChatTemplates, schema: Any, gen_prompt: str, extract: bool) -> str:
    """llama-server's ``response_format`` grammar for an autoparser template (after its reasoning block, when the
    template has one and it is extracted: :func:`constrained.chat.tool_grammar.response_format_grammar`); a
    specialised handler's template keeps :func:`response_format_grammar` (not reproduced: CHANGELOG)."""
    from ..chat.autoparser import analyze_reasoning
    from ..chat.autoparser_prompt import specialized_handler
    from ..chat.tool_grammar import response_format_grammar as rf_grammar

    if specialized_handler(templates.source) is not None:
        return response_format_grammar(schema, gen_prompt)
    try:
        r = analyze_reasoning(templates)
    except ChatTemplateError:
        return response_format_grammar(schema, gen_prompt)
    tags = (r.start, r.end) if extract and r.mode != "none" and r.end.strip() else None
    return rf_grammar(schema, gen_prompt, tags, r.start if r.mode != "none" else "")


def response_format_grammar(schema: Any, gen_prompt: str) -> str:
    """The grammar llama-server's autoparser builds for ``response_format`` with a content-only template: the
    generation prompt, optional whitespace, then the schema's JSON either bare or in a ```` ```json ```` fence
    (chat-auto-parser-generator.cpp), rules printed sorted by name. The schema is added as the rule
    ``response-format-schema`` (``p.schema(..., "response-format-schema", ...)``), so its own rules carry that
    prefix (``response-format-schema-name-kv``), as llama-server's ``build_grammar`` names them."""
    from ..json_schema.converter import Converter
    from ..json_schema.json_text import load
    from ..json_schema.nodes import build_document

    convert_json_schema(schema)            # llama.cpp's refusals (and ours: a grammar that accepts nothing) first
    conv = Converter()
    for n, body in PEG_JSON_RULES.items():
        conv.add_rule(n, body)
    conv.visit(build_document(load(schema)).root, "response-format-schema")
    conv.check_errors()
    conv.add_rule("response-format", "response-format-schema")
    conv.add_rule("root", f'{_gbnf_literal(gen_prompt)} space space ("```json" space response-format space "```" | '
                          "space response-format space)")
    return conv.format_grammar()


def _response_format_spec(templates: ChatTemplates, gen_prompt: str, extract: bool) -> ReplySpec:
    # the autoparser's response_format parser: its reasoning block (a specialised handler's: none here)
    from ..chat.autoparser import analyze_reasoning
    from ..chat.autoparser_prompt import specialized_handler

    if specialized_handler(templates.source) is not None:
        return ReplySpec(gen_prompt)
    try:
        r = analyze_reasoning(templates)
    except ChatTemplateError:
        return ReplySpec(gen_prompt)
    return ReplySpec(gen_prompt, r.mode, r.start, r.end, extract=extract)


def _autoparser_schema_error(e: Exception) -> str:
    """The schema error as the autoparser's grammar build raises it: ``common_chat_schema_from_json``'s own
    ``runtime_error`` text (``JSON schema error at ...``) as it is, the converter's collected errors
    (``check_errors``) with their ``JSON schema conversion failed:`` head (json-schema-to-grammar.cpp:975,
    1015-1026: ``build_grammar`` does not wrap what the schema reader throws)."""
    rest = _schema_errors(e)
    if str(e).startswith("JSON schema conversion failed:\n") and not rest.startswith("JSON schema error at "):
        return str(e)
    return rest


def _empty(schema: Any) -> bool:
    return schema is None or (isinstance(schema, (dict, list, str)) and len(schema) == 0)


def _schema_errors(e: Exception) -> str:
    msg = str(e)
    prefix = "JSON schema conversion failed:\n"
    return msg[len(prefix):] if msg.startswith(prefix) else msg


def _parse_msg(m: Any) -> dict[str, Any]:
    # common_chat_msgs_parse_oaicompat (the parts the templates see)
    if not isinstance(m, dict):
        raise _server("Expected 'message' to be an object")
    if "role" not in m:
        raise _server("Failed to parse messages: Missing 'role' in message: " + dumps_compact(m))
    role = m["role"]
    if not isinstance(role, str):           # msg.role = message.at("role"), inside the parse's try (chat.cpp:389)
        raise _server("Failed to parse messages: [json.exception.type_error.302] type must be string, but is "
                      + json_type_name(role))
    out: dict[str, Any] = {"role": role}
    content = m.get("content")
    if isinstance(content, list):
        out["content"] = [dict(p) for p in content if isinstance(p, dict)]
    elif content is None:
        out["content"] = None if "content" in m else ""
    elif isinstance(content, str):
        out["content"] = content
    else:
        raise _bad("Expected 'content' to be a string or an array")
    for k in ("reasoning_content", "name", "tool_call_id"):
        if k in m and m[k] is not None:
            out[k] = m[k]
    if "tool_calls" in m:                   # a range-for over the JSON value (chat.cpp:418): an array's items, an
        calls = m["tool_calls"]             # object's values, nothing for null, any other value once
        items = calls if isinstance(calls, list) else list(calls.values()) if isinstance(calls, dict) else \
            [] if calls is None else [calls]
        parsed = [_parse_tool_call(c) for c in items]
        if parsed:                          # to_json_oaicompat writes tool_calls only when there are some
            out["tool_calls"] = parsed
    return out


def _parse_tool_call(tc: Any) -> dict[str, Any]:
    # common_chat_msgs_parse_oaicompat (chat.cpp:418-447), then to_json_oaicompat's shape (chat.cpp:242-260):
    # {"type": "function", "function": {"name", "arguments" (a string: anything else dumped)}, "id" when not empty}
    def bad(what: str) -> HttpError:
        return _server(f"Failed to parse messages: {what}: {dumps_compact(tc)}")

    def text(v: Any) -> str:
        if not isinstance(v, str):
            raise _server("Failed to parse messages: [json.exception.type_error.302] type must be string, but is "
                          + json_type_name(v))
        return v

    if not isinstance(tc, dict) or "type" not in tc:
        raise bad("Missing tool call type")
    if tc["type"] != "function":
        raise bad("Unsupported tool call type")
    fc = tc.get("function")
    if "function" not in tc:
        raise bad("Missing tool call function")
    if not isinstance(fc, dict) or "name" not in fc:
        raise bad("Missing tool call name")
    name = text(fc["name"])
    if "arguments" not in fc:
        raise _server("Failed to parse messages: [json.exception.out_of_range.403] key 'arguments' not found")
    args = fc["arguments"]
    call: dict[str, Any] = {"type": "function", "function": {
        "name": name, "arguments": args if isinstance(args, str) else dumps_compact(args)}}
    cid = text(tc["id"]) if "id" in tc else ""
    if cid:
        call["id"] = cid
    return call


def dumps_compact(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def parser_for(body: dict[str, Any]) -> Any:
    """The chat output parser factory for a ``chat_params`` body: ``response_format``'s, the tool-call one
    (``chat.tool_stream.ToolCallParser``), the template's reply parser (:class:`AutoChatParser`) or ``None`` (content only)."""
    spec = body.get("_reply")
    if isinstance(spec, ReplySpec):
        gen_prompt = body.get("generation_prompt") or ""
        return lambda: AutoChatParser(spec, gen_prompt)
    rf = body.get("_response_format")
    if isinstance(rf, ReplySpec):
        gen_prompt = body.get("generation_prompt") or ""
        return lambda: ResponseFormatParser(rf, gen_prompt)
    from ..chat.tool_stream import ToolCallParser
    from .tools_api import ToolPlan

    plan = body.get("_tools")
    if isinstance(plan, ToolPlan) and plan.active:
        gen_prompt = body.get("generation_prompt") or ""
        return lambda: ToolCallParser(plan.setup, gen_prompt)
    return None
