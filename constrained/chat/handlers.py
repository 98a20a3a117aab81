"""llama-server's specialised tool-call handlers (common/parsers/*.cpp), each an arena of
:mod:`constrained.chat.peg_arena` built in llama.cpp's order: the grammar text (rule names, arena ids), laziness,
triggers and preserved tokens are llama-server's, and the same arena parses the reply (content, reasoning, tool
calls, partial replies for the stream).

Handlers (the sdist templates llama-server dispatches to them, ``common_chat_try_specialized_template``):

- ``qwen3_coder`` (:mod:`constrained.chat.qwen3_coder`): Qwen3-Coder, Qwen 3.5, Nemotron 3 Nano, StepFun 3.5 Flash.
- ``kimi_k2``: Kimi K2 Instruct / Thinking. ``<think>`` reasoning, then ``<|tool_calls_section_begin|>``,
  per call ``<|tool_call_begin|>functions.<name>:<n><|tool_call_argument_begin|>{json}<|tool_call_end|>`` (the id
  is the model's ``functions.<name>:<n>``).
- ``ministral_3``: Ministral 3 (Reasoning), Devstral Small. ``[THINK]...[/THINK]`` reasoning, then
  ``[TOOL_CALLS]<name>[ARGS]{json}`` per call.
- ``gpt_oss``: GPT-OSS (harmony). ``<|channel|>analysis<|message|>...<|end|>`` reasoning, commentary preambles,
  ``<|channel|>final<|message|>`` content; a call is ``<|start|>assistant to=functions.<name><|channel|>commentary
  [<|constrain|>json]<|message|>{json}`` (or the recipient after the channel).
- ``functionary_v3_2``: Functionary medium v3.2. The generation prompt ends with ``>>>``; the reply is
  ``all\\n<content>`` and/or ``<name>\\n{json}`` blocks, each after ``>>>``.
- In modules of their own (:data:`MODULES`): ``gemma4`` (:mod:`constrained.chat.handler_gemma4`), ``deepseek_v3_2``
  (:mod:`constrained.chat.handler_deepseek`: DeepSeek V3.2 / V4), ``kimi_k3`` (:mod:`constrained.chat.handler_kimi_k3`),
  ``minimax_m3`` (:mod:`constrained.chat.handler_minimax_m3`).

Example:
    >>> from constrained.chat.tools import normalize_tools
    >>> tools = normalize_tools([{"type": "function", "function": {"name": "now"}}])
    >>> h = build("kimi_k2", "", tools, tool_choice="auto", parallel=True, extract_reasoning=True)
    >>> h.lazy, h.triggers
    (True, [(1, '<|tool_call_begin|>')])
    >>> m = h.parse(GENERATION_PROMPTS["kimi_k2"], "<think>hm</think>ok<|tool_calls_section_begin|>"
    ...             "<|tool_call_begin|>functions.now:0<|tool_call_argument_begin|>{}<|tool_call_end|>")
    >>> m.reasoning_content, m.content, m.tool_calls
    ('hm', 'ok', [('now', '{}', 'functions.now:0')])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .peg_arena import ArenaSetup, Builder

__all__ = ["GENERATION_PROMPTS", "HANDLERS", "MODULE_HANDLERS", "build", "handler_for", "preserved_tokens"]

WORD, PATTERN = 1, 2
REASONING, CONTENT, TOOL, TOOL_OPEN, TOOL_CLOSE, TOOL_NAME, TOOL_ID, TOOL_ARGS = (
    "reasoning", "content", "tool", "tool-open", "tool-close", "tool-name", "tool-id", "tool-args")

#: handlers in a module of their own (``constrained.chat.handler_<name>``): ``build(tools, *, tool_choice, parallel,
#: extract_reasoning, src, generation_prompt, enable_thinking)``, ``preserved_tokens(src)``, ``GENERATION_PROMPT``
MODULES = {"gemma4": "handler_gemma4", "deepseek_v3_2": "handler_deepseek", "kimi_k3": "handler_kimi_k3",
           "minimax_m3": "handler_minimax_m3"}
#: the same with the other entry points: ``setup(src, tools, *, tool_choice, parallel, extract_reasoning,
#: generation_prompt)`` and ``preserved(src)``
MODULE_HANDLERS = {"lfm2": "handler_lfm2", "lfm2_5": "handler_lfm2", "cohere2moe": "handler_cohere2moe",
                   "gigachat_v3": "handler_gigachat_v3", "ling3": "handler_ling3",
                   "minicpm5": "handler_minicpm5", "muse_glimmer": "handler_muse_glimmer"}
HANDLERS = ("qwen3_coder", "kimi_k2", "ministral_3", "functionary_v3_2", "gpt_oss", *MODULES, *MODULE_HANDLERS)

#: the generation prompt each handler's parser starts with (the template's, for a plain conversation)
GENERATION_PROMPTS = {
    "qwen3_coder": "<|im_start|>assistant\n",
    "kimi_k2": "<|im_assistant|>assistant<|im_middle|>",
    "ministral_3": "",
    "functionary_v3_2": "<|start_header_id|>assistant<|end_header_id|>\n\n>>>",
    "gpt_oss": "<|start|>assistant",
    "lfm2": "<|im_start|>assistant\n", "lfm2_5": "<|im_start|>assistant\n",
    "cohere2moe": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>",
    "gigachat_v3": "assistant<|role_sep|>\n",
    "ling3": "<role>ASSISTANT</role>\n<think>",
    "minicpm5": "<|im_start|>assistant\n",
    "muse_glimmer": "<|start|>assistant",
}


def handler_for(src: str | None) -> str | None:
    """The reproduced handler llama-server picks for a template source (None: another handler, or the
    autoparser)."""
    from .autoparser_prompt import specialized_handler

    h = specialized_handler(src or "") if src else None
    return h if h in HANDLERS else None


def autoparser_tools(src: str | None) -> bool:
    """Whether llama-server gives ``src`` tool calls through its autoparser (no specialised handler, and the
    analysis found a tool-call format: :mod:`constrained.chat.autoparser_tools`)."""
    from .autoparser_prompt import specialized_handler
    from .autoparser_tools import analyze_template
    from .template import ChatTemplateError, ChatTemplates

    if not src or specialized_handler(src) is not None:
        return False
    try:
        return analyze_template(ChatTemplates(src)).tools.mode != "NONE"
    except (ChatTemplateError, ValueError):
        return False


def preserved_tokens(handler: str, src: str | None) -> list[str]:
    """The handler's preserved tokens (set whatever the request)."""
    if handler == "autoparser":
        from .autoparser_tools import analyze_template
        from .template import ChatTemplates

        return list(analyze_template(ChatTemplates(src or "")).preserved_tokens)
    if handler == "qwen3_coder":
        from .qwen3_coder import preserved_tokens as q

        return q(src)
    if handler in MODULES:
        return list(_module(handler).preserved_tokens(src or ""))
    if handler in MODULE_HANDLERS:
        return _module(handler).preserved(src)
    return {
        "kimi_k2": ["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>"],
        "ministral_3": ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]"],
        "functionary_v3_2": [">>>all"],
        "gpt_oss": ["<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"],
    }[handler]


