#!/usr/bin/env python
"""A tool-calling agent loop on the default model (Gemma 3 270M), through the Python API.

The default model's GGUF has no chat template, so llama-server would use ChatML and silently drop the tools. Here
the tools get our generic format (``constrained.chat.tools``): they are described in the system message, the model
calls one in a ``<tool_call>`` block under a grammar built from the tool's schema, we run the tool, send its result
back as a ``tool`` message, and the model writes the final answer.

Turn 1 uses ``tool_choice="required"`` (ours: the reply *is* a call, so even a 270M model calls the tool); turn 2
uses ``"none"`` (free text).

    .venv/bin/python examples/agent.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from constrained.chat.template import ChatTemplates  # noqa: E402
from constrained.chat.tools import generic_messages, parse_reply, tool_call_setup  # noqa: E402
from constrained.llama import generate, load_default_model, vocabulary_of  # noqa: E402
from sampler import Params  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}]


def get_weather(city: str, unit: str) -> dict:
    """The tool itself (a real agent would call a weather service here)."""
    return {"city": city, "temperature": 21 if unit == "celsius" else 70, "unit": unit, "sky": "clear"}


def main() -> None:
    llm = load_default_model(n_ctx=2048)
    vocab = vocabulary_of(llm)
    chat = ChatTemplates(None)           # no template in the GGUF: ChatML, as llama-server
    messages = [{"role": "user", "content": "What is the weather in Paris right now, in celsius?"}]

    # turn 1: a tool call
    setup = tool_call_setup(TOOLS, "required", parallel_tool_calls=False, fmt="generic")   # exactly one call
    prompt = chat.render_jinja(generic_messages(messages, setup))
    g = generate(llm, prompt, grammar=setup.lazy_grammar(vocab), params=Params(seed=7, temp=0.7), n_predict=64)
    reply = parse_reply(g.text, setup)
    print("model:", g.text.strip())
    assert reply.tool_calls and reply.parse_error is None, reply
    call = reply.tool_calls[0]
    print(f"tool call: {call.name}({call.arguments})  schema issues: {list(call.issues)}")
    result = get_weather(**json.loads(call.arguments))
    messages.append(reply.message())
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})

    # turn 2: the answer, from the tool's result
    setup2 = tool_call_setup(TOOLS, "none", fmt="generic")
    prompt = chat.render_jinja(generic_messages(messages, setup2))
    g2 = generate(llm, prompt, params=Params(seed=7, temp=0.3), n_predict=32, stop=["<|im_end|>"])
    print("final answer:", g2.text.strip())
    print("tool call valid against the schema:", not call.issues)
    llm.close()


if __name__ == "__main__":
    main()
