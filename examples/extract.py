"""Structured extraction: pull the facts of a paragraph into a JSON schema, with the default model.

Run: python examples/extract.py   (or `make demo`)
"""

from __future__ import annotations

import json

from constrained.llama import generate, load_default_model
from sampler import Params

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"type": "string", "maxLength": 40},
        "occupation": {"type": "string", "maxLength": 40},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
    },
    "required": ["name", "age", "city", "occupation", "languages"],
}

PARAGRAPH = ("Marta Kowalski, 34, moved to Lisbon three years ago to work as a marine biologist. "
             "She speaks Polish, Portuguese and English, and spends her weekends diving.")

PROMPT = f"""Extract the person described in the text as JSON.

Text: Tom Baker is a 52-year-old carpenter from Leeds who speaks English and a little French.
JSON: {{"name": "Tom Baker", "age": 52, "city": "Leeds", "occupation": "carpenter", "languages": ["English", "French"]}}

Text: {PARAGRAPH}
JSON: """


def main() -> None:
    llm = load_default_model()
    r = generate(llm, PROMPT, schema=SCHEMA, params=Params(seed=1234, temp=0.3), n_predict=128)
    print("text:     ", PARAGRAPH)
    print("extracted:", json.dumps(r.json, ensure_ascii=False))
    print(f"valid against the schema: {r.valid}; {len(r.tokens)} tokens, {r.n_redraws} redrawn by the grammar, "
          f"stop: {r.stop_reason}")
    if not r.valid:
        for issue in r.schema_issues:
            print("  issue:", issue)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