def _params_json(tool: Any) -> Any:
    # common_chat_tool_parameters: absent, null or {} is an object without properties
    p = tool.parameters
    if p is None or p == {}:
        return {"type": "object", "properties": {}}
    return p


def _schema(b: Builder, name: str, tool: Any) -> int:
    """``p.schema(p.json(), name, common_chat_tool_parameters(function))``."""
    from ..json_schema import nodes as N
    from ..json_schema.json_text import load

    return b.schema(b.json(), name, N.build_document(load(_params_json(tool))).root)


def build(handler: str, src: str | None, tools: Sequence[Any], *, tool_choice: str, parallel: bool,
          extract_reasoning: bool, names: Sequence[str] | None = None, generation_prompt: str = "",
          enable_thinking: bool = True) -> ArenaSetup:
    """The handler's arena for one request (``tool_choice`` ``auto`` / ``required`` / ``none``; ``names``: ours,
    only these tools; ``generation_prompt``: the request's, which the autoparser's parser starts with)."""
    chosen = [t for t in tools if names is None or t.name in names]
    if handler == "autoparser":
        from .autoparser_build import build_setup
        from .autoparser_tools import analyze_template
        from .template import ChatTemplates

        return build_setup(analyze_template(ChatTemplates(src or "")), chosen, tool_choice=tool_choice,
                           parallel=parallel, extract_reasoning=extract_reasoning,
                           generation_prompt=generation_prompt)
    if handler == "qwen3_coder":
        from .qwen3_coder import build as q
        from .qwen3_coder import supports_reasoning

        thinks = supports_reasoning(src)
        return q(chosen, reasoning=thinks, extract_reasoning=extract_reasoning, tool_choice=tool_choice,
                 parallel=parallel, coder=not thinks)
    if handler in MODULES:
        return _module(handler).build(chosen, tool_choice=tool_choice, parallel=parallel,
                                      extract_reasoning=extract_reasoning, src=src or "",
                                      generation_prompt=generation_prompt, enable_thinking=enable_thinking)
    if handler in MODULE_HANDLERS:
        return _module(handler).setup(src, chosen, tool_choice=tool_choice, parallel=parallel,
                                      extract_reasoning=extract_reasoning, generation_prompt=generation_prompt)
    active = bool(chosen) and tool_choice != "none"
    fn = {"kimi_k2": _kimi_k2, "ministral_3": _ministral_3, "functionary_v3_2": _functionary_v3_2,
          "gpt_oss": _gpt_oss}[handler]
    return fn(chosen, active, tool_choice, parallel, extract_reasoning)


