"""DRY against llama.cpp on real vocabularies (gpt-2 BPE, llama SPM): sequence breakers built from the vocabulary,
prompts full of repeats, every stage compared."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from constrained.vocab import Vocabulary  # noqa: E402
from oracle.cases.sampler import random_params  # noqa: E402
from oracle.cases.sampler_chain import ACTIVE, run_sequence  # noqa: E402
from oracle.llama import L, vocab_model  # noqa: E402
from oracle.sdist import vocab_gguf  # noqa: E402
from sampler.dry import process_breakers, token_text, token_texts  # noqa: E402

BREAKER_SETS = [("\n", ":", "\"", "*"), ("ab",), (" the", "x:y"), ("verylongbreaker" * 4,), ("\"\"", "*", "\n\n")]


@pytest.fixture(scope="module", params=["gpt-2", "llama-spm"])
def vocab_pair(request):  # noqa: ANN001, ANN201
    vm = vocab_model(vocab_gguf(request.param))
    return vm, Vocabulary.from_llama(vm.vocab)


def test_dry_sequences(vocab_pair) -> None:  # noqa: ANN001
    vm, v = vocab_pair
    n = vm.n_vocab
    rng = np.random.default_rng(n)
    before = ACTIVE.get("dry", 0)
    brk = [t for b in ("\n", ":", "\"", "*", " foo:", "ab", "x:y") for t in vm.tokenize(b.encode(), False)]
    for case in range(24):
        p = random_params(rng, n, dry=True).replace(
            mirostat=0, top_k=int(rng.choice([1, 40, 129, 500])),
            samplers=("penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"))
        p = p.replace(dry_multiplier=float(rng.choice([0.8, 2.0, 0.0] if case % 5 else [1.5])),
                      dry_penalty_last_n=int(rng.choice([8, 64, 100, 0])),
                      dry_sequence_breakers=BREAKER_SETS[case % len(BREAKER_SETS)])
        boost = rng.integers(0, n, size=6).tolist() + brk
        run_sequence(p, n, rng, 10, vocab=v, vm=vm, prompt_len=120, boost=boost)
    assert ACTIVE.get("dry", 0) - before > 20  # DRY really penalised something, many times


def _detok(vm, t: int) -> bytes:  # noqa: ANN001
    buf = ctypes.create_string_buffer(1024)
    one = (L.llama_token * 1)(t)
    k = L.llama_detokenize(vm.vocab, one, 1, buf, len(buf), False, True)
    return buf.raw[:k]


def test_token_texts_from_llama(vocab_pair) -> None:  # noqa: ANN001
    vm, v = vocab_pair
    texts = token_texts(v)
    idx = np.random.default_rng(0).integers(0, vm.n_vocab, size=3000)
    assert all(texts[i] == _detok(vm, int(i)) for i in idx)


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "qwen2", "bert-bge"])
def test_token_text_without_llama(name: str) -> None:
    """The fallback rendering (piece, space prefix, clean-up passes) for vocabularies read from GGUF alone."""
    vm = vocab_model(vocab_gguf(name))
    v = Vocabulary.from_gguf(vocab_gguf(name))
    bad = [i for i in range(vm.n_vocab) if token_text(v, i) != _detok(vm, i)]
    assert bad == []


def test_breakers_cached(vocab_pair) -> None:  # noqa: ANN001
    _, v = vocab_pair
    a = process_breakers(v, ("\n", ":"))
    assert process_breakers(v, ("\n", ":")) is a
    assert all(isinstance(t, tuple) and len(t) <= 20 for tails in a.values() for t in tails)


def test_ignore_eos_and_string_biases(vocab_pair) -> None:  # noqa: ANN001
    """EOG -inf biases from the vocabulary and string biases tokenized by it, as llama-server builds them."""
    vm, v = vocab_pair
    n = vm.n_vocab
    rng = np.random.default_rng(3)
    eog = sorted(v.eog_ids)
    for i in range(6):
        p = random_params(rng, n).replace(ignore_eos=bool(i % 2 == 0),
                                          logit_bias=((" hello world", 3.0), (eog[0], 5.0), ("\n", -2.5)))
        boost = eog + vm.tokenize(b" hello world", False)
        run_sequence(p, n, rng, 4, vocab=v, vm=vm, boost=boost)
