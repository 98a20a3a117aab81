"""Helper of ``bench_json_schema_enforce.py``, run by the llguidance venv's Python (llguidance is not a dependency
of this project): compile each JSON schema of a file with llguidance and print, as JSON, per schema ``[seconds, ok, warned]`` in
llguidance's default (strict: a keyword it does not implement refuses the schema) then in ``lenient`` mode (such
keywords ignored, with a warning). Compile = ``LLMatcher.grammar_from_json_schema`` + ``LLMatcher.validate_grammar_with_warnings`` (the grammar
and its lexer built, no tokenizer: the same work as our ``convert_json_schema``, which has no vocabulary either).

    .venv-vllm/bin/python benchmarks/_llguidance_compile.py schemas.json
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from llguidance import LLMatcher

    schemas = json.loads(open(sys.argv[1], encoding="utf-8").read())
    out = []
    for s in schemas:
        row: list = []
        for overrides in (None, {"lenient": True}):
            t = time.perf_counter()
            try:
                g = LLMatcher.grammar_from_json_schema(s, overrides=overrides)
                is_error, msgs = LLMatcher.validate_grammar_with_warnings(g)
                ok = not is_error
            except Exception:  # noqa: BLE001 - refused: counted as not compiled
                ok, msgs = False, []
            row += [time.perf_counter() - t, ok, bool(msgs)]
        out.append(row)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
