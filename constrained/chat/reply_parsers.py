"""The chat reply parsers of ``/v1/chat/completions`` without tools, as llama-server builds them with ``--jinja``.

A reply is read by the PEG parser ``common_chat_templates_apply`` built for the template (``common_chat_peg_parse``,
common/chat.cpp:1447: leniently, on the generation prompt followed by the text): the differential autoparser's
(``autoparser::build_parser``, chat-auto-parser-generator.cpp:97-160: the generation prompt up to the reasoning start,
an optional reasoning block, the content, maybe between content markers) or a specialised handler's content-only
parser (common/parsers/*.cpp). Each update gives the message and the stream deltas since the previous one
(``task_result_state::update_chat_msg``: an empty message is no update). The combinators and the mapper are
:mod:`constrained.chat.peg`'s.

Example:
    >>> spec = ReplySpec("<|im_start|>assistant\\n", "tag_based", "<think>\\n", "\\n</think>\\n\\n")
    >>> p = AutoChatParser(spec, "<|im_start|>assistant\\n")
    >>> p.update("<think>\\nHm", True)[1], p.update("m.\\n</think>\\n\\nHi", False)[1]
    ([{'reasoning_content': 'Hm'}], [{'reasoning_content': 'm.\\n'}, {'content': 'Hi'}])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .peg import (
    _P,
    CONTENT,
    FAIL,
    REASONING,
    ChatMessage,
    PegStream,
    _Atomic,
    _Choice,
    _Ctx,
    _End,
    _Eps,
    _json,
    _Lit,
    _Mapper,
    _Not,
    _reasoning,
    _Rep,
    _Res,
    _Seq,
    _Space,
    _Until,
    _Wrap,
)
from .stream_diff import compute_diffs

__all__ = ["AutoChatParser", "ContentParser", "ReplySpec", "ResponseFormatParser", "message_json", "reply_peg"]

_WS = " \t\n\v\f\r"
PEG_FAIL = "The model produced output that does not match the expected peg-native format"


def message_json(content: str, reasoning: str = "", tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``common_chat_msg::to_json_oaicompat`` (content is ``""``, never null)."""
    m: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        m["reasoning_content"] = reasoning
    if tool_calls:
        m["tool_calls"] = tool_calls
    return m


