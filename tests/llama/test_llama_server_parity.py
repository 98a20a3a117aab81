"""constrained.llama.generate against the real llama-server (built from the same sources, oracle/llama_server.py)
started with its defaults and with other flag sets: the same token ids, text, n_probs probabilities and number of
cached prompt tokens for every `/completion` request (series of requests share prefixes with cache_prompt on).

Counts per model: 24 requests at the server's defaults + 4 for each of 5 other flag sets = 44 per model (see
oracle/cases/llama_server_parity.py); the bigger sweep is scripts/llama_server_parity_sweep.py.
"""

from __future__ import annotations

import pytest

from constrained.llama import load_model, smollm2_model_path
from constrained.llama.flags import parse_server_args
from constrained.vocab.gguf_meta import sampling_metadata
from oracle.cases.llama_server_parity import FLAG_SETS, run_series, series
from oracle.llama_server import LlamaServer
from sampler import Params

MODELS = ["gemma3-270m", "smollm2-135m"]


@pytest.fixture(scope="module")
def model_paths(default_model_path: str) -> dict[str, str]:
    return {"gemma3-270m": default_model_path, "smollm2-135m": smollm2_model_path()}


@pytest.mark.parametrize("flag_set", list(FLAG_SETS))
@pytest.mark.parametrize("model", MODELS)
def test_same_tokens_as_llama_server(model: str, flag_set: str, model_paths: dict[str, str]) -> None:
    path = model_paths[model]
    flags = [*FLAG_SETS[flag_set], "-t", "1"]   # one thread in both: the suite's speed; same sums on both sides
    args = parse_server_args(flags)
    llm = load_model(path, args)
    base = Params.from_gguf(sampling_metadata(path), base=args.sampling, user_set=args.sampling_user_set)
    n = 0
    bad = []
    try:
        with LlamaServer(["-m", path, *flags]) as srv:
            for bodies in series()[flag_set]:
                for body, diffs in run_series(srv, llm, base, bodies):
                    n += 1
                    if diffs:
                        bad.append((body, diffs))
    finally:
        llm.close()
    assert n >= 4
    assert not bad, f"{len(bad)} of {n} requests differ ({model}, {flag_set}): {bad[:3]}"


def test_n_predict_zero_gives_one_token(default_model_path: str) -> None:
    """llama-server checks the budget after a token is drawn: n_predict 0 still gives one token; -2 is refused
    with the same message."""
    from constrained.llama import generate
    flags = ["-c", "512", "-t", "1"]
    args = parse_server_args(flags)
    llm = load_model(default_model_path, args)
    base = Params.from_gguf(sampling_metadata(default_model_path), base=args.sampling, user_set=args.sampling_user_set)
    bodies = [{"prompt": "Hello", "n_predict": 0, "temperature": 0},
              {"prompt": "Hello there, friend", "n_predict": 1, "seed": 2, "n_probs": 2}]
    try:
        with LlamaServer(["-m", default_model_path, *flags]) as srv:
            res = run_series(srv, llm, base, bodies)
            refused = srv.post("/completion", {"prompt": "Hello", "n_predict": -2})
            with pytest.raises(ValueError) as ei:
                generate(llm, "Hello", n_predict=-2)
    finally:
        llm.close()
    assert [d for _, d in res] == [[], []]
    assert refused["error"]["code"] == 400 and refused["error"]["message"] == str(ei.value)
