"""vLLM's V1 logits-processor path with :class:`constrained.integrations.vllm.ConstrainedLogitsProcessor` (opt-in per request):
parity mode's tokens, drawn by our llama-server chain on vLLM's logits, are exactly what vLLM emits and exactly what
llama-server's own ``common_sampler_sample`` (the C++ shim) draws from the same logits rows with the same seed and
grammar; the mask-only mode's output is accepted by llama.cpp's grammar sampler; other requests run unconstrained."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"     # the logits processor in this process: its draws are read

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402

from constrained import Grammar  # noqa: E402
from constrained.integrations.vllm import ConstrainedLogitsProcessor  # noqa: E402
from oracle.llama import vocab_model  # noqa: E402
from sampler import Params  # noqa: E402
from tests.scale.vllm_support import ENGINE, check_json, replay  # noqa: E402

POINT = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
         "required": ["x", "y"], "additionalProperties": False}
PARITY = [  # (prompt, constrained options, llama-server sampling fields)
    ("Compute 12*7 = ", {"grammar": "arithmetic"}, {"temperature": 0.8, "top_k": 40, "seed": 7}),
    ("The point (3, 4) as JSON: ", {"json_schema": POINT},
     {"temperature": 1.0, "top_p": 0.9, "min_p": 0.05, "seed": 3, "repeat_penalty": 1.1}),
    ("Say yes or no: ", {"gbnf": 'root ::= ("yes" | "no") "."'}, {"temperature": 1.5, "seed": 11}),
]


@pytest.fixture(scope="module")
def llm(smollm2_hf: Path) -> LLM:
    ConstrainedLogitsProcessor.record_rows = True
    yield LLM(model=str(smollm2_hf), logits_processors=[ConstrainedLogitsProcessor], **ENGINE)
    ConstrainedLogitsProcessor.record_rows = False


def _body(opts: dict, parity: dict | None) -> dict:
    return {"constrained": dict(opts, **({"parity": parity} if parity is not None else {}))}


def test_parity_mode_equals_llama_server_sampling_on_vllm_logits(llm: LLM, smollm2_gguf: Path) -> None:
    from oracle.server import GRAMMAR_USER, InjectedLogits, ServerSampler, load_model

    ConstrainedLogitsProcessor.requests.clear()
    params = [SamplingParams(max_tokens=16, temperature=1.0, seed=1, extra_args=_body(o, p)) for _, o, p in PARITY]
    params.append(SamplingParams(max_tokens=12, temperature=0.8, seed=2,
                                 extra_args=_body({"gbnf": 'root ::= [a-z]+ (" " [a-z]+)*'}, None)))
    params.append(SamplingParams(max_tokens=8, temperature=0.8, seed=3))           # not opted in
    prompts = [p for p, _, _ in PARITY] + ["Some words: ", "Hello"]
    outs = llm.generate(prompts, params)
    vm = vocab_model(smollm2_gguf)
    reqs = [r for r in ConstrainedLogitsProcessor.requests if r.sampler is not None]
    assert len(reqs) == len(PARITY)
    model = load_model(smollm2_gguf)
    ctx = InjectedLogits(model)
    compared = 0
    try:
        for (prompt, opts, body), o in zip(PARITY, outs, strict=False):
            ids = list(o.outputs[0].token_ids)
            req = next(r for r in reqs if r.drawn == ids)      # vLLM emitted exactly the tokens our chain drew
            grammar = (Grammar.from_name(opts["grammar"]) if "grammar" in opts else
                       Grammar.from_json_schema(opts["json_schema"]) if "json_schema" in opts else
                       Grammar.from_gbnf(opts["gbnf"]))
            real = ServerSampler(model, Params.from_request(body), grammar=grammar.to_gbnf(),
                                 grammar_type=GRAMMAR_USER)
            try:
                for t in o.prompt_token_ids:                   # llama-server accepts the prompt first
                    real.accept(t, False)
                for k, row in enumerate(req.rows):
                    ctx.write(row)
                    tok = real.sample(ctx.ctx)
                    assert tok == ids[k], f"{prompt!r}: step {k}: llama-server draws {tok}, vLLM emitted {ids[k]}"
                    compared += 1
                    if vm.is_eog(tok):
                        break
                    real.accept(tok, True)
            finally:
                real.free()
            body_ids = replay(vm, grammar.to_gbnf(), ids, o.outputs[0].finish_reason)
            if "json_schema" in opts and o.outputs[0].finish_reason == "stop":
                check_json(o.outputs[0].text, opts["json_schema"])
            assert body_ids
    finally:
        ctx.free()
    assert compared >= 16
    masked = outs[len(PARITY)].outputs[0]
    replay(vm, 'root ::= [a-z]+ (" " [a-z]+)*', list(masked.token_ids), masked.finish_reason)
    assert outs[-1].outputs[0].token_ids                         # the unconstrained request ran as usual


def test_bad_options_are_refused_per_request(llm: LLM) -> None:
    with pytest.raises(VLLMValidationError, match="expecting '\\)'") as err:  # HTTP 400 in vllm serve
        llm.generate(["x"], SamplingParams(max_tokens=2, extra_args=_body({"gbnf": 'root ::= "a" ('}, None)))
    assert "^" in str(err.value)
    with pytest.raises(VLLMValidationError, match="exactly one"):
        llm.generate(["x"], SamplingParams(max_tokens=2, extra_args={"constrained": {}}))
    ok = llm.generate(["Say yes or no: "], SamplingParams(max_tokens=6, temperature=0.5, seed=1,
                      extra_args=_body({"gbnf": 'root ::= ("yes" | "no") "."'}, None)))
    assert ok[0].outputs[0].text in ("yes.", "no.")


def test_mask_mode_ends_on_vllms_own_eos_only(llm: LLM) -> None:
    """The issue's run: where the grammar can end, llama.cpp allows every end-of-generation id (0, 2 and 4 on
    SmolLM2) but vLLM stops on its EOS (2) only; drawing 0 or 4 then forced a second end token ('urn.' ->
    [667, 30, 0, 2]). Mask mode now allows only what vLLM stops on there."""
    gbnf = 'root ::= [a-z]+ (", " [a-z]+){0,3} "."'
    ConstrainedLogitsProcessor.requests.clear()
    outs = llm.generate(["Colours: ", "Hello"],
                        [SamplingParams(max_tokens=24, temperature=0.8, seed=3, extra_args=_body({"gbnf": gbnf}, None)),
                         SamplingParams(max_tokens=8, temperature=0.8, seed=4)])
    ids = list(outs[0].outputs[0].token_ids)
    assert 0 not in ids and 4 not in ids, ids
    if outs[0].outputs[0].finish_reason == "stop":
        assert outs[0].outputs[0].text.endswith(".")
    req = ConstrainedLogitsProcessor.requests[-1]
    fresh = Grammar.from_gbnf(gbnf).matcher(req.c.vocab)
    assert fresh.accept_bytes(b"red.") and fresh.can_end()
    assert fresh.mask()[[0, 2, 4]].tolist() == [True, True, True]        # llama.cpp's own grammar mask
    from constrained.integrations.constraint import SequenceConstraint

    c = SequenceConstraint(Grammar.from_gbnf(gbnf), req.c.vocab, stop_ids=req.c.stop_ids, only_stop_ids=True)
    c.sync(req.c.vocab.tokenize("red."))
    assert c.can_end and sorted(set(c.allowed_ids()) & {0, 2, 4}) == [2]


def test_regex_choice_and_structural_tag_options(llm: LLM) -> None:
    import re

    from constrained.vocab import Vocabulary

    obj = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    tag = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<n"], "at_least_one": True,
                                                 "stop_after_first": True,
                                                 "tags": [{"type": "tag", "begin": "<n>", "end": "</n>",
                                                           "content": {"type": "json_schema", "json_schema": obj}}]}}
    opts = [{"regex": r"[A-Z][a-z]{2,6} \d{1,2}"}, {"choice": ["alpha", "beta", "gamma"]}, {"structural_tag": tag}]
    outs = llm.generate(["Month and day: ", "Pick one: ", "A number as <n>: "],
                        [SamplingParams(max_tokens=20, temperature=0.7, seed=i, extra_args=_body(o, None))
                         for i, o in enumerate(opts)])
    texts = [o.outputs[0].text for o in outs]
    if outs[0].outputs[0].finish_reason == "stop":
        assert re.fullmatch(r"[A-Z][a-z]{2,6} \d{1,2}", texts[0]), texts[0]
    assert texts[1] in ("alpha", "beta", "gamma"), texts[1]
    assert texts[2].startswith("<n>{"), texts[2]
    g = Grammar.from_structural_tag(tag)
    m = g.matcher(Vocabulary([bytes([i]) for i in range(256)]))
    assert m.accept_bytes(texts[2].encode())
    with pytest.raises(VLLMValidationError, match="lookaround"):
        llm.generate(["x"], SamplingParams(max_tokens=2, extra_args=_body({"regex": "(?=a)"}, None)))
