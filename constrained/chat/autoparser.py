"""The reasoning markers of llama-server's differential template autoparser (common/chat-diff-analyzer.cpp).

llama-server finds a template's reasoning markers by rendering probe conversations and diffing the outputs: an
assistant turn with and without ``reasoning_content`` (``compare_reasoning_presence``), a generation prompt with
``enable_thinking`` false and true (``compare_thinking_enabled``) and, for templates that render tool calls, a turn
whose reasoning appears only next to a tool call (``compare_reasoning_scope``); then per-template workarounds patch
the result. The markers decide how an assistant prefill is continued, whether thinking is on by default
(``supports_thinking``) and where reasoning is split from content.

Everything works on UTF-8 bytes, as the C++ strings do (a common prefix may end inside a character).

Example:
    >>> from constrained.chat.template import ChatTemplates
    >>> src = ("{% for m in messages %}<|im_start|>{{ m.role }}\\n{% if m.reasoning_content %}<think>\\n"
    ...        "{{ m.reasoning_content }}\\n</think>\\n\\n{% endif %}{{ m.content }}<|im_end|>\\n{% endfor %}"
    ...        "{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}")
    >>> r = analyze_reasoning(ChatTemplates(src))
    >>> r.mode, r.start, r.end
    ('tag_based', '<think>\\n', '\\n</think>\\n\\n')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .template import ChatTemplateError, ChatTemplates

__all__ = ["Content", "Reasoning", "analyze_content", "analyze_reasoning", "diff_split", "segmentize_markers", "trim_whitespace"]

# chat-diff-analyzer.cpp:24-34, the probe texts
FUN_FIRST = "FFF_FIRST_FUN_F"
FUN_SECOND = "SSS_SECOND_FUN_S"
ARG_FIRST = "AA_ARG_FST_AA"
ARG_SECOND = "BB_ARG_SND_BB"
USER_MSG = "U_USER_MSG Hello END_U"
ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
THINKING_CONTENT = "REASON_PART I am thinking END_R"
CALL_ID_001 = "call00001"

_WS = b" \t\n\v\f\r"                       # C isspace
_WS_SET = {bytes([c]) for c in _WS}
_SP = rb"[ \t\n\v\f\r]*"                   # common_peg_space_parser
_MARK = rb"(?:<[^>]*>|\[[^\]]*\])"         # common_peg_parser_builder::marker (peg-parser.cpp:1365)


def trim_whitespace(s: bytes) -> bytes:
    """``trim_whitespace`` (chat-auto-parser-helpers.cpp:11)."""
    return s.strip(_WS)


def segmentize_markers(text: bytes) -> list[tuple[bool, bytes]]:
    """``segmentize_markers`` (chat-auto-parser-helpers.cpp:290): ``(is_marker, bytes)`` pieces; a marker runs from
    ``<`` to the next ``>`` or ``[`` to the next ``]``."""
    out: list[tuple[bool, bytes]] = []
    in_marker = False
    opener = 0
    last = 0
    for pos, c in enumerate(text):
        if not in_marker and c in (0x3C, 0x5B):
            if last < pos:
                out.append((False, text[last:pos]))
            last = pos
            in_marker = True
            opener = c
        elif in_marker and ((opener == 0x3C and c == 0x3E) or (opener == 0x5B and c == 0x5D)):
            out.append((True, text[last:pos + 1]))
            last = pos + 1
            in_marker = False
    if last < len(text):
        out.append((False, text[last:]))
    return out


def _prune(segs: list[tuple[bool, bytes]]) -> list[tuple[bool, bytes]]:
    return [s for s in segs if trim_whitespace(s[1])]


def _cpl(a: bytes, b: bytes) -> int:
    n = 0
    m = min(len(a), len(b))
    while n < m and a[n] == b[n]:
        n += 1
    return n


def _csl(a: bytes, b: bytes) -> int:
    n = 0
    m = min(len(a), len(b))
    while n < m and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def diff_split(left: bytes, right: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """``calculate_diff_split`` (chat-auto-parser-helpers.cpp:86): ``(prefix, suffix, left, right)``, the common
    prefix and suffix aligned on marker segments."""
    ls, rs = segmentize_markers(left), segmentize_markers(right)
    if not ls:
        return b"", b"", b"", right
    if not rs:
        return b"", b"", left, b""
    prefix, suffix = b"", b""
    l0, l1, r0, r1 = 0, len(ls) - 1, 0, len(rs) - 1
    lfull = rfull = False
    while l0 != l1 and r0 != r1:
        adv = False
        if ls[l0] == rs[r0]:
            prefix += ls[l0][1]
            l0 += 1
            r0 += 1
            adv = True
        if ls[l1] == rs[r1]:
            suffix = ls[l1][1] + suffix
            if l0 != l1:
                l1 -= 1
            else:
                lfull = True
            if r0 != r1:
                r1 -= 1
            else:
                rfull = True
            adv = True
        if not adv:
            break
    if l0 == l1 and r0 != r1:
        if ls[l0] == rs[r1]:
            suffix = rs[r1][1] + suffix
            r1 -= 1
            lfull = True
        elif ls[l0] == rs[r0]:
            prefix += rs[r0][1]
            r0 += 1
            lfull = True
    elif r0 == r1 and l0 != l1:
        if ls[l1] == rs[r0]:
            suffix = ls[l1][1] + suffix
            l1 -= 1
            rfull = True
        elif ls[l0] == rs[r0]:
            prefix += ls[l0][1]
            l0 += 1
            rfull = True
    elif l0 == l1 and r0 == r1 and ls[l0] == rs[r0] and ls[l0][0]:
        prefix += rs[r0][1]
        lfull = rfull = True
    text_suffix = not ls[l1][0] and not rs[r1][0]
    text_prefix = not rs[r0][0] and not ls[l0][0]
    rem_l = b"".join(s[1] for s in ls[l0:(l1 if lfull else l1 + 1)])
    rem_r = b"".join(s[1] for s in rs[r0:(r1 if rfull else r1 + 1)])
    slen = _csl(rem_l, rem_r) if text_suffix else 0
    plen = _cpl(rem_l[:len(rem_l) - slen], rem_r[:len(rem_r) - slen]) if text_prefix else 0
    prefix += rem_l[:plen]
    suffix = rem_l[len(rem_l) - slen:] + suffix
    dl = rem_l[plen:len(rem_l) - slen]
    dr = rem_r[plen:len(rem_r) - slen]
    if not dl and not dr:
        prefix, suffix = left, b""
    if not dl and dr and len(left) <= len(right) and right[:len(left)] == left:
        prefix, suffix, dr = left, b"", right[len(left):]
    return prefix, suffix, dl, dr


def _probe_render(t: ChatTemplates, messages: list[dict[str, Any]], add_generation_prompt: bool,
                  enable_thinking: bool, tools: list[Any] | None = None) -> bytes | None:
    # autoparser::apply_template (chat-auto-parser-helpers.cpp:311): direct_apply with no BOS/EOS stripping and
    # only enable_thinking as extra context; a failed render is nullopt
    msgs = [dict(m) for m in messages]
    string_ok, typed_ok = t.content_caps
    if typed_ok and not string_ok:
        for m in msgs:
            if isinstance(m.get("content"), str):
                m["content"] = [{"type": "text", "text": m["content"]}]
    try:
        out = t.render_jinja(msgs, add_generation_prompt=add_generation_prompt, tools=tools,
                             enable_thinking=enable_thinking, extra_context={"enable_thinking": enable_thinking},
                             date_context=False, strip_bos=False)
    except ChatTemplateError:
        return None
    return out.encode("utf-8")


@dataclass
class Reasoning:
    """``analyze_reasoning``: ``mode`` is ``"none"``, ``"tag_based"`` or ``"tools_only"``; ``start`` / ``end`` the
    markers as rendered (with their whitespace)."""

    mode: str = "none"
    start: str = ""
    end: str = ""


def _user() -> dict[str, Any]:
    return {"role": "user", "content": USER_MSG}


def _presence(t: ChatTemplates, r: dict[str, Any]) -> None:
    # compare_reasoning_presence (chat-diff-analyzer.cpp:473)
    plain = {"role": "assistant", "content": ASSISTANT_MSG}
    with_r = {**plain, "reasoning_content": THINKING_CONTENT}
    a = _probe_render(t, [_user(), plain], False, True)
    b = _probe_render(t, [_user(), with_r], False, True)
    if a is None or b is None:
        return
    right = diff_split(a, b)[3]
    lit = re.escape(THINKING_CONTENT.encode())
    if not right or THINKING_CONTENT.encode() not in right:
        return
    m = re.search(b"(" + _MARK + _SP + b")" + lit + b"(" + _SP + _MARK + _SP + b")", b, re.S)
    if m:
        r.update(mode="tag_based", start=m.group(1), end=m.group(2))
        return
    m = re.search(lit + _SP + b"(" + _MARK + _SP + b")?", b, re.S)
    if m and m.group(1):
        r.update(mode="tag_based", end=m.group(1))


def _thinking_enabled(t: ChatTemplates, r: dict[str, Any]) -> None:
    # compare_thinking_enabled (chat-diff-analyzer.cpp:532)
    a = _probe_render(t, [_user()], True, False)
    b = _probe_render(t, [_user()], True, True)
    if a is None or b is None:
        return
    _, _, dl, dr = diff_split(a, b)
    lt, rt = trim_whitespace(dl), trim_whitespace(dr)
    if not lt and dr:
        if rt and b.endswith(rt) and not r["start"]:
            r.update(start=dr, mode="tag_based")
    elif not rt and dl:
        if lt and a.endswith(lt) and not r["end"]:
            seg = _prune(segmentize_markers(a))
            if len(seg) >= 2 and seg[-1][1] == lt and seg[-2][0]:
                r["start"] = seg[-2][1]
            r.update(end=dl, mode="tag_based")
    elif lt and rt:
        for base, ext in ((b, a), (a, b)):
            anchor = base[len(base) - min(len(base), 64):]
            pos = ext.rfind(anchor)
            if pos < 0 or pos + len(anchor) >= len(ext):
                continue
            extra = trim_whitespace(ext[pos + len(anchor):])
            if not extra:
                continue
            seg = _prune(segmentize_markers(extra))
            if len(seg) == 2 and seg[0][0] and seg[1][0]:
                if not r["start"]:
                    r["start"] = seg[0][1]
                if not r["end"]:
                    r["end"] = seg[1][1]
                r["mode"] = "tag_based"
                break
    if r["mode"] == "none" and not r["start"] and r["end"]:
        r["mode"] = "tag_based"


def _probe_tools() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {ARG_FIRST: {"type": "string", "description": "First argument"},
                                               ARG_SECOND: {"type": "string", "description": "Second argument"}},
              "required": []}
    return [{"type": "function", "function": {"name": n, "description": d, "parameters": schema}}
            for n, d in ((FUN_FIRST, "Test function foo"), (FUN_SECOND, "Test function bar"))]


def _scope(t: ChatTemplates, r: dict[str, Any]) -> None:
    # compare_reasoning_scope (chat-diff-analyzer.cpp:616)
    with_r = {"role": "assistant", "content": ASSISTANT_MSG, "reasoning_content": THINKING_CONTENT}
    call = {"id": CALL_ID_001, "type": "function",
            "function": {"name": FUN_FIRST, "arguments": {ARG_FIRST: "VVVV", ARG_SECOND: "XXXX"}}}
    with_tools = {"role": "assistant", "content": None, "reasoning_content": THINKING_CONTENT, "tool_calls": [call]}
    a = _probe_render(t, [_user(), with_r], False, True, _probe_tools())
    b = _probe_render(t, [_user(), with_tools], False, True, _probe_tools())
    if a is None or b is None:
        return
    lit = THINKING_CONTENT.encode()
    if lit in a or lit not in b:
        return
    r["mode"] = "tools_only"
    m = re.search(b"(" + _MARK + _SP + b")" + re.escape(lit) + _SP + b"(" + _MARK + _SP + b")", b, re.S)
    if m:
        r.update(start=m.group(1), end=m.group(2))
        return
    m = re.search(re.escape(lit) + _SP + b"(" + _MARK + _SP + b")?", b, re.S)
    if m:
        r["end"] = m.group(1) or b""
    else:
        r["mode"] = "none"


def _workarounds(src: str, r: dict[str, Any]) -> None:
    # the reasoning parts of chat-diff-analyzer.cpp:36-205's workarounds, in their order
    if ("content.split('</think>')" in src and "reasoning_content" not in src and "<SPECIAL_12>" not in src
            and r["mode"] == "none"):
        r.update(mode="tag_based", start=b"<think>", end=b"</think>")           # old Qwen / DeepSeek thinking
    if ("Write your thoughts between <think></think> and write your response between <response></response>"
            in src):
        r.update(mode="tag_based", start=b"<think>", end=b"</think>")           # Granite 3.3
    if all(k in src for k in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        r.update(mode="tag_based", start=b"<think>\n", end=b"</think>")         # Nemotron Nano v2
    if "laguna_glm_thinking" in src:                                            # Laguna
        r.update(start=trim_whitespace(r["start"]), end=trim_whitespace(r["end"]))


def analyze_reasoning(t: ChatTemplates, supports_tool_calls: bool | None = None) -> Reasoning:
    """The reasoning markers llama-server's autoparser finds for ``t`` (``analyze_reasoning`` and the
    workarounds of ``autoparser::analyze_template``). ``supports_tool_calls`` (the template's
    ``caps.supports_tool_calls``) enables the tool-scope probe; ``None`` asks :mod:`constrained.chat.caps`."""
    cached = getattr(t, "_reasoning", None)
    if cached is not None and supports_tool_calls is None:
        return cached
    r: dict[str, Any] = {"mode": "none", "start": b"", "end": b""}
    _presence(t, r)
    _thinking_enabled(t, r)
    if supports_tool_calls is None:
        supports_tool_calls = _caps_tool_calls(t)
    if supports_tool_calls:
        _scope(t, r)
    _workarounds(t.source, r)
    out = Reasoning(r["mode"], r["start"].decode("utf-8", "replace"), r["end"].decode("utf-8", "replace"))
    t._reasoning = out  # type: ignore[attr-defined]
    return out


def _caps_tool_calls(t: ChatTemplates) -> bool:
    from .caps import template_caps

    return bool(template_caps(t.source)["supports_tool_calls"])


@dataclass
class Content:
    """``analyze_content``: ``mode`` is ``"plain"``, ``"always_wrapped"`` or ``"wrapped_with_reasoning"``;
    ``start`` / ``end`` the markers around an assistant message's content."""

    mode: str = "plain"
    start: str = ""
    end: str = ""

    @property
    def always_wrapped(self) -> bool:
        """``is_always_wrapped`` (chat-diff-analyzer.cpp:764)."""
        return self.mode == "always_wrapped" and bool(self.start) and bool(self.end)


