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
    assert name == "get_weather", name
    return json.dumps(get_weather(**json.loads(arguments)))


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


def with_server(base_url: str | None = None) -> None:
    """The same loop over HTTP: ``constrained serve --jinja`` (started here unless ``base_url`` is given) and the
    ``openai`` client; the server puts the tools in our generic format and returns parsed ``tool_calls``."""
    from openai import OpenAI

    proc = None
    if base_url is None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "constrained.server", "--jinja", "-c", "2048",
                                 "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
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
                                           parallel_tool_calls=False, seed=7, temperature=0.7, max_tokens=64)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and msg.tool_calls, r
        call = msg.tool_calls[0]
        print(f"[server] tool call: {call.function.name}({call.function.arguments})  id {call.id}")
        messages.append({"role": "assistant", "content": msg.content or "",
                         "tool_calls": [c.model_dump() for c in msg.tool_calls]})
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": run_tool(call.function.name, call.function.arguments)})
        r2 = client.chat.completions.create(model="default", messages=messages, tools=TOOLS, tool_choice="none",
                                            seed=7, temperature=0.3, max_tokens=32, stop=["<|im_end|>"])
        print("[server] final answer:", (r2.choices[0].message.content or "").strip())
        extra = getattr(call, "model_extra", None) or {}
        print("[server] tool call valid against the schema:", not extra.get("issues"))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    if which in ("api", "both"):
        with_api()
    if which in ("server", "both"):
        with_server(sys.argv[2] if len(sys.argv) > 2 else None)


if __name__ == "__main__":
    main()
