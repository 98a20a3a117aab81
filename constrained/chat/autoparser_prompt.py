"""The ``--jinja`` prompt as llama-server builds it (``common_chat_templates_apply_jinja``, common/chat.cpp:1227):
the template's specialised handler (common/parsers/*.cpp) or the differential autoparser
(chat-auto-parser-generator.cpp:31-62), with an assistant prefill continued as they continue it.

A prefill (a final assistant message, ``continue_final_message``) is not rendered by the template: the messages
before it are rendered without a generation prompt, then the handler appends its own assistant opening, the
reasoning block (opened, and closed unless only reasoning is continued) and the message's text. The autoparser
keeps the template's generation prompt up to its reasoning start marker (:mod:`constrained.chat.autoparser`).

Example:
    >>> from constrained.chat.template import ChatTemplates, CHATML_TEMPLATE
    >>> t = ChatTemplates(CHATML_TEMPLATE)
    >>> server_prompt(t, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}],
    ...               continue_final_message=True)
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHel'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .autoparser import analyze_reasoning
from .template import ChatTemplates

__all__ = ["Applied", "render_content", "server_apply", "server_prompt", "specialized_handler", "supports_thinking"]


def specialized_handler(src: str) -> str | None:
    """The specialised handler ``common_chat_try_specialized_template`` (chat.cpp:1090-1225) picks for a template
    source, or ``None`` (the autoparser)."""
    def has(*keys: str) -> bool:
        return all(k in src for k in keys)

    if has("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]") and "[CALL_ID]" not in src:
        return "ministral_3"
    if has("<|channel|>"):
        return "gpt_oss"
    if has("<atem:function_calls>", "<|eom|>"):
        return "muse_glimmer"
    if has(">>>all", ">>>${recipient}"):
        return "functionary_v3_2"
    if has("<|tool_calls_section_begin|>", "<|tool_call_begin|>"):
        return "kimi_k2"
    if has("<|open|>", "<|close|>", "<|end_of_msg|>"):
        return "kimi_k3"
    if has("<role>ASSISTANT</role>", "<arg_key>"):
        return "ling3"
    if has("<|START_TEXT|>", "<|START_ACTION|>"):
        return "cohere2moe"
    if has("<|tool_list_start|>", "<|tool_list_end|>"):
        return "lfm2"
    if has("List of tools: [") and "<|tool_list_start|>" not in src:
        return "lfm2_5"
    if has("<|role_sep|>", "<|message_sep|>") and "<|function_call|>" not in src:
        return "gigachat_v3"
    if has("]<]minimax[>[", "<tool_call>", "<invoke name="):
        return "minimax_m3"
    if has("dsml_token", "DSML") and ("function_calls" in src or "tool_calls" in src):
        return "deepseek_v3_2"
    if has("'<|tool_call>call:'"):
        return "gemma4"
    if has("Tool usage guidelines:", '<function name="', '<param name="'):
        return "minicpm5"
    if has("<tool_call>", "<function=", "<parameter=") and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in src:
        return "qwen3_coder"
    return None


def supports_thinking(t: ChatTemplates) -> bool:
    """``common_chat_templates_support_enable_thinking`` (chat.cpp:358): the handler's ``supports_thinking``, or
    for the autoparser whether it found reasoning markers. llama-server's default ``enable_thinking``."""
    h = specialized_handler(t.source)
    if h is None:
        return analyze_reasoning(t).mode != "none"
    if h == "qwen3_coder":
        return "<think>" in t.source
    return h not in ("functionary_v3_2", "gigachat_v3")


