"""A schema-validated API response: the model answers a request in the exact shape an API promises.

Run: python examples/api_response.py
"""

from __future__ import annotations

import json

from constrained.llama import generate, load_default_model
from sampler import Params

RESPONSE_SCHEMA = {
    "type": "object",
    "properties": {
        "status": {"enum": ["ok", "not_found", "error"]},
        "city": {"type": "string", "maxLength": 30},
        "forecast": {
            "type": "array",
            "minItems": 3,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "day": {"enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]},
                    "condition": {"enum": ["sunny", "cloudy", "rain", "snow", "storm"]},
                    "high_c": {"type": "integer", "minimum": -50, "maximum": 60},
                },
                "required": ["day", "condition", "high_c"],
            },
        },
    },
    "required": ["status", "city", "forecast"],
}

PROMPT = """You are a weather API. Answer every request with a JSON response.

Request: GET /forecast?city=Oslo&days=3
Response: """


def main() -> None:
    llm = load_default_model()
    r = generate(llm, PROMPT, schema=RESPONSE_SCHEMA, params=Params(seed=7, temp=0.7), n_predict=160)
    print(json.dumps(r.json, indent=2))
    print(f"valid against the schema: {r.valid} ({len(r.tokens)} tokens, {r.n_redraws} redrawn)")
    if not r.valid:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
