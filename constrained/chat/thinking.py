"""The thinking tags llama-server gives the reasoning-budget sampler for a chat template (``common_chat_params``'s
``thinking_start_tag`` and ``thinking_end_tags``).

The differential autoparser's template (common/chat.cpp:1351-1358): when it finds reasoning markers, the start tag
and the end tag with their whitespace trimmed (no end tag: none, so no budget). A specialised handler sets its own
(common/parsers/*.cpp): e.g. Qwen3.5 / Qwen3-Coder with ``<think>`` in the source ``<think>`` and ``\\n</think>``,
``</think>``, ``<tool_call>`` (the first end tag is the one forced), GPT-OSS ``<|channel|>analysis<|message|>`` and
``<|end|>``. The server tokenizes them (with specials) and builds ``common_reasoning_budget_init`` from them.

Example:
    >>> thinking_tags_for_handler("gpt_oss", "")
    ('<|channel|>analysis<|message|>', ['<|end|>'])
    >>> thinking_tags_for_handler("functionary_v3_2", "")
    ('', [])
"""

from __future__ import annotations

from .template import ChatTemplateError, ChatTemplates

__all__ = ["thinking_tags", "thinking_tags_for_handler"]

_WS = " \t\n\v\f\r"

_HANDLERS: dict[str, tuple[str, list[str]]] = {
    "cohere2moe": ("<|START_THINKING|>", ["<|END_THINKING|>"]),
    "gemma4": ("<|channel>thought", ["<channel|>"]),
    "gpt_oss": ("<|channel|>analysis<|message|>", ["<|end|>"]),
    "kimi_k2": ("<think>", ["</think>"]),
    "kimi_k3": ("<|open|>think<|sep|>", ["<|close|>think<|sep|>"]),
    "lfm2": ("<think>", ["</think>"]),
    "lfm2_5": ("<think>", ["</think>"]),
    "ling3": ("<think>", ["</think>", "<tool_call>"]),
    "minicpm5": ("<think>", ["</think>"]),
    "minimax_m3": ("<mm:think>", ["</mm:think>"]),
    "ministral_3": ("[THINK]", ["[/THINK]"]),
}


def thinking_tags_for_handler(handler: str, source: str) -> tuple[str, list[str]]:
    """A specialised handler's ``(thinking_start_tag, thinking_end_tags)`` (``("", [])``: none)."""
    if handler == "qwen3_coder":                        # qwen3-coder.cpp:13-29: only a template with <think>
        return ("<think>", ["\n</think>", "</think>", "<tool_call>"]) if "<think>" in source else ("", [])
    if handler == "deepseek_v3_2":                      # deepseek.cpp:94-120: the DSML call block ends it too
        block = "function_calls" if "function_calls" in source else "tool_calls"
        return "<think>", ["</think>", f"<｜DSML｜{block}>"]
    start, ends = _HANDLERS.get(handler, ("", []))
    return start, list(ends)


def thinking_tags(t: ChatTemplates) -> tuple[str, list[str]]:
    """``(thinking_start_tag, thinking_end_tags)`` for a template as llama-server's ``--jinja`` chat route has them
    (``("", [])`` when it has no thinking tags, or the template cannot be analysed)."""
    from .autoparser import analyze_reasoning
    from .autoparser_prompt import specialized_handler

    h = specialized_handler(t.source)
    if h is not None:
        return thinking_tags_for_handler(h, t.source)
    try:
        r = analyze_reasoning(t)
    except ChatTemplateError:
        return "", []
    if r.mode == "none":
        return "", []
    end = r.end.strip(_WS)
    return r.start.strip(_WS), ([end] if end else [])
