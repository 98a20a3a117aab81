"""Tokens per second of ``constrained.llama.generate`` with a JSON schema vs the real llama-server's ``/completion``.

One run on the default model: llama-server (built from the same sources, oracle/llama_server.py) at its
defaults and our ``load_model`` with the same (default) flags get the same schema-constrained requests; the tokens
must be identical (the run stops otherwise). Prompt speed: prompt tokens evaluated / prompt time (llama-server's
``timings.prompt_per_second``; ours: tokenizing, sampler set-up and prompt decoding). Generation speed: generated
tokens / generation time (llama-server's ``timings.predicted_per_second``; ours: forward steps + sampling + grammar).
Requests are sent with ``cache_prompt: false`` so both evaluate the whole prompt every time.

Run: .venv/bin/python benchmarks/bench_server_generate.py [--runs N] [--n-predict N]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from constrained.llama import default_model_path, generate, load_model, vocabulary_of  # noqa: E402
from constrained.llama.flags import parse_server_args  # noqa: E402
from constrained.vocab.gguf_meta import sampling_metadata  # noqa: E402
from oracle.llama_server import LlamaServer, completion  # noqa: E402
from sampler import Params  # noqa: E402

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer"},
                                      "email": {"type": "string"}}, "required": ["name", "age", "email"]},
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"},
                                                                   "tags": {"type": "array", "items": {"type": "string"}}},
                                "required": ["id", "tags"]}, "maxItems": 4},
    {"type": "object", "additionalProperties": {"type": "string"}},
]
PROMPT = ("You extract records. Reply with JSON only.\nText: Maria Lopez, 34, can be reached at maria@example.com; "
          "she works on billing and support tickets.\nRecord as JSON:\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=64)
    a = ap.parse_args()
    path = default_model_path()
    args = parse_server_args([])
    llm = load_model(path, args)
    base = Params.from_gguf(sampling_metadata(path), base=args.sampling, user_set=args.sampling_user_set)
    ours = {"pp_n": 0, "pp_s": 0.0, "tg_n": 0, "tg_s": 0.0}
    srv_t = {"pp_n": 0, "pp_s": 0.0, "tg_n": 0, "tg_s": 0.0}
    load0 = os.getloadavg()[0]
    with LlamaServer(["-m", path]) as srv:
        completion(srv, {"prompt": "warm up", "n_predict": 2})
        for si, schema in enumerate(SCHEMAS):
            for seed in range(a.runs):
                body = {"prompt": PROMPT, "json_schema": schema, "n_predict": a.n_predict, "seed": seed,
                        "temperature": 1.0, "cache_prompt": False}
                r = completion(srv, body)
                t = r["timings"]
                srv_t["pp_n"] += t["prompt_n"]
                srv_t["pp_s"] += t["prompt_ms"] / 1000
                srv_t["tg_n"] += t["predicted_n"]
                srv_t["tg_s"] += t["predicted_ms"] / 1000
                p = Params.from_request(body, vocabulary_of(llm), base=base)
                g = generate(llm, PROMPT, schema=schema, params=p, n_predict=a.n_predict, cache_prompt=False)
                st = r["tokens"][:len(g.tokens)] if g.stop_reason == "grammar" else r["tokens"]
                if st != g.tokens:
                    raise SystemExit(f"tokens differ (schema {si}, seed {seed}): {r['tokens']} vs {g.tokens}")
                ours["pp_n"] += len(g.prompt_tokens) - g.n_cached
                ours["pp_s"] += g.timings["prompt_s"]
                ours["tg_n"] += len(g.tokens)
                ours["tg_s"] += g.timings["forward_s"] + g.timings["sampling_s"]
    load1 = os.getloadavg()[0]
    print(f"default model, {len(SCHEMAS) * a.runs} schema requests, identical tokens; load avg {load0:.2f} -> "
          f"{load1:.2f} (2 cores)")
    print(f"{'':28} {'prompt tok/s':>13} {'generation tok/s':>17}")
    for name, d in (("llama-server /completion", srv_t), ("constrained generate", ours)):
        print(f"{name:28} {d['pp_n'] / d['pp_s']:13.1f} {d['tg_n'] / d['tg_s']:17.2f}")
    pp = (ours["pp_n"] / ours["pp_s"]) / (srv_t["pp_n"] / srv_t["pp_s"])
    tg = (ours["tg_n"] / ours["tg_s"]) / (srv_t["tg_n"] / srv_t["tg_s"])
    print(f"ratio ours / llama-server: prompt {pp:.2f}x, generation {tg:.2f}x (goal >= 0.9x)")


if __name__ == "__main__":
    main()
