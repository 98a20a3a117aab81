"""``Vocabulary.from_hf`` against ``Vocabulary.from_gguf`` (itself proven equal to llama.cpp's loader) id by id:
SmolLM2-135M converted from its GGUF to Hugging Face format, and vocabulary-only GGUFs whose tokenizer transformers
converts losslessly (scripts/sweep_hf_vocab.py runs every one of the 19)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from constrained.vocab import Vocabulary
from constrained.vocab.gguf_meta import read_metadata
from oracle.sdist import vocab_gguf


def _pre(path: Path) -> str:
    v = read_metadata(path, skip={"tokenizer.ggml.merges", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                  "tokenizer.ggml.scores", "tokenizer.chat_template",
                                  "tokenizer.ggml.precompiled_charsmap", "tokenizer.huggingface.json"}
                      ).get("tokenizer.ggml.pre", b"")
    return v.decode() if isinstance(v, bytes) else str(v)


def _same(a: Vocabulary, b: Vocabulary) -> None:
    assert len(a) == len(b)
    diffs = [i for i in range(len(b)) if a.pieces[i] != b.pieces[i] or a.attrs[i] != b.attrs[i]]
    assert not diffs, [(i, a.pieces[i], b.pieces[i], a.attrs[i], b.attrs[i]) for i in diffs[:5]]
    assert a.eog_ids == b.eog_ids
    assert a.special_ids == b.special_ids
    assert a.vocab_type == b.vocab_type and a.add_space_prefix == b.add_space_prefix


def test_smollm2_converted_from_gguf_equals_from_gguf(smollm2_gguf: Path, smollm2_hf: Path) -> None:
    tok = AutoTokenizer.from_pretrained(str(smollm2_hf))
    a = Vocabulary.from_hf(tok, pre=_pre(smollm2_gguf))
    b = Vocabulary.from_gguf(smollm2_gguf)
    _same(a, b)
    assert a.clean_spaces == b.clean_spaces
    assert sorted(a.eog_ids) == [0, 2, 4]
    # the vocabulary tokenizes with the model's own tokenizer
    assert a.tokenize("Hello world") == tok.encode("Hello world", add_special_tokens=False)
    assert a.tokenize("<|im_end|>", parse_special=True) == [2]


@pytest.mark.parametrize("name", ["llama-spm"])      # SentencePiece; SmolLM2 above is byte-level BPE
def test_vocab_only_gguf_through_transformers_equals_from_gguf(name: str) -> None:
    p = vocab_gguf(name)
    tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    _same(Vocabulary.from_hf(tok, pre=_pre(p)), Vocabulary.from_gguf(p))


def test_slow_or_foreign_tokenizers_are_refused() -> None:
    from constrained.errors import VocabularyError

    with pytest.raises(VocabularyError, match="fast"):
        Vocabulary.from_hf(object())