def _module(handler: str) -> Any:
    """The module of a handler of :data:`MODULES` or :data:`MODULE_HANDLERS` (imported on first use)."""
    from . import (
        handler_cohere2moe,
        handler_deepseek,
        handler_gemma4,
        handler_gigachat_v3,
        handler_kimi_k3,
        handler_lfm2,
        handler_ling3,
        handler_minicpm5,
        handler_minimax_m3,
        handler_muse_glimmer,
    )

    mods = {m.__name__.rpartition(".")[2]: m for m in (
        handler_gemma4, handler_deepseek, handler_kimi_k3, handler_minimax_m3, handler_lfm2, handler_cohere2moe,
        handler_gigachat_v3, handler_ling3, handler_minicpm5, handler_muse_glimmer)}
    return mods[MODULES.get(handler) or MODULE_HANDLERS[handler]]


def _finish(b: Builder, root: int, grammar: bool, lazy: bool, triggers: list[tuple[int, str]]) -> ArenaSetup:
    if not grammar:
        return ArenaSetup(None, False, [], b.parser(root))
    return ArenaSetup(b.grammar(root, lazy=lazy), lazy, triggers, b.parser(root))


def _kimi_k2(tools: Sequence[Any], active: bool, choice: str, parallel: bool, extract: bool) -> ArenaSetup:
    # common/parsers/kimi-k2.cpp; GCC builds the right operand of + first
    sb, se, cb, ab, ce = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                          "<|tool_call_argument_begin|>", "<|tool_call_end|>")
    b = Builder()
    end = b.end()
    if extract:
        close = b.optional(b.literal("</think>"))
        body = b.tag(REASONING, b.until_one_of(["</think>", sb, cb]))
        reasoning = b.optional(b.seq(b.seq(b.literal("<think>"), body), close))
    else:
        reasoning = b.eps()
    gen = b.literal(GENERATION_PROMPTS["kimi_k2"])
    if not active:
        content = b.tag(CONTENT, b.rest())
        return _finish(b, b.seq(b.seq(b.seq(gen, reasoning), content), end), False, False, [])
    choices = b.choice()
    for t in tools:
        digits = b.chars("[0-9]", 1, -1)
        colon = b.literal(":")
        name = b.atomic(b.tag(TOOL_NAME, b.literal(t.name)))
        fid = b.seq(b.seq(b.seq(b.literal("functions."), name), colon), digits)
        tool_id = b.atomic(b.tag(TOOL_ID, fid))
        close_t = b.atomic(b.tag(TOOL_CLOSE, b.optional(b.literal(ce))))
        args = b.tag(TOOL_ARGS, _schema(b, f"tool-{t.name}-schema", t))
        opened = b.atomic(b.tag(TOOL_OPEN, b.seq(tool_id, b.literal(ab))))
        parser = b.tag(TOOL, b.seq(b.seq(opened, args), close_t))
        choices = b.choice(choices, b.rule(f"tool-{t.name}", parser))
    lo, hi = (1 if choice == "required" else 0), (-1 if parallel else 1)
    section_end = b.optional(b.literal(se))
    rep = b.repeat(b.seq(b.literal(cb), choices), lo, hi)
    trig = b.trigger_rule("tool-call", b.seq(rep, section_end))
    calls = b.rule("tool-calls", b.seq(b.optional(b.literal(sb)), trig))
    before = b.tag(CONTENT, b.until_one_of([sb, cb]))
    root = b.seq(b.seq(b.seq(b.seq(gen, reasoning), before), calls), end)
    return _finish(b, root, True, choice == "auto", [(WORD, cb)])