def render_content(msg: dict[str, Any], delimiter: str = "\n\n") -> str:
    """``common_chat_msg::render_content`` (chat.cpp:76): the text, or the text parts joined by ``delimiter``."""
    c = msg.get("content")
    if isinstance(c, str) and c:
        return c
    if isinstance(c, list):
        return delimiter.join(str(p.get("text", "")) for p in c if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _msg_empty(msg: dict[str, Any]) -> bool:
    # common_chat_msg::empty (chat.h:93)
    return not (msg.get("content") or msg.get("tool_calls") or msg.get("reasoning_content") or msg.get("name")
                or msg.get("tool_call_id"))


def _adjusted(handler: str | None, msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # the handlers' messages_override: LFM2 and GPT-OSS give the template reasoning as `thinking`
    # (lfm2.cpp:28-34, gpt-oss.cpp:8-17)
    if handler in ("lfm2", "lfm2_5", "gpt_oss"):
        return [{**m, "thinking": m["reasoning_content"]} if m.get("reasoning_content") else m for m in msgs]
    if handler == "ministral_3":            # ministral3.cpp:8-44: system / assistant content as typed blocks
        out = []
        for m in msgs:
            if m.get("role") not in ("system", "assistant"):
                out.append(m)
                continue
            blocks: list[Any] = []
            if isinstance(m.get("reasoning_content"), str) and m["reasoning_content"]:
                blocks.append({"type": "thinking", "thinking": m["reasoning_content"]})
            c = m.get("content")
            if isinstance(c, str):
                blocks.append({"type": "text", "text": c})
            elif isinstance(c, list):
                blocks.extend(c)
            out.append({**{k: v for k, v in m.items() if k != "reasoning_content"}, "content": blocks})
        return out
    return msgs


def _gen_prompt(t: ChatTemplates, msgs: list[dict[str, Any]], **kw: Any) -> str:
    # common_chat_template_generation_prompt_impl (chat.cpp:974): what add_generation_prompt appends
    a = t.render_jinja(msgs, add_generation_prompt=False, **kw).encode()
    b = t.render_jinja(msgs, add_generation_prompt=True, **kw).encode()
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return b[i:].decode("utf-8", "replace")


def _continuation(t: ChatTemplates, handler: str | None, prompt: str, gen: str, msg: dict[str, Any],
                  content: bool) -> str:
    # each handler's `has_continuation()` block; `content` is COMMON_CHAT_CONTINUATION_CONTENT
    r = str(msg.get("reasoning_content") or "")
    c = render_content(msg)

    def think(opening: str, start: str, end: str, after_end: str = "") -> str:
        return opening + start + r + (end + after_end + c if content else "")

    if handler == "ministral_3":                                       # ministral3.cpp:64
        return think("", "[THINK]", "[/THINK]")
    if handler == "gpt_oss":                                           # gpt-oss.cpp:55
        return think("<|start|>assistant<|channel|>analysis<|message|>", "",
                     "<|end|><|start|>assistant<|channel|>final<|message|>")
    if handler == "muse_glimmer":                                      # muse-glimmer.cpp:33
        return think("<|start|>assistant to=self<|message|>", "", "<|eom|><|start|>assistant to=user<|message|>")
    if handler == "functionary_v3_2":                                  # functionary-v3-2.cpp:18
        return "<|start_header_id|>assistant<|end_header_id|>\n\n>>>all\n" + c
    if handler == "kimi_k2":                                           # kimi-k2.cpp:40
        return think("<|im_assistant|>assistant<|im_middle|>", "<think>", "</think>")
    if handler == "kimi_k3":                                           # kimi-k3.cpp:58
        return think('<|open|>message role="assistant"<|sep|>', "<|open|>think<|sep|>", "<|close|>think<|sep|>",
                     "<|open|>response<|sep|>")
    if handler == "ling3":                                             # ling3.cpp:53
        return think("<role>ASSISTANT</role>\n", "<think>", "</think>")
    if handler == "cohere2moe":                                        # cohere2moe.cpp:69
        return think("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|START_THINKING|>", "<|END_THINKING|>",
                     "<|START_TEXT|>")
    if handler in ("lfm2", "lfm2_5"):                                  # lfm2.cpp:56
        return think("<|im_start|>assistant\n", "<think>", "</think>")
    if handler == "gigachat_v3":                                       # gigachat-v3.cpp:18
        return "assistant<|role_sep|>\n" + c
    if handler == "minimax_m3":                                        # minimax-m3.cpp:48
        return think(gen, "<mm:think>", "</mm:think>")
    if handler == "deepseek_v3_2":                                     # deepseek.cpp:127
        if "function_calls" not in t.source and not r:
            return "<｜Assistant｜></think>" + (c if content else "")
        return think("<｜Assistant｜>", "<think>", "</think>")
    if handler == "gemma4":                                            # gemma4.cpp:184
        return think("<|turn>model\n" if prompt.endswith("<turn|>\n") else "", "<|channel>thought\n", "<channel|>")
    if handler == "minicpm5":                                          # minicpm5.cpp:38
        return think("<|im_start|>assistant\n", "<think>\n", "\n</think>\n\n")
    if handler == "qwen3_coder":                                       # qwen3-coder.cpp:45
        out = "<|im_start|>assistant\n"
        if "<think>" in t.source:
            out += "<think>\n" + r + ("\n</think>\n\n" if content else "")
        return out + (c if content else "")
    rs = analyze_reasoning(t)                                          # chat-auto-parser-generator.cpp:45-62
    out = gen
    if rs.start:
        i = out.find(rs.start)
        out = (out if i < 0 else out[:i]) + rs.start + r + (rs.end if content else "")
    return out + (c if content else "")


@dataclass
class Applied:
    """``common_chat_params``' texts: the ``prompt``; the ``generation_prompt`` the reply is parsed after (with a
    prefill, the appended continuation); ``parser_generation_prompt``, the one the autoparser's parser was built
    with (chat-auto-parser-generator.cpp:43)."""

    prompt: str
    generation_prompt: str
    parser_generation_prompt: str


def server_apply(t: ChatTemplates, msgs: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                 continue_final_message: bool = False, tools: Any = None,
                 chat_template_kwargs: dict[str, Any] | None = None, enable_thinking: bool = True) -> Applied:
    """What ``common_chat_templates_apply`` gives for ``msgs`` (as the request has them, before the template's
    workarounds, which this applies): with ``continue_final_message`` the last message is continued.

    Raises:
        ChatTemplateError: the template fails to render.
    """
    handler = specialized_handler(t.source)
    kw: dict[str, Any] = {"tools": tools, "extra_context": chat_template_kwargs, "enable_thinking": enable_thinking}
    last: dict[str, Any] | None = None
    if continue_final_message and msgs:
        last = msgs[-1]
        msgs = msgs[:-1]
        add_generation_prompt = False
    prepared = _adjusted(handler, t.prepare_messages(msgs))
    prompt = t.render_jinja(prepared, add_generation_prompt=add_generation_prompt, **kw)
    if handler == "gpt_oss" and not add_generation_prompt:             # gpt-oss.cpp:24: inference, no gen prompt
        i = prompt.rfind("<|return|>")
        if i >= 0:
            prompt = prompt[:i] + "<|end|>" + prompt[i + len("<|return|>"):]
    gen = "<|start|>assistant" if handler == "muse_glimmer" else _gen_prompt(t, prepared, **kw)
    if handler == "gemma4" and add_generation_prompt and prompt.endswith("<turn|>\n"):    # gemma4.cpp:158
        gen = "<|turn>model\n"
        prompt += gen
    parser_gen = gen
    if last is not None and not _msg_empty(last):
        # COMMON_CHAT_CONTINUATION_AUTO (chat.cpp:1262): reasoning only when the message has nothing else
        content = not (last.get("reasoning_content") and not last.get("content"))
        gen = _continuation(t, handler, prompt, gen, last, content)
        prompt += gen
    return Applied(prompt, gen, parser_gen)


def server_prompt(t: ChatTemplates, msgs: list[dict[str, Any]], **kw: Any) -> str:
    """:func:`server_apply`'s prompt (same arguments)."""
    return server_apply(t, msgs, **kw).prompt
