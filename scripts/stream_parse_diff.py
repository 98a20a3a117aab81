"""Differential check of the streaming reply parsers: every update's (message, deltas) over random streams, one JSON
line per case (tool formats, reply-parser specs, response_format). Run it under two trees and compare the outputs
(issue 28: the incremental parser against the full re-parse per update it replaced; 7,000 cases identical).

Run: PYTHONPATH=$PWD .venv/bin/python scripts/stream_parse_diff.py 3000 > new.jsonl  (and under the old tree)
"""
# ruff: noqa: E401, E402, E701, E702, I001, UP031
import json, random, sys
from constrained.chat.tools import tool_call_setup
from constrained.chat.tool_stream import ToolCallParser
import constrained.chat.tool_stream as _ts
_ctr = [0]
def _nid():
    _ctr[0] += 1
    return "id%d" % _ctr[0]
_ts.new_tool_call_id = _nid
from constrained.chat.reply_parsers import AutoChatParser, ReplySpec, ResponseFormatParser
from constrained.chat.tool_formats import FORMATS

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
rnd = random.Random(1234)
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("get_weather", "f", "get")]

def rjson(d=0):
    k = rnd.random()
    if d > 4 or k < 0.3:
        return rnd.choice([lambda: rnd.randint(-1000, 10**6), lambda: rnd.random() * 1e3, lambda: rnd.choice([True, False, None]),
                           lambda: "".join(rnd.choice('ab "\\\n/ü\u00e9xy{}[]:,') for _ in range(rnd.randint(0, 12)))])()
    if k < 0.65:
        return {("k%d" % i) + rnd.choice(["", '"', "\\", " "]): rjson(d + 1) for i in range(rnd.randint(0, 4))}
    return [rjson(d + 1) for _ in range(rnd.randint(0, 4))]

def jtext(v):
    t = json.dumps(v, ensure_ascii=rnd.random() < 0.3, indent=rnd.choice([None, None, 1]), separators=rnd.choice([None, (",", ":"), (" , ", " : ")]))
    return t

def call_text(fmt, name):
    f = FORMATS[fmt]
    args = jtext(rjson())
    if rnd.random() < 0.2:
        args = jtext({"a": rjson()})
    body = '{"%s": "%s", "%s": %s' % (f.name_field, name, f.args_field, args)
    if f.id_field and rnd.random() < 0.5:
        body += ', "%s": "%s"' % (f.id_field, "abc123XYZ"[: rnd.randint(1, 9)])
    body += "}"
    if f.openai_wrapper and rnd.random() < 0.5:
        body = '{"type": "function", ' + body[1:]
    return body

def reply(fmt):
    f = FORMATS[fmt]
    out = ""
    if f.reasoning and rnd.random() < 0.6:
        out += f.reasoning[0] + rnd.choice(["hmm", "let me think { [", "", "a\n\nb"]) + f.reasoning[1]
    if rnd.random() < 0.6:
        out += rnd.choice(["Sure.", "Let me check ", "{not json", "text < tool", "x" * rnd.randint(1, 40)])
    n = rnd.choice([0, 1, 1, 2, 3])
    names = [rnd.choice(["get_weather", "f", "get", "nope"]) for _ in range(n)]
    if f.section_start:
        if n:
            out += f.section_start + "[" + ", ".join(call_text(fmt, nm) for nm in names) + "]"
    elif f.per_call_start:
        for nm in names:
            out += f.per_call_start + call_text(fmt, nm) + "\n" + f.per_call_end + rnd.choice(["", "\n", " "])
    else:
        if n:
            out += call_text(fmt, names[0])
    if rnd.random() < 0.15:     # mutate
        i = rnd.randrange(len(out) + 1)
        out = out[:i] + rnd.choice(["\\", '"', "}", "\\u12", "\\uZZ", "{", "]", "<", "x"]) + out[i:]
    if rnd.random() < 0.15:
        out = out[: rnd.randrange(len(out) + 1)]
    return out

def chunks(t):
    out, i = [], 0
    while i < len(t):
        k = rnd.choice([1, 1, 2, 3, 5, 8])
        out.append(t[i:i + k]); i += k
    return out

def run(parser, t):
    ups = []
    try:
        for ch in chunks(t):
            ups.append(parser.update(ch, True))
        ups.append(parser.update("", False))
    except Exception as e:
        ups.append("EXC " + type(e).__name__ + str(e))
    return ups

for case in range(N):
    fmt = rnd.choice(list(FORMATS))
    t = reply(fmt)
    setup = tool_call_setup(TOOLS, rnd.choice(["auto", "auto", "required"]), rnd.choice([None, True, False]), fmt=fmt)
    gp = f.generation_prompt if (f := FORMATS[fmt]) else ""
    print(json.dumps({"case": case, "kind": "tools", "fmt": fmt, "text": t, "ups": run(ToolCallParser(setup, rnd.choice([gp, ""])), t)}, ensure_ascii=False))

SPECS = [ReplySpec("<|im_start|>assistant\n", "tag_based", "<think>\n", "\n</think>\n\n"),
         ReplySpec("<|im_start|>assistant\n"),
         ReplySpec("<|im_start|>assistant\n<think>\n", "tag_based", "<think>\n", "\n</think>\n\n"),
         ReplySpec("<|im_start|>assistant\n", "tag_based", "<think>", "</think>", content_start="<answer>", content_end="</answer>"),
         ReplySpec("<|start|>assistant", handler="gpt_oss"),
         ReplySpec("<|turn>model\n", handler="gemma4"),
         ReplySpec("<|im_start|>assistant\n", handler="qwen3_coder", source="<think>"),
         ReplySpec("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", handler="cohere2moe"),
         ReplySpec("", handler="kimi_k3"),
         ReplySpec("<|im_start|>assistant\n", handler="ling3"),
         ]
PIECES = ["<think>\n", "\n</think>\n\n", "<think>", "</think>", "<answer>", "</answer>", "<|channel|>analysis<|message|>", "<|end|>",
          "<|start|>assistant", "<|channel|>final<|message|>", "<|channel>thought", "<channel|>", "<|channel>", "<|START_THINKING|>",
          "<|END_THINKING|>", "<|START_TEXT|>", "<|END_TEXT|>", "<|END_OF_TURN_TOKEN|>", "hello", " world", "\n", "x", "<", "<|", "<tool_call>",
          "<|open|>think<|sep|>", "<|close|>think<|sep|>", "<|open|>response<|sep|>", "<role>ASSISTANT</role>", "<|role_end|>", "```json", "```", "{\"a\": 1}", " "]
for case in range(N):
    si = rnd.randrange(len(SPECS)); spec = SPECS[si]
    t = "".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 14)))
    gp = spec.generation_prompt
    p = AutoChatParser(spec, gp)
    print(json.dumps({"case": case, "kind": "reply", "spec": si, "text": t, "ups": run(p, t)}, ensure_ascii=False))
for case in range(N // 3):
    t = rnd.choice(["", "```json\n", " "]) + jtext(rjson()) + rnd.choice(["", "\n```", " ", "x"])
    if rnd.random() < 0.3: t = t[: rnd.randrange(len(t) + 1)]
    spec = rnd.choice([None, SPECS[0]])
    p = ResponseFormatParser(spec, "<|im_start|>assistant\n")
    print(json.dumps({"case": case, "kind": "rf", "text": t, "ups": run(p, t)}, ensure_ascii=False))
