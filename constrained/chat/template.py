"""Chat templates as llama-server applies them: ``--no-jinja`` through llama.cpp's own ``llama_chat_apply_template``
and ``--jinja`` with jinja2, rendered as llama.cpp's Jinja engine renders (common/jinja, common/chat.cpp).

:class:`ChatTemplates` holds a model's templates as ``common_chat_templates_init`` picks them (the GGUF's default and
``tool_use`` templates, an override, the ChatML fallback) with the BOS/EOS texts, and :meth:`ChatTemplates.apply`
renders a conversation. :func:`render` is the one-call form.

Rendering happens in :mod:`constrained.chat.jinja_env` (jinja2 with llama.cpp's engine's rules) with the template
inputs llama-server passes (``messages``, ``bos_token``, ``eos_token``, ``enable_thinking``, ``add_generation_prompt``
only when true, ``tools`` only when given, ``chat_template_kwargs`` merged on top);
:meth:`ChatTemplates.prepare_messages` applies ``common_chat_templates_apply_jinja``'s message workarounds, driven by
the template's capabilities (:mod:`constrained.chat.caps`).

Example:
    >>> t = ChatTemplates(CHATML_TEMPLATE)
    >>> t.apply([{"role": "user", "content": "Hi"}], jinja=True)
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from . import handler_messages, jinja_env
from .caps import TemplateCaps, probe_caps
from .jinja_env import ChatTemplateError

__all__ = ["CHATML_TEMPLATE", "ChatTemplateError", "ChatTemplates", "concat_content_parts", "generation_prompt",
           "render"]

# common/chat.cpp CHATML_TEMPLATE_SRC
CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)


class ChatTemplates:
    """A model's chat templates, picked as ``common_chat_templates_init`` picks them.

    Args:
        default: the template source (the GGUF's ``tokenizer.chat_template`` or an override); ``None``, ``""`` or
            ``"chatml"`` means the ``tool_use`` template if there is one, else ChatML.
        tool_use: the GGUF's ``tokenizer.chat_template.tool_use``.
        bos_token / eos_token: the texts of the model's BOS / EOS tokens (empty when the vocabulary has none).
        add_bos / add_eos: the vocabulary adds them itself (a rendered prompt starting with the BOS text loses it).
    """

    def __init__(self, default: str | None = None, tool_use: str | None = None, *, bos_token: str = "",
                 eos_token: str = "", add_bos: bool = False, add_eos: bool = False) -> None:
        self.has_explicit_template = bool(default) or bool(tool_use)
        src = default or ""
        if not src or src == "chatml":
            src = tool_use or CHATML_TEMPLATE
        # common_chat_templates_init's patches for two known template errors
        if "<|channel|>" in src and "in message.content or" in src:
            src = src.replace('{%- if "<|channel|>analysis<|message|>" in message.content or '
                              '"<|channel|>final<|message|>" in message.content %}', "{%- if false %}")
        if "[TOOL_CALLS]" in src and "if (message['content'] is none or" in src:
            src = src.replace("{%- if (message['content'] is none or message['content'] == '' or "
                              "message['content']|length == 0) and (message['tool_calls'] is not defined or "
                              "message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
                              "{%- if false %}")
        self.source = src
        self.tool_use = tool_use or None
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.add_bos = add_bos
        self.add_eos = add_eos
        self._compiled: Any = None

    def for_tools(self) -> ChatTemplates:
        """The templates a request with tools is rendered with: the GGUF's ``tool_use`` template when there is one
        (``common_chat_templates_apply_jinja``, chat.cpp:1229-1230; as llama.cpp, without the two patches of the
        default template), else these.

        >>> ChatTemplates("{{ 'default' }}", "{{ 'tools' }}").for_tools().source
        "{{ 'tools' }}"
        """
        if not self.tool_use:
            return self
        t = getattr(self, "_for_tools", None)
        if t is None:
            t = ChatTemplates(self.tool_use, self.tool_use, bos_token=self.bos_token, eos_token=self.eos_token,
                              add_bos=self.add_bos, add_eos=self.add_eos)
            t.source = self.tool_use
            t.has_explicit_template = self.has_explicit_template
            self._for_tools = t
        return t

    @classmethod
    def from_model(cls, model: Any, vocab: Any, override: str | None = None) -> ChatTemplates:
        """From a ``llama_model`` pointer and its ``llama_vocab`` pointer (llama-cpp-python's C API)."""
        from llama_cpp import llama_cpp as L

        default = tool = None
        if not override:
            s = L.llama_model_chat_template(model, None)
            default = s.decode("utf-8") if s else None
            s = L.llama_model_chat_template(model, b"tool_use")
            tool = s.decode("utf-8") if s else None
        else:
            default = override

        def text(tok: int) -> str:
            if tok < 0:
                return ""
            import ctypes

            buf = ctypes.create_string_buffer(256)
            n = L.llama_token_to_piece(vocab, tok, buf, len(buf), 0, True)
            return buf.raw[:max(n, 0)].decode("utf-8", "replace")

        return cls(default, tool, bos_token=text(L.llama_vocab_bos(vocab)), eos_token=text(L.llama_vocab_eos(vocab)),
                   add_bos=bool(L.llama_vocab_get_add_bos(vocab)), add_eos=bool(L.llama_vocab_get_add_eos(vocab)))

    # ------------------------------------------------------------------ legacy
    def apply_legacy(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """``common_chat_templates_apply_legacy``: llama.cpp's built-in formats via ``llama_chat_apply_template``.

        Raises:
            ChatTemplateError: ``this custom template is not supported, try using --jinja``.
        """
        import ctypes

        from llama_cpp import llama_cpp as L

        roles: list[bytes] = []
        contents: list[bytes] = []
        for m in messages:
            content = _text_of(m.get("content"))
            roles.append(str(m.get("role", "")).encode())
            contents.append(content.encode())
        arr = (L.llama_chat_message * len(messages))()
        for i in range(len(messages)):
            arr[i].role = roles[i]
            arr[i].content = contents[i]
        alloc = sum(len(r) + len(c) + (len(r) + len(c)) // 4 for r, c in zip(roles, contents, strict=True))
        src = self.source.encode()
        buf = ctypes.create_string_buffer(max(alloc, 1))
        res = L.llama_chat_apply_template(src, arr, len(messages), add_generation_prompt, buf, len(buf))
        if res < 0:
            raise ChatTemplateError("this custom template is not supported, try using --jinja")
        if res > len(buf):
            buf = ctypes.create_string_buffer(res)
            res = L.llama_chat_apply_template(src, arr, len(messages), add_generation_prompt, buf, len(buf))
        if res < 0 or res > len(buf):
            raise ChatTemplateError("failed to apply chat template, try using --jinja")
        return buf.raw[:res].decode("utf-8", "replace")

    # ------------------------------------------------------------------ jinja
    def render_jinja(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True,
                     tools: Sequence[Any] | None = None, enable_thinking: bool = True,
                     extra_context: dict[str, Any] | None = None, source: str | None = None,
                     date_context: bool = True, strip_bos: bool = True) -> str:
        """``common_chat_template_direct_apply``: one render with llama-server's template inputs (``date_context``:
        ``common_chat_extra_context``'s dates, which the autoparser's probes go without; ``strip_bos``: drop the
        BOS/EOS texts the vocabulary adds itself)."""
        import jinja2

        env = jinja_env.environment()
        src = source if source is not None else self.source
        try:
            tmpl = env.from_string(src) if source is not None or self._compiled is None else self._compiled
            if source is None:
                self._compiled = tmpl
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"failed to parse the chat template: {e}") from None
        ctx: dict[str, Any] = {"messages": [dict(m) for m in messages], "bos_token": self.bos_token,
                               "eos_token": self.eos_token, "enable_thinking": enable_thinking}
        if tools:
            ctx["tools"] = list(tools)
        if date_context:
            now = jinja_env.now()                    # common_chat_extra_context
            ctx["datetime"] = time.strftime("%b %d %Y", now)
            ctx["date_string"] = time.strftime("%d %b %Y", now)
        ctx.update(extra_context or {})
        if isinstance(ctx.get("preserve_reasoning"), bool):   # jinja::caps_apply_preserve_reasoning
            keep = ctx["preserve_reasoning"]
            for k, v in (("preserve_thinking", keep), ("clear_thinking", not keep),
                         ("truncate_history_thinking", not keep), ("drop_thinking", not keep)):
                ctx.setdefault(k, v)
        if isinstance(ctx.get("reasoning_effort"), str) and ctx["reasoning_effort"]:
            ctx.setdefault("reasoning_strength", ctx["reasoning_effort"])   # jinja::caps_apply_reasoning_effort
        if add_generation_prompt:
            ctx["add_generation_prompt"] = True
        try:
            out = tmpl.render(**ctx)
        except ChatTemplateError:
            raise
        except Exception as e:  # noqa: BLE001 - any runtime failure of a template is the request's error
            raise ChatTemplateError(f"{type(e).__name__}: {e}") from None
        if strip_bos and self.add_bos and self.bos_token and out.startswith(self.bos_token):
            out = out[len(self.bos_token):]
        if strip_bos and self.add_eos and self.eos_token and out.endswith(self.eos_token):
            out = out[: -len(self.eos_token)]
        return out

    @property
    def caps(self) -> TemplateCaps:
        """The template's capabilities as ``jinja::caps_get`` finds them (:func:`constrained.chat.caps.probe_caps`,
        cached by source): what ``common_chat_templates_apply`` adapts the messages to.

        >>> ChatTemplates(None).caps.supports_system_role
        True
        """
        return probe_caps(self.source)

    @property
    def supports_system_role(self) -> bool:
        """``caps.supports_system_role``: the template uses a system message's content."""
        return self.caps.supports_system_role

    @property
    def content_caps(self) -> tuple[bool, bool]:
        """``(supports_string_content, supports_typed_content)`` as ``jinja::caps_get`` finds them.

        >>> ChatTemplates(None).content_caps
        (True, False)
        """
        caps = self.caps
        return caps.supports_string_content, caps.supports_typed_content

    def prepare_messages(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The workarounds ``common_chat_templates_apply_jinja`` applies before rendering (chat.cpp:1242-1291):
        the content normalised to what the template takes (``messages_inp_normalizer``: typed parts joined with
        newlines for a string-only template, a string wrapped as one text part for a typed-only one; a ``null``
        content is ``""``, as ``common_chat_msg::to_json_oaicompat`` writes it), ``developer`` becomes ``system``
        (except for GPT-OSS templates), a system message the template ignores is merged into the next message
        (``system_message_not_supported``), and for a template that takes object arguments, past tool calls'
        string arguments are parsed as JSON (``func_args_not_string``). StepFun templates get every content,
        reasoning and text part trimmed of whitespace first (``trim_all_content``); empty ``reasoning_content``,
        ``name`` and ``tool_call_id`` are left out, as ``to_json_oaicompat`` leaves them out; last, the specialised
        handlers' rewrites (:mod:`constrained.chat.handler_messages`: outdated Gemma 4 templates' tool results in
        the assistant turn, DeepSeek V4's tool results in call order).

        Raises:
            ChatTemplateError: tool call arguments that are not JSON (llama-server: HTTP 500).

        >>> t = ChatTemplates("{% for m in messages %}{{ m.content }}{% for c in m.tool_calls %}"
        ...                   "{{ c.function.arguments.arg }}{% endfor %}{% endfor %}{{ tools[0].function.name }}")
        >>> t.caps.supports_object_arguments
        True
        >>> t.prepare_messages([{"role": "assistant", "content": None, "tool_calls": [
        ...     {"type": "function", "function": {"name": "f", "arguments": '{"arg": 1}'}}]}])[0]
        {'role': 'assistant', 'content': '', 'tool_calls': [{'type': 'function', 'function': {'name': 'f', 'arguments': {'arg': 1}}}]}
        """
        caps = self.caps
        msgs = [dict(m) for m in messages]
        if _STEPFUN in self.source:                # workaround::trim_all_content, StepFun templates only
            for m in msgs:
                _trim_content(m)
        for m in msgs:                             # to_json_oaicompat writes these only when not empty
            for k in ("reasoning_content", "name", "tool_call_id"):
                if m.get(k) == "":
                    del m[k]
        string_ok, typed_ok = caps.supports_string_content, caps.supports_typed_content
        for m in msgs:
            c = m.get("content")
            if c is None and "content" in m:
                m["content"] = c = ""
            if string_ok and not typed_ok and isinstance(c, list):
                m["content"] = concat_content_parts(c)
            elif typed_ok and not string_ok and isinstance(c, str):
                m["content"] = [{"type": "text", "text": c}]
        if "<|channel|>" not in self.source:
            for m in msgs:
                if m.get("role") == "developer":
                    m["role"] = "system"
        if msgs and msgs[0].get("role") == "system" and not caps.supports_system_role:
            first = msgs.pop(0)
            if msgs:
                msgs[0]["content"] = _text_of(first.get("content")) + "\n" + _text_of(msgs[0].get("content"))
        if caps.supports_tool_calls:               # requires_non_null_content
            for m in msgs:
                if "tool_calls" in m and "content" not in m:
                    m["content"] = ""
        if caps.supports_object_arguments:
            for m in msgs:
                if isinstance(m.get("tool_calls"), list):
                    m["tool_calls"] = [_args_as_object(c) for c in m["tool_calls"]]
        return handler_messages.adjust(self.source, msgs)    # the specialised handlers' rewrites

    def apply(self, messages: Sequence[dict[str, Any]], *, jinja: bool, add_generation_prompt: bool = True,
              tools: Sequence[Any] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
              enable_thinking: bool = True) -> str:
        """The prompt llama-server builds for ``messages`` (``--jinja`` or not)."""
        if not jinja:
            return self.apply_legacy(messages, add_generation_prompt)
        return self.render_jinja(messages, add_generation_prompt=add_generation_prompt, tools=tools,
                                 enable_thinking=enable_thinking, extra_context=chat_template_kwargs)


def generation_prompt(t: ChatTemplates, msgs: list[dict[str, Any]], extra_context: dict[str, Any] | None = None,
                      enable_thinking: bool = True) -> str:
    """``common_chat_template_generation_prompt``: what ``add_generation_prompt`` appends to the rendered
    conversation (the text after the two renders' common prefix); ``""`` when the template fails to render.

    >>> generation_prompt(ChatTemplates(CHATML_TEMPLATE), [{"role": "user", "content": "hi"}])
    '<|im_start|>assistant\\n'
    """
    try:
        prepared = t.prepare_messages(msgs)
        a = t.render_jinja(prepared, add_generation_prompt=False, extra_context=extra_context,
                           enable_thinking=enable_thinking)
        b = t.render_jinja(prepared, add_generation_prompt=True, extra_context=extra_context,
                           enable_thinking=enable_thinking)
    except ChatTemplateError:
        return ""
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return b[i:]


def concat_content_parts(parts: list[Any]) -> str:
    """``messages_inp_normalizer::concat_content_parts``: text parts joined with newlines (none around media
    markers), other part types ignored.

    >>> concat_content_parts([{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}])
    'a\\nb'
    """
    text = ""
    last_media = False
    for part in parts:
        kind = part.get("type", "") if isinstance(part, dict) else ""
        if kind == "text":
            newline = not last_media and bool(text)
            last_media = False
        elif kind == "media_marker":
            newline = False
            last_media = True
        else:
            continue
        if newline:
            text += "\n"
        t = part.get("text", "")
        text += t if isinstance(t, str) else ""
    return text


_STEPFUN = "You have access to the following functions in JSONSchema format"      # chat.cpp:1235
_C_SPACE = " \t\n\v\f\r"                                                          # C isspace


def _trim_content(m: dict[str, Any]) -> None:
    # workaround::trim_all_content (chat.cpp:1066-1076), trim_whitespace (chat-auto-parser-helpers.cpp:12)
    c = m.get("content")
    if isinstance(c, str):
        m["content"] = c.strip(_C_SPACE)
    elif isinstance(c, list):
        m["content"] = [{**p, "text": p["text"].strip(_C_SPACE)}
                        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) else p
                        for p in c]
    if isinstance(m.get("reasoning_content"), str):
        m["reasoning_content"] = m["reasoning_content"].strip(_C_SPACE)


def _args_as_object(call: Any) -> Any:
    # workaround::func_args_not_string (chat.cpp:1041-1058)
    f = call.get("function") if isinstance(call, dict) else None
    if not isinstance(f, dict) or not isinstance(f.get("arguments"), str):
        return call
    try:
        args = json.loads(f["arguments"])
    except ValueError as e:
        raise ChatTemplateError(f"Failed to parse tool call arguments as JSON: {e}") from None
    return {**call, "function": {**f, "arguments": args}}


def _text_of(content: Any) -> str:
    # common_chat_msgs_parse_oaicompat + the legacy join: text parts joined with "\n"
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = ""
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "text":
            if out:
                out += "\n"
            out += str(part.get("text", ""))
    return out


def render(messages: Sequence[dict[str, Any]], template: str | None, *, jinja: bool = True,
           add_generation_prompt: bool = True, tools: Sequence[Any] | None = None, bos_token: str = "",
           eos_token: str = "", chat_template_kwargs: dict[str, Any] | None = None) -> str:
    """Render ``messages`` with ``template`` (None: ChatML) as llama-server would.

    >>> render([{"role": "user", "content": "Hi"}], None, add_generation_prompt=False)
    '<|im_start|>user\\nHi<|im_end|>\\n'
    """
    t = ChatTemplates(template, bos_token=bos_token, eos_token=eos_token)
    return t.apply(messages, jinja=jinja, add_generation_prompt=add_generation_prompt, tools=tools,
                   chat_template_kwargs=chat_template_kwargs)
