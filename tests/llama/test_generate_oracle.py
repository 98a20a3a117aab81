"""Generation parity: our generate_stream against llama-server's own sampling, step by step, on the default model.

At every step the same logits (the model's own, in the one shared context) go to llama-server's real
``common_sampler_sample`` (through our C++ shim) and to its proven emulation (which also tells where llama.cpp
redrew); our generator's token and redraw flag must equal theirs.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from oracle.llama import CGrammar

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 500}, "minItems": 1, "maxItems": 6},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}}}},
    {"enum": ["red", "green", "blue", {"rgb": [1, 2, 3]}]},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"}, "id": {"type": "string", "format": "uuid"}}, "required": ["when"]},
    {"type": "string", "pattern": "^[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?$"},
    {"type": "object", "additionalProperties": {"type": "number"}},
    {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}]},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]}}, "required": ["v", "next"]}}, "$ref": "#/$defs/node"},
    {},
]
PROMPTS = ["Here is the data as JSON:\n", "JSON output: ", "<start_of_turn>user\nGive me JSON.<end_of_turn>\n<start_of_turn>model\n"]
TEMPS = [0.0, 0.4, 0.8, 1.2, 1.5]
EXTRA = [dict(), dict(penalty_repeat=1.2, penalty_last_n=32, penalty_present=0.3),
         dict(dry_multiplier=0.8, dry_allowed_length=2), dict(xtc_probability=0.5, xtc_threshold=0.1),
         dict(top_k=0, top_p=1.0, min_p=0.0)]
# seeds per schema: 2 in the suite, 48 tokens each (each run costs llama.cpp's full-vocabulary grammar passes per
# token); CONSTRAINED_FULL=1 runs the 5 of the full sweep, 64 tokens each. The temperature and the sampler extras
# rotate with the schema and the seed so that the suite's 22 runs meet every temperature and every extra (penalties,
# DRY, XTC, the top-k/top-p/min-p off) with several schemas each
FULL = os.environ.get("CONSTRAINED_FULL") == "1"
SEEDS = 5 if FULL else 2
N_TOKENS = 64 if FULL else 48


@pytest.fixture(scope="module")
def llm(default_model_path):
    from constrained.llama import load_model

    m = load_model(default_model_path, n_ctx=512)
    yield m
    m.close()


def _run(llm, schema, prompt, params, totals) -> None:
    from constrained.llama.generation import Generation, generate_stream, resolve_grammar
    from oracle.server import (
        GRAMMAR_OUTPUT_FORMAT,
        EmulatedServerSampler,
        ServerSampler,
        vocab_model_of,
    )

    gbnf = str(resolve_grammar(None, schema, False).source)
    model = llm._model.model
    vm = vocab_model_of(model, llm.model_path)
    real = ServerSampler(model, params, grammar=gbnf, grammar_type=GRAMMAR_OUTPUT_FORMAT)
    plain = ServerSampler(model, params)
    emu = EmulatedServerSampler(plain.chain, CGrammar(vm, gbnf), llm.n_vocab())
    res = Generation("", [], [], "", [], {})
    started = False
    try:
        for ev in generate_stream(llm, prompt, schema=schema, params=params, n_predict=N_TOKENS, result=res):
            if not started:
                for t in res.prompt_tokens:
                    real.accept(t, False)
                    emu.accept(t, False)
                started = True
            logits = np.ctypeslib.as_array(
                __import__("llama_cpp").llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),)).copy()
            tok_real = real.sample(llm.ctx)
            tok_emu, redrawn = emu.sample(logits)
            assert tok_emu == tok_real
            assert ev.token == tok_real, f"step {ev.index}: ours {ev.token}, llama-server {tok_real}"
            assert ev.redrawn == redrawn, f"step {ev.index}: redraw ours {ev.redrawn}, llama-server {redrawn}"
            real.accept(tok_real, True)
            emu.accept(tok_emu, True)
            totals["tokens"] += 1
            totals["redraws"] += redrawn
    finally:
        real.free()
        plain.free()
    totals["runs"] += 1
    if res.stop_reason in ("grammar", "eos") and schema:
        json.loads(res.text)  # complete documents parse


def _params(seed: int, temp: float, extra: dict):
    from sampler import Params

    return Params(seed=seed, temp=temp, **extra)


@pytest.mark.parametrize("si", range(len(SCHEMAS)))
def test_generation_matches_llama_server(llm, si: int) -> None:
    totals = {"tokens": 0, "redraws": 0, "runs": 0}
    for k, seed in enumerate(range(SEEDS)):
        temp = TEMPS[(si + 2 * k) % len(TEMPS)]
        extra = EXTRA[(si + k) % len(EXTRA)]
        _run(llm, SCHEMAS[si], PROMPTS[(si + k) % len(PROMPTS)], _params(1000 * si + seed, temp, extra), totals)
    out = os.environ.get("CONSTRAINED_ORACLE_COUNTS")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"schema": si, **totals}) + "\n")
    assert totals["tokens"] >= 5


def test_generate_probs_match_llama_server(llm) -> None:
    """``n_probs``: at every generated position, the reported top tokens, their probabilities and the sampled token's
    probability are the 32-bit floats llama-server's get_token_probabilities computes from the same raw logits."""
    import llama_cpp

    from constrained.llama import generate_stream
    from oracle.sampler_cxx import server_token_probs
    from sampler import Params

    steps = 0
    for si, n_probs in ((0, 5), (2, 1), (6, 20)):
        params = Params(seed=11 + si, temp=0.9, n_probs=n_probs)
        for ev in generate_stream(llm, PROMPTS[si % len(PROMPTS)], schema=SCHEMAS[si], params=params, n_predict=24):
            logits = np.ctypeslib.as_array(llama_cpp.llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(llm.n_vocab(),)).copy()
            ids, ps = server_token_probs(logits, n_probs)
            assert [p.token for p in ev.probs] == ids[:n_probs].tolist()
            assert np.array_equal(np.array([p.prob for p in ev.probs], np.float32).view(np.uint32),
                                  ps[:n_probs].view(np.uint32))
            where = np.flatnonzero(ids == ev.token)[0]
            assert np.float32(ev.prob).view(np.uint32) == ps[where].view(np.uint32)
            steps += 1
    assert steps >= 10
