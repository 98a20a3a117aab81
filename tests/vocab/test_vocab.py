"""Vocabulary.from_gguf against llama.cpp's own vocabulary: every token of every vocab-only GGUF."""

from __future__ import annotations

import numpy as np
import pytest

from constrained import Vocabulary
from constrained.errors import VocabularyError
from oracle.sdist import vocab_ggufs

VOCABS = [p.name[len("ggml-vocab-"):-len(".gguf")] for p in vocab_ggufs()]


def _compare(path) -> tuple[int, int]:
    from oracle.llama import L, vocab_model

    vm = vocab_model(path)
    ours = Vocabulary.from_gguf(path)
    assert len(ours) == vm.n_vocab
    bad = [i for i in range(vm.n_vocab) if ours.piece(i) != vm.piece(i)]
    assert not bad, f"{len(bad)} pieces differ, first: {[(i, ours.piece(i), vm.piece(i)) for i in bad[:5]]}"
    c_eog = {i for i in range(vm.n_vocab) if vm.is_eog(i)}
    assert set(ours.eog_ids) == c_eog
    c_attr = np.array([L.llama_vocab_get_attr(vm.vocab, i) for i in range(vm.n_vocab)]) & 0x3F
    assert (np.array(ours.attrs) & 0x3F == c_attr).all()
    assert ours.bos_id == L.llama_vocab_bos(vm.vocab)
    assert ours.eos_id == L.llama_vocab_eos(vm.vocab)
    roles = {"eot": L.llama_vocab_eot, "fim_pre": L.llama_vocab_fim_pre, "fim_suf": L.llama_vocab_fim_suf,
             "fim_mid": L.llama_vocab_fim_mid, "fim_pad": L.llama_vocab_fim_pad, "fim_rep": L.llama_vocab_fim_rep,
             "fim_sep": L.llama_vocab_fim_sep}
    for role, fn in roles.items():
        assert ours.special_ids[role] == fn(vm.vocab), role
    _compare_detokenize(vm, ours)
    return vm.n_vocab, len(c_eog)


def _compare_detokenize(vm, ours: Vocabulary) -> None:
    """DRY renders each token with ``llama_detokenize({id}, remove_special=false, unparse_special=true)``: our
    add_space_prefix / clean_spaces flags must reproduce it for every token."""
    import ctypes

    from oracle.llama import L
    from sampler.dry import token_text

    buf = ctypes.create_string_buffer(1024)
    bad = []
    for i in range(vm.n_vocab):
        tok = (L.llama_token * 1)(i)
        k = L.llama_detokenize(vm.vocab, tok, 1, buf, len(buf), False, True)
        if token_text(ours, i) != buf.raw[:k]:
            bad.append((i, token_text(ours, i), buf.raw[:k]))
    assert not bad, f"{len(bad)} detokenized texts differ, first: {bad[:5]}"


@pytest.mark.parametrize("name", VOCABS)
def test_pieces_and_eog_equal_llama_cpp(name: str) -> None:
    from oracle.sdist import vocab_gguf

    _compare(vocab_gguf(name))


def test_default_model_vocabulary(default_model_path) -> None:
    n, n_eog = _compare(default_model_path)
    assert n == 262144 and n_eog >= 1


def test_from_llama_equals_from_gguf() -> None:
    from llama_cpp import Llama

    from oracle.sdist import vocab_gguf

    path = vocab_gguf("phi-3")
    a = Vocabulary.from_gguf(path)
    b = Vocabulary.from_llama(Llama(str(path), vocab_only=True, verbose=False))
    assert a.pieces == b.pieces and a.eog_ids == b.eog_ids
    assert b.tokenize("<|end|>", parse_special=True) == [32007]
    assert a.tokenize("<|end|>", parse_special=True) == [32007]
    assert a.tokenize("hello") == b.tokenize("hello")      # from_gguf tokenizes through llama.cpp's own tokenizer


def test_missing_file(tmp_path) -> None:
    with pytest.raises(VocabularyError, match="no such file"):
        Vocabulary.from_gguf(tmp_path / "nope.gguf")


def test_not_gguf(tmp_path) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(VocabularyError, match="not a GGUF file"):
        Vocabulary.from_gguf(p)
    p.write_bytes(b"")
    with pytest.raises(VocabularyError, match="not a GGUF file"):
        Vocabulary.from_gguf(p)


def test_truncated_gguf(tmp_path) -> None:
    from oracle.sdist import vocab_gguf

    data = vocab_gguf("gpt-2").read_bytes()
    p = tmp_path / "t.gguf"
    p.write_bytes(data[:5000])
    with pytest.raises(VocabularyError, match="truncated or corrupt"):
        Vocabulary.from_gguf(p)


def test_gguf_without_tokenizer(tmp_path) -> None:
    import gguf

    p = tmp_path / "notok.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(VocabularyError, match="no tokenizer"):
        Vocabulary.from_gguf(p)


def test_token_out_of_range() -> None:
    v = Vocabulary([b"a", b"b"], [1])
    with pytest.raises(ValueError, match="out of range"):
        v.piece(2)
    with pytest.raises(ValueError, match="out of range"):
        v.is_eog(-1)
