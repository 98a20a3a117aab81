"""The message delimiters llama-server's template autoparser finds (``detect_assistant_start_marker`` /
``detect_user_start_marker``, common/chat-diff-analyzer.cpp): the texts that start an assistant and a user message,
found by diffing renders of probe conversations. The slot cuts the prompt at user-message starts for context
checkpoints, which changes the logits, so these matter.

Example:
    >>> from constrained.chat.template import CHATML_TEMPLATE, ChatTemplates
    >>> message_delimiters(ChatTemplates(CHATML_TEMPLATE))
    [('assistant', '<|im_start|>assistant'), ('user', '<|im_start|>user')]
"""

from __future__ import annotations

import re
from typing import Any

from .template import ChatTemplateError, ChatTemplates

__all__ = ["message_delimiters"]

_USER_MSG = "U_USER_MSG Hello END_U"          # chat-diff-analyzer.cpp's probe messages
_ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
_MARKER = re.compile(r"<[^<>]*>|\[[^\[\]]*\]")


def _segments(text: str) -> list[tuple[bool, str]]:
    """``segmentize_markers``: ``<...>`` / ``[...]`` markers and the text between them."""
    out: list[tuple[bool, str]] = []
    pos = 0
    for m in _MARKER.finditer(text):
        if m.start() > pos:
            out.append((False, text[pos:m.start()]))
        out.append((True, m.group()))
        pos = m.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def message_delimiters(t: ChatTemplates) -> list[tuple[str, str]]:
    """The message delimiters llama-server's autoparser finds (``detect_assistant_start_marker`` /
    ``detect_user_start_marker``): ``[("assistant", text), ("user", text)]``, either missing when not found.

    The prompt is cut at user-message starts for context checkpoints, which changes the logits, so these matter.
    Found by diffing renders of probe conversations (a string diff; llama.cpp diffs marker segments).

    >>> from constrained.chat.template import CHATML_TEMPLATE
    >>> message_delimiters(ChatTemplates(CHATML_TEMPLATE))
    [('assistant', '<|im_start|>assistant'), ('user', '<|im_start|>user')]
    """
    def render(msgs: list[dict[str, Any]]) -> str | None:
        try:
            return t.render_jinja(msgs, add_generation_prompt=False)
        except ChatTemplateError:
            return None

    def after_common_prefix(a: str, b: str) -> str:
        i = 0
        while i < min(len(a), len(b)) and a[i] == b[i]:
            i += 1
        return b[i:]

    user = {"role": "user", "content": _USER_MSG}
    asst = {"role": "assistant", "content": _ASSISTANT_MSG}
    out: list[tuple[str, str]] = []
    a, b = render([user]), render([user, asst])
    if a is not None and b is not None:
        right = after_common_prefix(a, b)
        if _ASSISTANT_MSG in right:
            start = right[: right.find(_ASSISTANT_MSG)]
            for tag in ("<think>", "[THINK]", "</think>"):    # the reasoning markers are cut off
                if tag in start:
                    start = start[: start.find(tag)]
            start = start.strip()
            if start:
                out.append(("assistant", start))
    a, b = render([]), render([user])
    if a is None or b is None:              # the complex variant, for templates that refuse no messages
        two = {"role": "user", "content": "V_USER_MSG Hello END_V"}
        a, b = render([two, asst]), render([two, asst, user])
    if a is not None and b is not None:
        right = after_common_prefix(a, b)
        if _ASSISTANT_MSG in right:
            right = right[right.find(_ASSISTANT_MSG) + len(_ASSISTANT_MSG):]
        if _USER_MSG in right:
            parts: list[str] = []
            seen_marker = False
            for is_marker, seg in _segments(right[: right.find(_USER_MSG)]):
                low = seg.lower()
                if is_marker and not seen_marker and ("end" in low or "close" in low):
                    continue
                if not is_marker and not seen_marker and not seg.strip():
                    continue
                seen_marker |= is_marker
                parts.append(seg)
            start = "".join(parts).strip()
            if start:
                out.append(("user", start))
    return out
