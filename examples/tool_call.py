"""A tool call: the model picks one tool from a list and fills its arguments, as an agent would execute it.

The schema is an ``anyOf`` over the tools, each a closed object with the tool's name as a ``const``: whatever the
model samples, the result names a real tool and has exactly that tool's arguments.

Run: python examples/tool_call.py
"""

from __future__ import annotations

import json

from constrained.llama import generate, load_default_model
from sampler import Params

TOOLS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city", "unit"]},
    "send_email": {"type": "object", "properties": {"to": {"type": "string", "maxLength": 40},
                                                     "subject": {"type": "string", "maxLength": 60}},
                   "required": ["to", "subject"]},
    "set_timer": {"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1, "maximum": 600}},
                  "required": ["minutes"]},
}

SCHEMA = {"anyOf": [{"type": "object", "properties": {"tool": {"const": name}, "arguments": args},
                     "required": ["tool", "arguments"]} for name, args in TOOLS.items()]}

PROMPT = """Choose a tool and its arguments for the user's request. Tools: get_weather(city, unit), send_email(to, subject), set_timer(minutes).

User: remind me in 20 minutes that the pasta is ready
Call: {"tool": "set_timer", "arguments": {"minutes": 20}}

User: email bob@example.com that the meeting moved to Friday
Call: {"tool": "send_email", "arguments": {"to": "bob@example.com", "subject": "Meeting moved to Friday"}}

User: is it going to be cold in Berlin? give me fahrenheit
Call: {"tool": "get_weather", "arguments": {"city": "Berlin", "unit": "fahrenheit"}}

User: what's the weather like in Paris today, in celsius?
Call: """


def execute(call: dict) -> str:
    name, args = call["tool"], call["arguments"]
    if name == "get_weather":
        return f"(would fetch the weather for {args['city']} in {args['unit']})"
    if name == "send_email":
        return f"(would email {args['to']}: {args['subject']!r})"
    return f"(would set a timer for {args['minutes']} minutes)"


def main() -> None:
    llm = load_default_model()
    r = generate(llm, PROMPT, schema=SCHEMA, params=Params(seed=3, temp=0.5), n_predict=96)
    call = r.json
    print("call:", json.dumps(call))
    print(f"valid against the schema: {r.valid} ({len(r.tokens)} tokens, {r.n_redraws} redrawn)")
    print("execute:", execute(call))
    if not r.valid:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