def _ministral_3(tools: Sequence[Any], active: bool, choice: str, parallel: bool, extract: bool) -> ArenaSetup:
    # common/parsers/ministral3.cpp
    b = Builder()
    gen = b.eps()
    if extract:
        body = b.tag(REASONING, b.until("[/THINK]"))
        opened = b.seq(b.literal("[THINK]"), body)
        reasoning = b.optional(b.seq(opened, b.literal("[/THINK]")))
    else:
        reasoning = b.eps()
    if not active:
        content = b.tag(CONTENT, b.rest())
        return _finish(b, b.seq(gen, b.seq(reasoning, b.space(), content)), False, False, [])
    choices = b.choice()
    for t in tools:
        args = b.tag(TOOL_ARGS, _schema(b, f"tool-{t.name}-schema", t))
        name = b.atomic(b.tag(TOOL_NAME, b.literal(t.name)))
        opened = b.atomic(b.tag(TOOL_OPEN, b.seq(name, b.literal("[ARGS]"))))
        choices = b.choice(choices, b.rule(f"tool-{t.name}", b.seq(opened, args)))
    lo, hi = (1 if choice == "required" else 0), (-1 if parallel else 1)
    calls = b.trigger_rule("tool-call", b.repeat(b.seq(b.literal("[TOOL_CALLS]"), choices), lo, hi))
    content = b.tag(CONTENT, b.until("[TOOL_CALLS]"))
    root = b.seq(gen, b.seq(b.seq(reasoning, b.space(), content), b.space(), calls))
    return _finish(b, root, True, choice == "auto", [(WORD, "[TOOL_CALLS]")])


def _functionary_v3_2(tools: Sequence[Any], active: bool, choice: str, parallel: bool,
                      extract: bool) -> ArenaSetup:
    # common/parsers/functionary-v3-2.cpp
    b = Builder()
    until_tool = b.tag(CONTENT, b.until(">>>"))
    content_until_tool = b.seq(b.literal("all\n"), until_tool)
    rest = b.tag(CONTENT, b.rest())
    content_until_end = b.seq(b.literal("all\n"), rest)
    gen = b.literal(GENERATION_PROMPTS["functionary_v3_2"])
    if not active:
        end = b.end()
        return _finish(b, b.seq(b.seq(gen, content_until_end), end), False, False, [])
    choices = b.choice()
    for t in tools:
        args = b.tag(TOOL_ARGS, _schema(b, f"tool-{t.name}-schema", t))
        nl = b.literal("\n")
        name = b.atomic(b.tag(TOOL_NAME, b.literal(t.name)))
        opened = b.atomic(b.tag(TOOL_OPEN, b.seq(name, nl)))
        choices = b.choice(choices, b.rule(f"tool-{t.name}", b.tag(TOOL, b.seq(opened, args))))
    tools_only = b.trigger_rule("tools", b.repeat(choices, 1, -1))
    content_and_tools = b.seq(content_until_tool, tools_only)
    ret = b.eps()
    if choice == "required":
        if parallel:
            end = b.end()
            ret = b.seq(b.choice(content_and_tools, tools_only), end)
        else:
            end = b.end()
            ret = b.seq(b.choice(b.seq(content_until_tool, choices), tools_only), end)
    elif parallel:
        end = b.end()
        ret = b.seq(b.choice(content_and_tools, content_until_end, tools_only), end)
    else:
        content_and_tool = b.seq(content_until_tool, choices)
        end = b.end()
        ret = b.seq(b.choice(content_and_tool, content_until_end, choices), end)
    return _finish(b, b.seq(gen, ret), True, choice == "auto", [(PATTERN, ">>>(?!all)")])


