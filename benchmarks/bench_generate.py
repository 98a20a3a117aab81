"""Sampling + grammar cost per token, as a share of the model's forward step, ours vs llama-server's.

On the default model, the same schema-constrained generations (same prompts, seeds, parameters) run twice:
with our ``generate_stream`` (sampler chain + grammar matcher, with llama-server's rejection and redraw), and with
llama-server's own ``common_sampler_sample`` + ``common_sampler_accept`` (through our C++ shim) on the same logits.
Both produce the same tokens (tests/llama/test_generate_oracle.py proves it), so they do the same work.

Run: .venv/bin/python benchmarks/bench_generate.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

import numpy as np  # noqa: E402

from constrained.llama.generation import Generation, generate_stream, resolve_grammar  # noqa: E402
from constrained.llama.model import load_default_model  # noqa: E402
from oracle.server import GRAMMAR_OUTPUT_FORMAT, ServerSampler  # noqa: E402
from sampler import Params  # noqa: E402

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer"},
                                      "email": {"type": "string", "format": "uuid"}}, "required": ["name", "age"]},
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"},
                                                                   "tags": {"type": "array", "items": {"type": "string"}}},
                                "required": ["id", "tags"]}, "maxItems": 4},
    {"type": "object", "additionalProperties": {"type": "string"}},
]
PROMPT = "Here is the record as JSON:\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=96)
    args = ap.parse_args()
    llm = load_default_model()
    ours_s = forward_s = 0.0
    ours_n = 0
    c_s = 0.0
    c_n = 0
    redraws = 0
    for si, schema in enumerate(SCHEMAS):
        gbnf = resolve_grammar(None, schema, False).source
        for seed in range(args.runs):
            params = Params(seed=seed, temp=1.0)
            res = Generation("", [], [], "", [], {})
            list(generate_stream(llm, PROMPT, schema=schema, params=params, n_predict=args.n_predict, result=res))
            ours_s += res.timings["sampling_s"]
            forward_s += res.timings["forward_s"]
            ours_n += len(res.tokens)
            redraws += res.n_redraws
            # llama-server's own sampling on the same logits: replay the same tokens through the model
            real = ServerSampler(llm._model.model, params, grammar=gbnf, grammar_type=GRAMMAR_OUTPUT_FORMAT)
            for t in res.prompt_tokens:
                real.accept(t, False)
            llm.reset()
            llm.eval(res.prompt_tokens)
            for i, tok in enumerate(res.tokens):
                t0 = time.perf_counter()
                got = real.sample(llm.ctx)
                real.accept(got, True)
                c_s += time.perf_counter() - t0
                c_n += 1
                if got != tok:
                    raise SystemExit(f"token mismatch at schema {si} seed {seed} step {i}: {got} != {tok}")
                if i + 1 < len(res.tokens):
                    llm.eval([tok])
            real.free()
    fwd = forward_s / max(1, ours_n - len(SCHEMAS) * args.runs)
    ours = ours_s / ours_n
    c = c_s / c_n
    load = os.getloadavg()[0]
    print(f"default model, vocabulary {llm.n_vocab()}, {ours_n} tokens ({redraws} redrawn), load avg {load:.2f}")
    print(f"{'':32} {'ms/token':>9} {'share of forward':>17}")
    print(f"{'forward step (llama.cpp)':32} {1000 * fwd:9.2f}")
    print(f"{'ours: sampling + grammar':32} {1000 * ours:9.2f} {ours / fwd:16.1%}")
    print(f"{'llama-server common_sampler':32} {1000 * c:9.2f} {c / fwd:16.1%}")
    print(f"ratio ours / llama-server: {ours / c:.2f}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
