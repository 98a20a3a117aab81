"""llama-cpp-python's high-level API with :func:`constrained.integrations.llama_processor.grammar_logits_processor` on the
default model: the completion's token ids (read back from the context) are replayed through llama.cpp's own grammar
sampler, which accepts every one and allows end-of-generation where the completion stopped."""

from __future__ import annotations

import json

import jsonschema
import pytest
from constrained.grammars import load

from constrained import Grammar
from constrained.integrations.llama_processor import GrammarLogitsProcessor, grammar_logits_processor
from oracle.llama import CGrammar, vocab_model

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "rank": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["city", "rank"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llm(default_model_path: str):
    from llama_cpp import Llama

    return Llama(default_model_path, n_ctx=512, n_batch=64, n_threads=1, seed=3, verbose=False)


def _replay(vm, gbnf: str, ids: list[int], stopped: bool) -> None:  # noqa: ANN001
    with CGrammar(vm, gbnf) as g:
        for k, t in enumerate(ids):
            assert g.allows(t), f"llama.cpp's grammar rejects token {t} ({vm.piece(t)!r}) at {k}"
            g.accept(t)
        if stopped:
            eog = [t for t in range(vm.n_vocab) if vm.is_eog(t)]
            assert any(g.allows(t) for t in eog), "stopped where llama.cpp's grammar cannot end"


def _completion_ids(llm, n_prompt: int) -> list[int]:  # noqa: ANN001
    return [int(t) for t in llm._input_ids[n_prompt:llm.n_tokens]]


@pytest.mark.parametrize("spec,prompt", [
    (SCHEMA, "The best city to visit, as JSON: "),
    (load("arithmetic"), "Twelve times seven, as a formula: "),
    ('root ::= ("red" | "green" | "blue") "!"', "My favourite colour: "),
], ids=["schema", "arithmetic", "choice"])
def test_create_completion_is_accepted_by_llama_cpp(llm, default_model_path: str, spec, prompt: str) -> None:  # noqa: ANN001
    vm = vocab_model(default_model_path)
    proc = grammar_logits_processor(llm, spec)
    n_prompt = len(llm.tokenize(prompt.encode()))
    out = llm.create_completion(prompt, max_tokens=24, temperature=0.8, seed=11, logits_processor=proc)
    choice = out["choices"][0]
    ids = _completion_ids(llm, n_prompt)
    stopped = choice["finish_reason"] == "stop"
    if not stopped:              # the last sampled token was not evaluated; the processor saw every earlier one
        ids = proc[0].generated
    assert ids[:len(proc[0].generated)] == proc[0].generated[:len(ids)]
    gbnf = Grammar.from_json_schema(spec).to_gbnf() if isinstance(spec, dict) else spec
    _replay(vm, gbnf, ids, stopped)
    if isinstance(spec, dict) and stopped:
        jsonschema.validate(json.loads(choice["text"]), spec)
    if spec.__class__ is str and spec.startswith("root ::= ("):
        assert stopped and choice["text"] in ("red!", "green!", "blue!")


def test_create_chat_completion_with_a_schema(llm, default_model_path: str) -> None:  # noqa: ANN001
    proc = GrammarLogitsProcessor(SCHEMA, llm)
    out = llm.create_chat_completion([{"role": "user", "content": "Name a city and rank it 1-9, as JSON."}],
                                     max_tokens=36, temperature=0.0, logits_processor=[proc])
    msg = out["choices"][0]
    assert msg["finish_reason"] == "stop"
    jsonschema.validate(json.loads(msg["message"]["content"]), SCHEMA)
    _replay(vocab_model(default_model_path), Grammar.from_json_schema(SCHEMA).to_gbnf(), proc.generated, True)