def _gpt_oss(tools: Sequence[Any], active: bool, choice: str, parallel: bool, extract: bool) -> ArenaSetup:
    # common/parsers/gpt-oss.cpp (response_format not here)
    b = Builder()
    start = b.rule("start", b.literal("<|start|>assistant"))
    end = b.rule("end", b.literal("<|end|>"))
    content = b.rule("message-content", b.until("<|end|>"))
    an = b.literal("analysis")
    kinds = b.choice(b.literal("commentary"), an)
    channel = b.seq(b.literal("<|channel|>"), kinds)
    constrain_type = b.chars("[A-Za-z0-9_-]", 1, -1)
    to_assistant = b.optional(b.literal(" to=assistant"))
    stray = b.optional(b.seq(b.literal("<|channel|>commentary"), to_assistant))
    start_analysis = b.seq(stray, b.literal("<|channel|>analysis<|message|>"))
    if extract:
        b.rule("analysis", b.seq(b.seq(start_analysis, b.tag(REASONING, content)), end))
    else:
        b.rule("analysis", b.tag(CONTENT, b.seq(b.seq(start_analysis, content), end)))
    analysis = b.ref("analysis")
    pre = b.tag(CONTENT, content)
    preamble = b.rule("preamble", b.seq(b.seq(b.literal("<|channel|>commentary<|message|>"), pre), end))
    fin = b.tag(CONTENT, content)
    final_msg = b.rule("final", b.seq(b.seq(stray, b.literal("<|channel|>final<|message|>")), fin))
    to = b.literal(" to=")
    unsolicited = b.rule("unsolicited", b.atomic(b.seq(b.seq(b.seq(b.optional(channel), to), content), end)))
    any_ = b.rule("any", b.choice(preamble, analysis))
    if not active:
        tail = b.choice(final_msg, unsolicited)
        root = b.seq(b.seq(b.zero_or_more(b.seq(start, any_)), start), tail)
        return _finish(b, root, False, False, [])
    choices = b.choice()
    for t in tools:
        name = b.atomic(b.tag(TOOL_NAME, b.literal(t.name)))
        func_name = b.seq(b.literal(" to=functions."), name)
        opt_c = b.optional(b.literal("<|constrain|>"))
        constraint = b.optional(b.seq(b.seq(b.space(), opt_c), constrain_type))
        args = b.tag(TOOL_ARGS, _schema(b, f"tool-{t.name}-schema", t))
        msg = b.literal("<|message|>")
        in_role = b.tag(TOOL, b.seq(b.atomic(b.tag(TOOL_OPEN, b.seq(b.seq(b.seq(func_name, channel), constraint),
                                                                      msg))), args))
        msg = b.literal("<|message|>")
        in_channel = b.tag(TOOL, b.seq(b.atomic(b.tag(TOOL_OPEN, b.seq(b.seq(b.seq(channel, func_name), constraint),
                                                                         msg))), args))
        choices = b.choice(choices, b.rule(f"tool-{t.name}", b.choice(in_role, in_channel)))
    tool_call = b.trigger_rule("tool-call", choices)
    if choice == "required":
        root = b.seq(b.seq(b.zero_or_more(b.seq(start, any_)), start), tool_call)
    else:
        tail = b.choice(tool_call, final_msg)
        root = b.seq(b.seq(b.zero_or_more(b.seq(start, any_)), start), tail)
    triggers = [(PATTERN, "^\\s+to$"), (PATTERN, "^<\\|channel\\|>(?:commentary|analysis)\\s+to=functions$"),
                (PATTERN, "<\\|start\\|>assistant(\\s+to)"),
                (PATTERN, "<\\|start\\|>assistant(<\\|channel\\|>(?:commentary|analysis)\\s+to)")]
    return _finish(b, root, True, choice != "required", triggers)