def analyze_content(t: ChatTemplates, reasoning: Reasoning | None = None) -> Content:
    """``analyze_content`` (chat-diff-analyzer.cpp:677) and the content workarounds of ``analyze_template``: the
    assistant content diffed against a tool-call turn and a reasoning turn; markers around it if it is wrapped."""
    cached = getattr(t, "_content", None)
    if cached is not None:
        return cached
    r = reasoning or analyze_reasoning(t)
    out = _content(t, r)
    src = t.source                                              # chat-diff-analyzer.cpp:36-205, content parts
    if ("Write your thoughts between <think></think> and write your response between <response></response>"
            in src):
        out = Content("wrapped_with_reasoning", "<response>", "</response>")       # Granite 3.3
    if "<|CHATBOT_TOKEN|>" in src and "<|END_OF_TURN_TOKEN|>" in src and not out.start:
        out = Content("always_wrapped", "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>")  # Command R+
    if ('set has_code_interpreter = tools | selectattr("type", "equalto", "code_interpreter") | list | length > 0'
            in src):
        out = Content("plain", out.start, "")                                   # Functionary 3.1
    if all(k in src for k in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        out = Content("plain", "", "")                                          # Nemotron Nano v2
    t._content = out  # type: ignore[attr-defined]
    return out


def _content(t: ChatTemplates, r: Reasoning) -> Content:
    user = _user()
    only = {"role": "assistant", "content": ASSISTANT_MSG}
    call = {"id": CALL_ID_001, "type": "function", "function": {"name": "test_func", "arguments": {"arg1": "value1"}}}
    with_tools = {"role": "assistant", "content": "", "tool_calls": [call]}
    with_r = {"role": "assistant", "content": "", "reasoning_content": THINKING_CONTENT}
    tools = _probe_tools()
    a = _probe_render(t, [user, only], False, True, tools)
    bt = _probe_render(t, [user, with_tools], False, True, tools)
    br = _probe_render(t, [user, with_r], False, True, tools)
    if a is None or bt is None or br is None:
        return Content()
    tools_left = diff_split(a, bt)[2]
    reason_left = diff_split(a, br)[2]
    resp = ASSISTANT_MSG.encode()
    end = r.end.encode()
    if trim_whitespace(tools_left) == resp:
        # space, the diff itself, space, optional marker, space, end: only a diff that starts with no whitespace
        if not reason_left or reason_left[:1] not in _WS_SET:
            return Content()
        if r.mode != "none" and end and re.search(re.escape(end) + _SP + re.escape(resp), reason_left, re.S):
            return Content()
    rdiff = reason_left
    if end and end in rdiff:
        rdiff = rdiff[rdiff.find(end) + len(end):]
    pure = rdiff if len(rdiff) > len(tools_left) else tools_left
    m = re.search(b"(" + _MARK + _SP + b")" + re.escape(resp) + _SP + b"(" + _MARK + _SP + b")", pure, re.S)
    if not m:
        return Content()
    return Content("always_wrapped", m.group(1).decode("utf-8", "replace"), m.group(2).decode("utf-8", "replace"))
