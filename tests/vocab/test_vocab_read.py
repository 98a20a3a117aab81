"""The compiled loop of ``Vocabulary.from_llama`` (``constrained.vocab._read``) against its Python reference
(``_read_tokens_python``: one ctypes call per token), bit for bit, on every vocab-only GGUF of llama.cpp's tests and
the default model; and the compiled decode of the grammar's token table (``_walk.decode_pieces``) against the Python
build of the same table.

``test_read_kernel_is_built`` fails when the extension is missing (a C++ compiler is needed at install time), unless
``CONSTRAINED_PURE_PYTHON=1`` asks for the Python loop on purpose.
"""

from __future__ import annotations

import numpy as np
import pytest

from constrained import Vocabulary
from constrained.vocab import vocabulary as V
from oracle.sdist import vocab_ggufs

VOCABS = [p.name[len("ggml-vocab-"):-len(".gguf")] for p in vocab_ggufs()]
needs_kernel = pytest.mark.skipif(V._read_ext is None, reason="not built or CONSTRAINED_PURE_PYTHON=1")


def test_read_kernel_is_built() -> None:
    if V.PURE:
        pytest.skip("CONSTRAINED_PURE_PYTHON=1: the Python loop was asked for")
    assert V._read_ext is not None, (
        "constrained.vocab._read is not built: run `pip install -e .` (a C++ compiler is needed); set "
        "CONSTRAINED_PURE_PYTHON=1 to run the Python loop on purpose")


def _check(path) -> Vocabulary:
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as L

    llm = Llama(str(path), vocab_only=True, verbose=False)
    v = Vocabulary.from_llama(llm)
    pieces, attrs, eog = V._read_tokens_python(L, llm._model.vocab, len(v))
    assert v.pieces == tuple(pieces)
    assert v.attrs == tuple(attrs)
    assert v.eog_ids == frozenset(eog)
    assert type(v.pieces) is tuple and all(type(p) is bytes for p in v.pieces)
    return v


@needs_kernel
@pytest.mark.parametrize("name", VOCABS)
def test_compiled_read_equals_python(name: str) -> None:
    from oracle.sdist import vocab_gguf

    _check(vocab_gguf(name))


@needs_kernel
def test_compiled_read_default_model(default_model_path) -> None:
    v = _check(default_model_path)
    assert len(v) == 262144


def test_vocabulary_keeps_given_tuples() -> None:
    """Tuples of bytes / ints are kept as given (what the compiled loop makes); anything else is coerced."""
    p, a = (b"a", b"b"), (4, 4)
    v = Vocabulary(p, attrs=a)
    assert v.pieces is p and v.attrs is a
    w = Vocabulary([bytearray(b"a"), memoryview(b"b")], attrs=[np.int32(4), True])
    assert w.pieces == (b"a", b"b") and all(type(x) is bytes for x in w.pieces)
    assert w.attrs == (4, 1) and all(type(x) is int for x in w.attrs)
    x = Vocabulary((b"a", bytearray(b"b")), attrs=(4, True))
    assert all(type(q) is bytes for q in x.pieces) and all(type(q) is int for q in x.attrs)


@needs_kernel
@pytest.mark.parametrize("name", ["gpt-2", "llama-spm", "gemma-4", "bert-bge"])
def test_compiled_string_skip_equals_python(name: str, monkeypatch) -> None:
    """read_metadata with the compiled skip of string arrays equals the Python loop's result, key for key."""
    from constrained.vocab import gguf_meta as GM
    from oracle.sdist import vocab_gguf

    path = vocab_gguf(name)
    skip = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}
    fast = GM.read_metadata(path, skip=skip)
    monkeypatch.setattr(GM, "_skip_strings", None)
    slow = GM.read_metadata(path, skip=skip)
    assert fast.keys() == slow.keys()
    for k in fast:
        a, b = fast[k], slow[k]
        assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), k


@needs_kernel
def test_compiled_string_skip_bounds() -> None:
    import struct

    buf = struct.pack("<Q", 3) + b"abc" + struct.pack("<Q", 0) + struct.pack("<Q", 5) + b"xy"
    assert V._read_ext.skip_strings(buf, 0, 2) == 19
    assert V._read_ext.skip_strings(buf, 0, 3) == -1           # the third string runs past the end
    assert V._read_ext.skip_strings(buf, 0, 0) == 0
    assert V._read_ext.skip_strings(buf, 30, 1) == -1
    assert V._read_ext.skip_strings(struct.pack("<Q", 1 << 63), 0, 1) == -1


def test_truncated_string_array_still_reported(tmp_path) -> None:
    """A truncated GGUF whose skipped string array runs past the end: the Python loop reports it, as before."""
    import struct

    from constrained.errors import VocabularyError
    from constrained.vocab.gguf_meta import read_metadata

    key = b"tokenizer.ggml.tokens"
    data = (struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + struct.pack("<Q", len(key)) + key
            + struct.pack("<IIQ", 9, 8, 2) + struct.pack("<Q", 1) + b"a" + struct.pack("<Q", 50) + b"b")
    p = tmp_path / "t.gguf"
    p.write_bytes(data)
    with pytest.raises(VocabularyError, match="truncated"):
        read_metadata(p, skip={"tokenizer.ggml.tokens"})
