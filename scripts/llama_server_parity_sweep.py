"""The bigger sweep behind tests/llama/test_llama_server_parity.py: every flag set, both models, longer generations
(``--scale``) and random sampler settings, against the real llama-server. Prints counts per model and flag set.

Run: nice -n 10 .venv/bin/python scripts/llama_server_parity_sweep.py [--scale 3] [--random 20] [--models gemma3-270m]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from constrained.llama import default_model_path, load_model, smollm2_model_path  # noqa: E402
from constrained.llama.flags import parse_server_args  # noqa: E402
from constrained.vocab.gguf_meta import sampling_metadata  # noqa: E402
from oracle.cases.llama_server_parity import FLAG_SETS, PARA, PERSON, run_series, series  # noqa: E402
from oracle.llama_server import LlamaServer  # noqa: E402
from sampler import Params  # noqa: E402


def random_series(rng: random.Random, n: int) -> list[dict]:
    out = []
    prefix = "Tell me about " + rng.choice(["cats", "the sea", "numbers", "Paris"])
    for i in range(n):
        body = {"prompt": prefix + " " * (i % 3) + PARA * rng.choice([0, 0, 1, 4]), "n_predict": rng.randint(1, 12),
                "seed": rng.randint(0, 2**31), "temperature": rng.choice([0, 0.3, 0.8, 1.0, 1.5]),
                "top_k": rng.choice([0, 1, 5, 40]), "top_p": rng.choice([1.0, 0.9, 0.5]),
                "min_p": rng.choice([0.0, 0.05, 0.2]), "repeat_penalty": rng.choice([1.0, 1.1]),
                "dry_multiplier": rng.choice([0.0, 0.0, 0.8]), "xtc_probability": rng.choice([0.0, 0.5]),
                "n_probs": rng.choice([0, 0, 3]), "cache_prompt": rng.random() < 0.8}
        if rng.random() < 0.2:
            body.update(json_schema=PERSON, n_predict=32)
        out.append(body)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=3)
    ap.add_argument("--random", type=int, default=20)
    ap.add_argument("--models", nargs="*", default=["gemma3-270m", "smollm2-135m"])
    a = ap.parse_args()
    paths = {"gemma3-270m": default_model_path, "smollm2-135m": smollm2_model_path}
    rng = random.Random(0)
    total_bad = 0
    for model in a.models:
        path = paths[model]()
        for name, flags in FLAG_SETS.items():
            args = parse_server_args(flags)
            llm = load_model(path, args)
            base = Params.from_gguf(sampling_metadata(path), base=args.sampling, user_set=args.sampling_user_set)
            todo = series(a.scale)[name] + [random_series(rng, a.random)]
            n = bad = 0
            with LlamaServer(["-m", path, *flags]) as srv:
                for bodies in todo:
                    for body, diffs in run_series(srv, llm, base, bodies):
                        n += 1
                        if diffs:
                            bad += 1
                            print(f"  DIFF {model} {name}: {diffs[0][:300]}  body={str(body)[:200]}")
            llm.close()
            total_bad += bad
            print(f"{model:14} {name:22} {n - bad}/{n} identical", flush=True)
    sys.exit(1 if total_bad else 0)


if __name__ == "__main__":
    main()
