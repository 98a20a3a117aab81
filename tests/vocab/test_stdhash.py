"""constrained.vocab._stdhash against libstdc++ itself: std::hash<std::string> and unordered_map iteration order."""

from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from constrained.vocab._stdhash import iteration_order, std_hash
from constrained.vocab.gguf_meta import read_metadata
from oracle.programs import compile_cpp, gxx
from oracle.sdist import vocab_gguf

pytestmark = pytest.mark.skipif(gxx() is None, reason="no C++ compiler (g++) to build the libstdc++ oracle")


def _oracle(keys: list[bytes]) -> tuple[np.ndarray, list[int]]:
    exe = compile_cpp("unordered_map_order.cpp")
    data = b"".join(struct.pack("<I", len(k)) + k for k in keys)
    out = subprocess.run([str(exe)], input=data, capture_output=True, check=True).stdout.split()
    return np.array(out[:len(keys)], dtype=np.int64), [int(x) for x in out[len(keys):]]


@pytest.mark.parametrize("name", ["qwen2", "gpt-2", "phi-3"])
def test_vocabulary_walk_order(name: str) -> None:
    toks = read_metadata(vocab_gguf(name), skip={"tokenizer.ggml.merges"})["tokenizer.ggml.tokens"]
    keys = [t if t else b"[EMPTY_%d]" % i for i, t in enumerate(toks)]
    want_order, want_hash = _oracle(keys)
    assert np.array_equal(iteration_order(keys), want_order)
    sample = range(0, len(keys), 97)
    assert [std_hash(keys[i]) for i in sample] == [want_hash[i] for i in sample]


@pytest.mark.parametrize("n", [0, 1, 2, 13, 14, 30, 1000, 5088])
def test_small_maps_and_rehash_edges(n: int) -> None:
    rng = np.random.default_rng(n)
    keys = list(dict.fromkeys(bytes(rng.integers(0, 256, rng.integers(0, 20)).astype(np.uint8)) for _ in range(n)))
    want_order, want_hash = _oracle(keys)
    assert np.array_equal(iteration_order(keys), want_order)
    assert [std_hash(k) for k in keys] == want_hash
