"""generate(): stop conditions, prompts as ids, bad input (the token-for-token parity is test_generate_oracle.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def llm(default_model_path):
    from constrained.llama import load_model

    m = load_model(default_model_path, n_ctx=256)
    yield m
    m.close()


def test_stop_string_cuts_the_text_at_the_earliest_match(llm) -> None:
    from constrained.llama import generate
    from sampler import Params

    free = generate(llm, "Count: one, two, three,", params=Params(seed=1, temp=0.0), n_predict=12)
    assert " five" in free.text and "six" in free.text
    r = generate(llm, "Count: one, two, three,", params=Params(seed=1, temp=0.0), n_predict=12,
                 stop=["six", " five"])
    assert r.stop_reason == "word" and r.stopping_word == " five"
    assert r.text == free.text[:free.text.index(" five")]


def test_limit_and_prompt_as_token_ids(llm) -> None:
    from constrained.llama import generate
    from sampler import Params

    ids = llm.tokenize(b"The sky is", add_bos=True, special=True)
    a = generate(llm, ids, params=Params(seed=3), n_predict=5)
    b = generate(llm, "The sky is", params=Params(seed=3), n_predict=5)
    assert a.stop_reason == "limit" and len(a.tokens) == 5
    assert a.tokens == b.tokens and a.prompt_tokens == ids


def test_grammar_end_and_validation(llm) -> None:
    from constrained.llama import generate
    from sampler import Params

    r = generate(llm, "Answer yes or no: is water wet?", grammar='root ::= "yes" | "no"', params=Params(seed=2))
    assert r.stop_reason == "grammar" and r.text in ("yes", "no")
    s = generate(llm, "JSON:", schema={"type": "integer"}, params=Params(seed=2), n_predict=8)
    assert s.valid in (True, False) and s.schema == {"type": "integer"}
    if s.stop_reason == "grammar":
        assert s.valid and isinstance(s.json, int)


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt=[]), "empty prompt"),
    (dict(prompt=[10**9]), "out of range"),
    (dict(prompt="x", schema={"type": "string"}, grammar='root ::= "a"'), "at most one"),
])
def test_bad_input(llm, kwargs, match) -> None:
    from constrained.llama import generate

    prompt = kwargs.pop("prompt")
    with pytest.raises(ValueError, match=match):
        generate(llm, prompt, **kwargs)
