#!/usr/bin/env python
"""A tool-calling agent loop on the default model (Gemma 3 270M): a question, a tool call, the tool's result sent
back as a ``tool`` message, the final answer. Twice: through the Python API, then through ``constrained serve``
with the official ``openai`` client.

The default model's GGUF has no chat template, so llama-server would use ChatML and silently drop the tools. Here
the tools get our generic format (``constrained.chat.tools``): they are described in the system message, the model
calls one in a ``<tool_call>`` block under a grammar built from the tool's schema, we run the tool, and the model
writes the final answer from its result. Turn 1 uses ``tool_choice="required"`` (ours: the reply *is* a call, so
even a 270M model calls the tool); turn 2 uses ``"none"`` (free text).

    .venv/bin/python examples/agent.py            # both paths
    .venv/bin/python examples/agent.py api        # the Python API only
    .venv/bin/python examples/agent.py server     # constrained serve + openai only
    .venv/bin/python examples/agent.py server --template Qwen-Qwen3-0.6B         # a thinking template
    .venv/bin/python examples/agent.py server --template google-gemma-4-31B-it   # Gemma 4's own call notation

``--template`` (server path) gives ``constrained serve`` a chat template (``--chat-template-file``): a ``.jinja``
file, or the name of one of the 70 templates llama.cpp ships in ``models/templates/`` (read from the
llama-cpp-python sdist the tests download). The server then uses llama-server's own tool-call format for that
template (Qwen3's ``<tool_call>`` with ``<think>`` reasoning, DeepSeek's, Gemma 4's, GPT-OSS's harmony...) instead
of the generic one; the loop is the same. The 270M model was not trained on those templates: where llama-server's
own format lets a reply reason or write text before the call (GPT-OSS's analysis channel, DeepSeek's ``<think>``,
Ministral 3's free text), it may never get to the call within the example's token limit, and the assertion says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}]
QUESTION = "What is the weather in Paris right now, in celsius?"


def get_weather(city: str, unit: str) -> dict:
    """The tool itself (a real agent would call a weather service here)."""
    return {"city": city, "temperature": 21 if unit == "celsius" else 70, "unit": unit, "sky": "clear"}


def run_tool(name: str, arguments: str) -> str:
    """The tool's result for a call, or an error result the model reads (as an agent sends back a bad call's
    error): llama-server's grammars for some templates (Gemma 4's argument notation...) let a model add keys the
    tool's schema does not declare."""
    if name != "get_weather":
        return json.dumps({"error": f"unknown tool {name!r}"})
    args = json.loads(arguments)
    unknown = sorted(set(args) - {"city", "unit"})
    if unknown:
        return json.dumps({"error": f"unexpected arguments {unknown}"})
    return json.dumps(get_weather(**args))


def with_api() -> None:
    from constrained.chat.template import ChatTemplates
    from constrained.chat.tools import generic_messages, parse_reply, tool_call_setup
    from constrained.llama import generate, load_default_model, vocabulary_of
    from sampler import Params

    llm = load_default_model(n_ctx=2048)
    vocab = vocabulary_of(llm)
    chat = ChatTemplates(None)           # no template in the GGUF: ChatML, as llama-server
    messages = [{"role": "user", "content": QUESTION}]

    # turn 1: a tool call
    setup = tool_call_setup(TOOLS, "required", parallel_tool_calls=False, fmt="generic")   # exactly one call
    prompt = chat.render_jinja(generic_messages(messages, setup))
    g = generate(llm, prompt, grammar=setup.lazy_grammar(vocab), params=Params(seed=7, temp=0.7), n_predict=64)
    reply = parse_reply(g.text, setup)
    assert reply.tool_calls and reply.parse_error is None, reply
    call = reply.tool_calls[0]
    print(f"[api] tool call: {call.name}({call.arguments})  schema issues: {list(call.issues)}")
    messages.append(reply.message())
    messages.append({"role": "tool", "tool_call_id": call.id, "content": run_tool(call.name, call.arguments)})

    # turn 2: the answer, from the tool's result
    setup2 = tool_call_setup(TOOLS, "none", fmt="generic")
    prompt = chat.render_jinja(generic_messages(messages, setup2))
    g2 = generate(llm, prompt, params=Params(seed=7, temp=0.3), n_predict=32, stop=["<|im_end|>"])
    print("[api] final answer:", g2.text.strip())
    print("[api] tool call valid against the schema:", not call.issues)
    llm.close()


