"""generate(): the inputs and failures of issue 16 (bytes prompts, one stop string, n_predict 0, token id types,
a validator failure after a finished generation) and load_model's llama-server context."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def llm(default_model_path):
    from constrained.llama import load_model

    m = load_model(default_model_path, n_ctx=512)
    yield m
    m.close()


def test_bytes_prompt_is_text_not_token_ids(llm) -> None:
    from constrained.llama import generate
    from sampler import Params

    a = generate(llm, b"The sky is", params=Params(seed=3), n_predict=3)
    b = generate(llm, "The sky is", params=Params(seed=3), n_predict=3)
    assert a.prompt_tokens == b.prompt_tokens == llm.tokenize(b"The sky is", add_bos=True, special=True)
    assert a.tokens == b.tokens


def test_a_stop_string_is_one_string(llm) -> None:
    from constrained.llama import generate
    from sampler import Params

    free = generate(llm, "Count: one, two, three,", params=Params(seed=1, temp=0.0), n_predict=8)
    r = generate(llm, "Count: one, two, three,", params=Params(seed=1, temp=0.0), n_predict=8, stop="e,")
    assert r.stop_reason == "word" and r.stopping_word == "e,"
    assert r.text == free.text[:free.text.index("e,")]
    assert "," in r.text          # read as one stop per character, "," would have cut the text earlier


@pytest.mark.parametrize("n_predict, n_tokens", [(0, 1), (1, 1), (3, 3)])
def test_n_predict_as_llama_server(llm, n_predict: int, n_tokens: int) -> None:
    """llama-server stops only after a token has been generated (``n_gen > 0 && !has_budget()``): 0 gives one
    token, below -1 is refused (checked on the real binary by test_llama_server_parity.py::test_n_predict_zero_gives_one_token)."""
    from constrained.llama import generate
    from sampler import Params

    r = generate(llm, "Hi", params=Params(seed=1, temp=0.0, samplers=("top_k",), top_k=1), n_predict=n_predict)
    assert len(r.tokens) == n_tokens or r.stop_reason == "eos"


def test_n_predict_below_minus_one_is_refused(llm) -> None:
    from constrained.llama import generate

    with pytest.raises(ValueError, match=r"Field 'n_predict': Value must be between -1 <= value <= 2147483647, but got -2"):
        generate(llm, "Hi", n_predict=-2)


@pytest.mark.parametrize("prompt", [[2, 1.5, 3], [2, "x", 3], [2, True], [2, None]])
def test_token_ids_must_be_integers(llm, prompt) -> None:
    from constrained.llama import generate

    with pytest.raises(ValueError, match="prompt token ids must be integers"):
        generate(llm, prompt, n_predict=1)


def test_a_validator_failure_keeps_the_generation(llm) -> None:
    """``\\p{L}`` is accepted by llama.cpp's converter but Python's re cannot compile it: jsonschema raises while
    validating; the generated text and tokens still come back, with the failure as the schema issue."""
    from constrained.llama import generate
    from sampler import Params

    schema = {"type": "string", "pattern": "^\\p{L}+$"}
    r = generate(llm, "A word in quotes:", schema=schema, params=Params(seed=4), n_predict=24)
    assert r.tokens and r.text.startswith('"')
    assert r.valid is False and "could not be checked" in r.schema_issues[0].message


def test_context_is_llama_servers(default_model_path) -> None:
    """load_model creates the context llama-server creates: its defaults, and flags as given."""
    from llama_cpp import llama_cpp as L

    from constrained.llama import load_model

    m = load_model(default_model_path, ["-c", "1024", "-b", "512", "-ub", "128", "-np", "1", "-t", "1"])
    try:
        assert (L.llama_n_ctx(m.ctx), L.llama_n_batch(m.ctx), L.llama_n_ubatch(m.ctx)) == (1024, 512, 128)
        assert L.llama_n_seq_max(m.ctx) == 1 and m.n_ctx() == 1024
        assert m._constrained_slot.n_swa == 512                       # Gemma 3's sliding window, swa_full off
    finally:
        m.close()
    with pytest.raises(Exception, match="--lora is not supported"):
        load_model(default_model_path, ["--lora", "x.gguf"])


def test_a_grammar_that_can_never_match_says_why(llm) -> None:
    """Issue 16: a grammar that can never match was reported as "internal error"; it now says what it expects."""
    from constrained import Grammar
    from constrained.errors import ConstrainedError
    from constrained.llama import generate

    g = Grammar.from_gbnf('root ::= "a" <[999999]>')
    with pytest.raises(ConstrainedError, match=r"allows no token here and cannot end: it expects token <\[999999\]>"):
        generate(llm, "Hi", grammar=g, n_predict=4)