class ContentParser:
    """The chat output parser for templates without tool calls or reasoning (``Content-only``): the message is
    the generated text; each update's diff is the appended text."""

    def __init__(self) -> None:
        self.text = ""
        self.sent = ""

    def update(self, added: str, is_partial: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.text += added
        diffs: list[dict[str, Any]] = []
        if len(self.text) > len(self.sent):
            diffs.append({"content": self.text[len(self.sent):]})
            self.sent = self.text
        return message_json(self.text), diffs


class PegReplyParser(ContentParser):
    """A reply read by a lenient PEG parse of ``input_prefix`` + the text (``common_chat_peg_parse``), each update
    giving the message and its stream deltas; subclasses set ``peg``, ``input_prefix`` and ``raw_texts``."""

    peg: _P
    input_prefix: str = ""
    raw_texts: bool = False          # gemma4 / minimax_m3: the mapper keeps the texts as they are
    msg: ChatMessage
    parse_error: str | None

    _stream: PegStream | None = None

    @property
    def steps(self) -> int:
        """The parse work so far (parser calls plus characters scanned; the parse is incremental)."""
        return self._stream.steps if self._stream is not None else 0

    def update(self, added: str, is_partial: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.text += added
        if self._stream is None:
            self._stream = PegStream(self.peg, self.input_prefix)
        r = self._stream.feed(added)
        if r.type == FAIL:
            if is_partial:
                return self._json(), []
            self.parse_error = PEG_FAIL
            new = ChatMessage(self.text)
        elif self.raw_texts:
            new = _raw_message(r.nodes)
        else:
            m = _Mapper()
            for n in r.nodes:
                m.visit(n)
            new = m.finish()
        diffs: list[dict[str, Any]] = []
        if not new.empty():
            diffs = compute_diffs(self.msg, new)
            self.msg = new
        return self._json(), diffs

    def _json(self) -> dict[str, Any]:
        m = message_json(self.msg.content, self.msg.reasoning_content)
        if self.parse_error:
            m["parse_error"] = self.parse_error
        return m


class ResponseFormatParser(PegReplyParser):
    """The PEG parser the autoparser builds for a ``response_format`` answer (chat-auto-parser-generator.cpp:
    ``build_parser``): the generation prompt up to the reasoning start, optional whitespace, the reasoning block
    when the template has one (and ``reasoning_format`` is not ``none``), whitespace, then the JSON either in a
    ```` ```json ```` fence or bare, whitespace, the end. The content is the JSON text alone (``p.content`` wraps
    ``p.json()``): the fence and the whitespace around it are never content, also in a stream (a partial fence
    gives no update) and in a reply cut inside the fence (the parse is lenient: an incomplete JSON is read as far
    as it goes). A final reply it rejects is answered whole as content with ``parse_error`` set (llama-server:
    HTTP 500), as :class:`AutoChatParser` does.

    >>> p = ResponseFormatParser()
    >>> [p.update(t, True)[1] for t in ("``", "`json\\n{", '"a": 1')], p.update("}\\n```", False)
    ([[], [{'content': '{'}], [{'content': '"a": 1'}]], ({'role': 'assistant', 'content': '{"a": 1}'}, [{'content': '}'}]))
    """

    def __init__(self, spec: ReplySpec | None = None, generation_prompt: str = "") -> None:
        super().__init__()
        spec = spec or ReplySpec(generation_prompt)
        extracting = spec.extract and spec.mode != "none"

        class _Fmt:
            reasoning = (spec.start, spec.end) if extracting and spec.end else None

        rp = _reasoning(_Fmt) if _Fmt.reasoning else _Eps()
        js = _Wrap(CONTENT, _json())
        body = _Seq(rp, _Space(), _Choice(_Seq(_Lit("```json"), _Space(), js, _Space(), _Lit("```")),
                                          _Seq(_Space(), js, _Space())), _End())
        rs = spec.start.strip(_WS)                              # p.prefix(generation_prompt, trim(start)) << ...
        gp = spec.generation_prompt
        prefix = gp[:gp.find(rs)] if rs and rs in gp else gp
        self.peg: _P = _Seq(_Lit(prefix), _Space(), body) if prefix else _Seq(_Space(), body)
        self.input_prefix = generation_prompt
        self.msg = ChatMessage()
        self.parse_error: str | None = None


@dataclass
class ReplySpec:
    """What a reply parser is built from: the generation prompt the parser was built with, the autoparser's
    reasoning mode and markers and content markers (when always wrapped), whether reasoning is extracted
    (``reasoning_format`` is not ``none``); for a specialised handler its name, ``enable_thinking`` and the source."""

    generation_prompt: str
    mode: str = "none"
    start: str = ""
    end: str = ""
    content_start: str = ""
    content_end: str = ""
    extract: bool = True
    handler: str | None = None
    enable_thinking: bool = True
    source: str = ""
    continuation: str = ""          # a prefill continued: "content" or "reasoning"
    response_format: bool = False   # the autoparser's response_format parser (the JSON is the content)


class _Peek(_P):
    # common_peg_and_parser (peg-parser.cpp:478): the child's result, nothing consumed
    def __init__(self, child: _P) -> None:
        self.child = child

    def parse(self, c: _Ctx, pos: int) -> _Res:
        c.steps += 1
        r = self.child.parse(c, pos)
        return _Res(r.type, pos, pos, (), r.hi)


def _opt(p: _P) -> _P:
    return _Choice(p, _Eps())


def _autoparser(spec: ReplySpec) -> _P:
    extracting = spec.extract and spec.mode != "none"

    class _Fmt:
        reasoning = (spec.start, spec.end) if extracting and spec.end else None

    rp = _reasoning(_Fmt) if _Fmt.reasoning else _Eps()         # analyze_reasoning::build_parser
    cs, ce = spec.content_start, spec.content_end
    if spec.response_format:                                    # chat-auto-parser-generator.cpp:120-125
        js = _Wrap(CONTENT, _json())
        body = _Seq(rp, _Space(), _Choice(_Seq(_Lit("```json"), _Space(), js, _Space(), _Lit("```")),
                                          _Seq(_Space(), js, _Space())), _End())
    elif cs and ce:                                               # analyze_content::build_parser, always wrapped
        lead = rp if extracting else _Wrap(CONTENT, _Until(cs))
        body = _Seq(lead, _Lit(cs), _Wrap(CONTENT, _Until(ce)), _Lit(ce), _End())
    else:
        body = _Seq(rp, _Wrap(CONTENT, _Until()), _End())
    rs = spec.start.strip(_WS)                                  # p.prefix(generation_prompt, trim(start))
    gp = spec.generation_prompt
    prefix = gp[:gp.find(rs)] if rs and rs in gp else gp
    head = _Lit(prefix) if prefix else _Eps()
    return _Seq(head, body) if spec.mode == "none" and not spec.response_format else _Seq(head, _Space(), body)


def _think(start: str, end: str, *stops: str) -> _P:
    return _Seq(_Lit(start), _Wrap(REASONING, _Until(end, *stops)))


def reply_peg(spec: ReplySpec) -> _P | None:
    """The reply parser for ``spec``, or ``None`` where llama-server's is not reproduced (a specialised handler
    not ported: the reply is then read as content)."""
    h, x = spec.handler, spec.extract
    rest = _Wrap(CONTENT, _Until())
    if h is None:
        return _autoparser(spec)
    if h == "qwen3_coder":                                      # qwen3-coder.cpp:75-174, content only
        r: _P = _Eps()
        if x and "<think>" in spec.source:
            r = _opt(_Seq(_Lit("<think>"), _Space(), _Wrap(REASONING, _Until("</think>", "<tool_call>")),
                          _Choice(_Lit("</think>"), _Peek(_Lit("<tool_call>")))))
        return _Seq(_Lit("<|im_start|>assistant\n"), r, _Space(), rest)
    if h == "deepseek_v3_2":                                    # deepseek.cpp:148-249, content only
        v4 = "function_calls" not in spec.source
        r = _Eps()
        if x and spec.enable_thinking:
            r = _opt(_Seq(_think("<think>", "</think>"), _Lit("</think>")))
        elif x:
            r = _opt(_Lit("</think>")) if v4 else _opt(_Seq(_Lit("<think>"), _Until("</think>"), _Lit("</think>")))
        return _Seq(_Lit("<｜Assistant｜>"), r, rest, _End())
    if h == "kimi_k2":                                          # kimi-k2.cpp:51-75, content only
        r = _Eps()
        if x:
            r = _opt(_Seq(_think("<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>"),
                          _opt(_Lit("</think>"))))
        return _Seq(_Lit("<|im_assistant|>assistant<|im_middle|>"), r, rest, _End())
    if h == "minicpm5":                                         # minicpm5.cpp:49-113, content only
        r = _Seq(_Lit("<think>"), _Space(), _Wrap(REASONING, _Until("</think>")), _Space(), _Lit("</think>"),
                 _Space()) if x else _Eps()
        return _Seq(_Lit("<|im_start|>assistant\n"), r, rest, _End())
    if h in ("lfm2", "lfm2_5"):                                 # lfm2.cpp:52-81, content only
        r = _Eps()
        if x and "<think>" in spec.source:
            r = _opt(_Seq(_think("<think>", "</think>"), _Lit("</think>")))
        return _Seq(_Lit("<|im_start|>assistant\n"), r, rest, _End())
    if h == "ministral_3":                                      # ministral3.cpp:75-108, content only
        r = _opt(_Seq(_think("[THINK]", "[/THINK]"), _Lit("[/THINK]"))) if x else _Eps()
        return _Seq(r, _Space(), rest)
    if h == "cohere2moe":                                       # cohere2moe.cpp:80-104, content only
        stops = ("<|END_THINKING|>", "<|START_TEXT|>", "<|START_ACTION|>")
        if x:
            r = _opt(_Seq(_think("<|START_THINKING|>", *stops), _opt(_Lit("<|END_THINKING|>"))))
        else:
            r = _opt(_Wrap(CONTENT, _Seq(_Lit("<|START_THINKING|>"), _Until(*stops), _opt(_Lit("<|END_THINKING|>")))))
        text = _Seq(_Lit("<|START_TEXT|>"), _Wrap(CONTENT, _Until("<|END_TEXT|>")), _opt(_Lit("<|END_TEXT|>")))
        return _Seq(_Lit("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"), r, text, _opt(_Lit("<|END_OF_TURN_TOKEN|>")),
                    _End())
    if h == "kimi_k3":                                          # kimi-k3.cpp:69-94, content only
        think_end, resp_start = "<|close|>think<|sep|>", "<|open|>response<|sep|>"
        body = _Wrap(REASONING if x else CONTENT, _Until(think_end, resp_start))
        r = _opt(_Seq(_opt(_Lit("<|open|>think<|sep|>")), body, _opt(_Lit(think_end))))
        resp = _Seq(_opt(_Lit(resp_start)), _Wrap(CONTENT, _Until("<|close|>response<|sep|>", "<|open|>tools<|sep|>",
                                                                   "<|close|>message<|sep|>")),
                    _opt(_Lit("<|close|>response<|sep|>")))
        return _Seq(_opt(_Lit('<|open|>message role="assistant"<|sep|>')), r, resp,
                    _opt(_Lit("<|close|>message<|sep|>")), _opt(_Lit("<|end_of_msg|>")), _End())
    if h == "ling3":                                            # ling3.cpp:64-103, content only
        if spec.continuation:
            think_open = spec.continuation != "content"
        else:
            gp = spec.generation_prompt
            think_open = "<think>" in gp and ("</think>" not in gp or gp.rfind("<think>") > gp.rfind("</think>"))
        until = _Until("</think>", "<tool_call>") if think_open else _Until("</think>")
        r = _opt(_Seq(_opt(_Lit("<think>")), _Wrap(REASONING if x else CONTENT, until), _opt(_Lit("</think>"))))
        tail = _Seq(_opt(_Wrap(CONTENT, _Until("<|role_end|>"))), _opt(_Lit("<|role_end|>")))
        return _Seq(_opt(_Seq(_Lit("<role>ASSISTANT</role>"), _opt(_Space()))), r, tail, _End())
    if h == "functionary_v3_2":                                 # functionary-v3-2.cpp:24-40, content only
        return _Seq(_Lit("<|start_header_id|>assistant<|end_header_id|>\n\n>>>"), _Lit("all\n"), rest, _End())
    if h == "muse_glimmer":                                     # muse-glimmer.cpp:51-131, content only
        start = _Lit("<|start|>assistant")
        if not x:
            return _Seq(start, rest)
        analysis = _Seq(_Lit(" to=self<|message|>"), _Wrap(REASONING, _Until("<|eom|>")), _Lit("<|eom|>"))
        final = _Seq(_opt(_Lit(" to=user")), _Lit("<|message|>"), _Wrap(CONTENT, _Until("<|eot|>", "<|eom|>")))
        return _Seq(_Rep(_Seq(start, analysis), 0, -1), start, final)
    if h == "gpt_oss":                                          # gpt-oss.cpp:71-138, content only
        start, end, body = _Lit("<|start|>assistant"), _Lit("<|end|>"), _Until("<|end|>")
        stray = _opt(_Seq(_Lit("<|channel|>commentary"), _opt(_Lit(" to=assistant"))))
        opening = _Seq(stray, _Lit("<|channel|>analysis<|message|>"))
        analysis = (_Seq(opening, _Wrap(REASONING, body), end) if x
                    else _Wrap(CONTENT, _Seq(opening, body, end)))
        preamble = _Seq(_Lit("<|channel|>commentary<|message|>"), _Wrap(CONTENT, body), end)
        final = _Seq(stray, _Lit("<|channel|>final<|message|>"), _Wrap(CONTENT, body))
        channel = _Seq(_Lit("<|channel|>"), _Choice(_Lit("commentary"), _Lit("analysis")))
        unsolicited = _Atomic(_Seq(_opt(channel), _Lit(" to="), body, end))
        return _Seq(_Rep(_Seq(start, _Choice(preamble, analysis)), 0, -1), start, _Choice(final, unsolicited))
    if h == "gigachat_v3":                                      # gigachat-v3.cpp:27-56, content only
        return _Seq(_Lit("assistant<|role_sep|>\n"), rest)
    if h == "minimax_m3":                                       # minimax-m3.cpp:64-99, content only
        gp, think_start, think_end = spec.generation_prompt, "<mm:think>", "</mm:think>"
        head = gp[:gp.find(think_start)] if think_start in gp else gp        # p.prefix(GEN_PROMPT, THINK_START)
        r = _Eps()
        if x:
            if spec.enable_thinking:
                block = _Seq(_Lit(think_start), _Space(), _Wrap(REASONING, _Until(think_end)), _Lit(think_end))
            else:
                block = _Seq(_Lit(think_start), _Until(think_end), _Lit(think_end))
            # a turn without reasoning starts with a bare </mm:think> (the generation prompt's or the model's)
            r = _opt(_Choice(block, _Lit(think_end)))
        return _Seq(_Lit(head) if head else _Eps(), r, rest, _End())
    if h == "gemma4":                                           # gemma4.cpp:201-291, content only
        if x:
            thought = _Seq(_Lit("<|channel>thought"), _Space(), _Wrap(REASONING, _Until("<channel|>")),
                           _Lit("<channel|>"))
        else:
            thought = _Wrap(CONTENT, _Seq(_Lit("<|channel>thought"), _Space(), _Until("<channel|>"),
                                          _Lit("<channel|>")))
        empty_channels = _Rep(_Seq(_Lit("<|channel>"), _Not(_Lit("thought"))), 0, -1)
        lead = _Choice(_Seq(_Peek(_Lit("<|channel>")), empty_channels, thought), _Not(_Lit("<|channel>")))
        message = _Seq(lead, _Wrap(CONTENT, _Until("<|channel>", "<channel|>")))
        return _Seq(_opt(_Lit("<|turn>model\n")), _Rep(message, 1, -1))
    return None


def _raw_message(nodes: list[Any]) -> ChatMessage:
    # common_chat_peg_gemma4_mapper (chat-peg-parser.cpp:956-1094) and common_chat_peg_minimax_m3_mapper
    # (chat-peg-parser.cpp:1204-1230) without tools: the reasoning and content texts, kept as they are
    m = ChatMessage()

    def visit(n: Any) -> None:
        if n.tag == REASONING:
            m.reasoning_content += n.text
        elif n.tag == CONTENT:
            m.content += n.text
        else:
            for c in n.children:
                visit(c)
    for n in nodes:
        visit(n)
    return m


class AutoChatParser(PegReplyParser):
    """A reply parser built from a :class:`ReplySpec` (:func:`reply_peg`), run on ``generation_prompt`` + the text
    as ``common_chat_peg_parse`` runs it. A final reply it rejects is answered whole as content with
    ``parse_error`` (llama-server: HTTP 500); a partial one gives no update (llama-server: an SSE error)."""

    def __init__(self, spec: ReplySpec, generation_prompt: str) -> None:
        super().__init__()
        peg = reply_peg(spec)
        self.peg: _P = peg if peg is not None else _Wrap(CONTENT, _Until())
        self.input_prefix = generation_prompt if peg is not None else ""
        # gemma4 / minimax_m3: their mappers keep the reasoning and content texts as they are
        self.raw_texts = peg is not None and spec.handler in ("gemma4", "minimax_m3")
        self.msg = ChatMessage()
        self.parse_error: str | None = None


