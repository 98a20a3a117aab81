"""transformers ``generate`` on SmolLM2-135M with :class:`constrained.integrations.hf.GrammarLogitsProcessor`: every generated
token is replayed through llama.cpp's own grammar sampler (``llama_sampler_init_grammar`` on the model's GGUF
vocabulary), which must accept it, and end-of-generation must come only where llama.cpp's grammar allows it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
from constrained.grammars import load
from transformers import AutoModelForCausalLM, AutoTokenizer

from constrained import Grammar
from constrained.integrations.constraint import GrammarRejectedToken
from constrained.integrations.hf import GrammarLogitsProcessor
from oracle.llama import CGrammar, vocab_model

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer",
          "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def hf(smollm2_hf: Path):
    torch.set_num_threads(1)          # spinning intra-op threads crawl on a shared, loaded 2-core machine
    tok = AutoTokenizer.from_pretrained(str(smollm2_hf))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_hf), dtype=torch.float32)
    model.eval()
    return tok, model


def _gbnf_of(spec) -> str:  # noqa: ANN001
    return Grammar.from_json_schema(spec).to_gbnf() if isinstance(spec, dict) else spec


def _replay(vm, gbnf: str, gen: list[int]) -> tuple[list[int], bool]:  # noqa: ANN001
    """Feed ``gen`` to llama.cpp's grammar sampler up to the first end-of-generation token; returns the body and
    whether generation ended there (EOG allowed by llama.cpp at that point)."""
    with CGrammar(vm, gbnf) as g:
        for k, t in enumerate(gen):
            if vm.is_eog(t):
                assert g.allows(t), f"llama.cpp's grammar does not allow end-of-generation after {gen[:k]}"
                return gen[:k], True
            assert g.allows(t), f"llama.cpp's grammar rejects token {t} ({vm.piece(t)!r}) at {k}"
            g.accept(t)
    return gen, False


def test_generate_batch_with_grammars_per_row_accepted_by_llama_cpp(hf, smollm2_gguf: Path) -> None:  # noqa: ANN001
    tok, model = hf
    vm = vocab_model(smollm2_gguf)
    specs = [load("arithmetic"), 'root ::= ("yes" | "no") "."', SCHEMA]
    prompts = ["2 plus 3 times 4 is written as ", "Is the sky blue? Answer: ", "Bob is 42. As JSON: "]
    proc = GrammarLogitsProcessor(specs, tok)
    enc = tok(prompts, return_tensors="pt", padding=True)
    torch.manual_seed(0)
    out = model.generate(**enc, logits_processor=[proc], eos_token_id=proc.eos_token_id, do_sample=True,
                         temperature=0.8, max_new_tokens=24, pad_token_id=tok.pad_token_id)
    n_prompt = enc["input_ids"].shape[1]
    ended = 0
    for i, spec in enumerate(specs):
        body, done = _replay(vm, _gbnf_of(spec), out[i, n_prompt:].tolist())
        assert body, f"row {i} generated nothing"
        ended += done
        text = tok.decode(body)
        if i == 1:
            assert done and text in ("yes.", "no.")
        if i == 2 and done:
            jsonschema.validate(json.loads(text), SCHEMA)
    assert ended >= 2


def test_greedy_json_schema_ends_and_validates(hf, smollm2_gguf: Path) -> None:  # noqa: ANN001
    tok, model = hf
    vm = vocab_model(smollm2_gguf)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "maximum": 9,
              "minimum": 0}}, "required": ["ok", "n"], "additionalProperties": False}
    proc = GrammarLogitsProcessor(schema, tok)
    enc = tok(["Answer in JSON: "], return_tensors="pt")
    out = model.generate(**enc, logits_processor=[proc], eos_token_id=proc.eos_token_id, do_sample=False,
                         max_new_tokens=24, pad_token_id=tok.pad_token_id)
    body, done = _replay(vm, _gbnf_of(schema), out[0, enc["input_ids"].shape[1]:].tolist())
    assert done
    jsonschema.validate(json.loads(tok.decode(body)), schema)


def test_a_token_outside_the_grammar_is_an_error(hf) -> None:  # noqa: ANN001
    tok, _ = hf
    proc = GrammarLogitsProcessor('root ::= "a"+', tok)
    scores = torch.zeros(1, 49152)
    proc(torch.tensor([[5, 6]]), scores)
    assert torch.isfinite(scores).sum() > 0 and not torch.isfinite(scores[0, tok.encode("b")[0]])
    with pytest.raises(GrammarRejectedToken):
        proc(torch.tensor([[5, 6, tok.encode("b")[0]]]), torch.zeros(1, 49152))