def template_file(name: str) -> Path:
    """A chat template: a file path, or a template name of llama.cpp's ``models/templates/`` (``.jinja`` optional)."""
    path = Path(name)
    if path.is_file():
        return path
    from oracle.sdist import llama_cpp_source

    shipped = llama_cpp_source() / "models" / "templates" / (name if name.endswith(".jinja") else name + ".jinja")
    if not shipped.is_file():
        names = sorted(p.stem for p in shipped.parent.glob("*.jinja"))
        raise SystemExit(f"no template {name!r}: a file, or one of {', '.join(names)}")
    return shipped


def with_server(base_url: str | None = None, template: Path | None = None) -> None:
    """The same loop over HTTP: ``constrained serve --jinja`` (started here unless ``base_url`` is given) and the
    ``openai`` client; the server puts the tools in the template's tool-call format (ours, generic, for the default
    model's ChatML) and returns parsed ``tool_calls``."""
    from openai import OpenAI

    proc = None
    if base_url is None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        extra = ["--chat-template-file", str(template)] if template is not None else []
        proc = subprocess.Popen([sys.executable, "-m", "constrained.server", "--jinja", "-c", "2048",
                                 "--host", "127.0.0.1", "--port", str(port), *extra], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(base_url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("constrained serve did not start") from None
                time.sleep(0.3)
    try:
        client = OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=300)
        messages: list = [{"role": "user", "content": QUESTION}]
        r = client.chat.completions.create(model="default", messages=messages, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, seed=7, temperature=0.7,
                                           max_tokens=64 if template is None else 256)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and msg.tool_calls, r
        call = msg.tool_calls[0]
        reasoning = (msg.model_extra or {}).get("reasoning_content")
        if reasoning:
            print(f"[server] reasoning: {reasoning.strip()[:200]!r}")
        print(f"[server] tool call: {call.function.name}({call.function.arguments})  id {call.id}")
        messages.append({"role": "assistant", "content": msg.content or "",
                         "tool_calls": [c.model_dump() for c in msg.tool_calls]})
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": run_tool(call.function.name, call.function.arguments)})
        # ChatML's end of turn is text to the default model (not a special token), and so is another template's:
        # stop on the usual markers (a model trained on the template ends on its own end-of-generation token)
        stop = ["<|im_end|>"] if template is None else ["<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>",
                                                         "<turn|>", "<|return|>"]
        r2 = client.chat.completions.create(model="default", messages=messages, tools=TOOLS, tool_choice="none",
                                            seed=7, temperature=0.3, max_tokens=32 if template is None else 128,
                                            stop=stop)
        print("[server] final answer:", (r2.choices[0].message.content or "").strip())
        extra = getattr(call, "model_extra", None) or {}
        print("[server] tool call valid against the schema:", not extra.get("issues"))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("which", nargs="?", default="both", choices=["api", "server", "both"])
    ap.add_argument("base_url", nargs="?", help="a running server (default: start constrained serve here)")
    ap.add_argument("--template", help="the server's chat template: a .jinja file or a name from llama.cpp's "
                                       "models/templates (e.g. Qwen-Qwen3-0.6B)")
    a = ap.parse_args()
    template = template_file(a.template) if a.template else None
    if a.which in ("api", "both"):
        with_api()
    if a.which in ("server", "both"):
        with_server(a.base_url, template)


if __name__ == "__main__":
    main()
