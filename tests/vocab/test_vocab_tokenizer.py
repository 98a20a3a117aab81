"""Vocabulary.from_gguf tokenizes as llama.cpp does (its own tokenizer, through a vocabulary-only load on first
use), and DRY requests built on such a vocabulary equal llama.cpp's C sampler chain on all 19 vocab-only GGUFs."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from constrained.errors import VocabularyError  # noqa: E402
from constrained.vocab import Vocabulary  # noqa: E402
from constrained.vocab.tokenizer import GgufTokenizer  # noqa: E402
from oracle.cases.sampler import random_params  # noqa: E402
from oracle.cases.sampler_chain import ACTIVE, run_sequence  # noqa: E402
from oracle.llama import vocab_model  # noqa: E402
from oracle.sdist import vocab_ggufs  # noqa: E402

TEXTS = ["Hello world", " leading space", "x:y\n\n\"quoted\" *bold*", "ümlaut ñ 日本語 🙂", "  two  spaces\t",
         "<s>not special</s>", "12345 + 678 = 999", ""]
GGUFS = vocab_ggufs()


def test_nineteen_vocabularies() -> None:
    assert len(GGUFS) == 19


@pytest.mark.parametrize("path", GGUFS, ids=[p.stem.removeprefix("ggml-vocab-") for p in GGUFS])
def test_from_gguf_tokenizes_and_dry_matches_c(path) -> None:  # noqa: ANN001
    vm = vocab_model(path)
    v = Vocabulary.from_gguf(path)
    assert isinstance(v.tokenizer, GgufTokenizer) and v.tokenizer._model is None     # nothing loaded yet
    for t in TEXTS:
        for special in (False, True):
            assert v.tokenize(t, parse_special=special) == vm.tokenize(t.encode(), special), (t, special)
    # DRY with the vocabulary's own sequence breakers: the same stages as llama.cpp's chain
    n = vm.n_vocab
    rng = np.random.default_rng(n)
    brk = [t for b in ("\n", ":", "\"", "*", " the", "ab") for t in vm.tokenize(b.encode(), False)]
    before = ACTIVE.get("dry", 0)
    for case in range(2):
        p = random_params(rng, n, dry=True).replace(
            mirostat=0, top_k=40, dry_multiplier=[0.8, 2.0][case], dry_penalty_last_n=[64, 0][case],
            dry_allowed_length=1, dry_base=1.75,
            dry_sequence_breakers=[("\n", ":", "\"", "*"), ("ab", " the", "x:y")][case],
            samplers=("penalties", "dry", "top_k", "top_p", "min_p", "temperature"))
        run_sequence(p, n, rng, 4, vocab=v, vm=vm, prompt_len=60, boost=rng.integers(0, n, size=3).tolist() + brk)
    DRY_ACTIVE[path.stem] = ACTIVE.get("dry", 0) - before


DRY_ACTIVE: dict[str, int] = {}


def test_dry_really_penalised() -> None:
    """(after the parametrized test) DRY changed logits on most vocabularies, so the comparison was not vacuous."""
    if len(DRY_ACTIVE) < len(GGUFS):
        pytest.skip("run with test_from_gguf_tokenizes_and_dry_matches_c")
    # measured: DRY changes logits on 11 of the 19 (the others' random draws never repeat a sequence in 4 steps)
    assert sum(1 for k in DRY_ACTIVE.values() if k > 0) >= 10, DRY_ACTIVE


def test_missing_llama_cpp_names_the_extra(monkeypatch) -> None:  # noqa: ANN001
    v = Vocabulary.from_gguf(GGUFS[0])
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(VocabularyError, match=r"pip install 'constrained\[llama\]'"):
        v.tokenize("hello")
    bos = v.pieces[v.bos_id] if v.bos_id >= 0 else None
    if bos and v.is_special(v.bos_id):
        assert v.tokenize(bos, parse_special=True) == [v.bos_id]     # a special token's text still resolves
