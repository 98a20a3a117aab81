"""llama.cpp's own tokenizer for a GGUF file, loaded on first use (``Vocabulary.from_gguf`` uses it).

The GGUF is opened with llama-cpp-python's vocabulary-only load (``llama_model_params.vocab_only``: no weights,
about as fast as reading the vocabulary), and text goes through ``llama_tokenize`` with ``add_special`` off, so the
ids are exactly llama.cpp's. Nothing is loaded until the first call; without llama-cpp-python the call raises a
:class:`~constrained.errors.VocabularyError` naming the missing extra.

Example:
    >>> tok = GgufTokenizer("ggml-vocab-gpt-2.gguf")           # doctest: +SKIP
    >>> tok(b"Hello world", False)                              # doctest: +SKIP
    [15496, 995]
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

from ..errors import VocabularyError

__all__ = ["GgufTokenizer", "c_tokenize"]


def c_tokenize(L: Any, vocab: Any, text: bytes, add_special: bool, parse_special: bool, what: str = "") -> list[int]:
    """``llama_tokenize`` through llama-cpp-python's C API (``L``) on a ``llama_vocab *``, growing the buffer to the
    size llama.cpp asks for; any other failure raises VocabularyError (``what`` names the vocabulary)."""
    cap = len(text) + 8
    while True:
        out = (L.llama_token * cap)()
        k = L.llama_tokenize(vocab, text, len(text), out, cap, add_special, parse_special)
        if k >= 0:
            return list(out[:k])
        if k == -2147483648 or -k <= cap:          # INT32_MIN: overflow; anything else is an error
            raise VocabularyError(f"{what}: llama_tokenize failed ({k}) on {text[:40]!r}")
        cap = -k


class GgufTokenizer:
    """``tokenize(text: bytes, parse_special: bool) -> list[int]`` for the GGUF at ``path`` (lazy)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._model: Any = None
        self._vocab: Any = None
        self._L: Any = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        try:
            from llama_cpp import llama_cpp as L
        except ImportError as err:
            raise VocabularyError(
                f"{self.path.name}: tokenizing needs llama.cpp's tokenizer, from llama-cpp-python: "
                "pip install 'constrained[llama]' (or build the Vocabulary with Vocabulary.from_llama)") from err
        _quiet(L)
        params = L.llama_model_default_params()
        params.vocab_only = True
        model = L.llama_model_load_from_file(str(self.path).encode(), params)
        if not model:
            raise VocabularyError(f"{self.path}: llama.cpp could not load the vocabulary")
        self._L = L
        self._model = model
        self._vocab = L.llama_model_get_vocab(model)

    def __call__(self, text: bytes, parse_special: bool) -> list[int]:
        with self._lock:
            if self._model is None:
                self._load()
        return c_tokenize(self._L, self._vocab, text, False, parse_special, self.path.name)

    def __del__(self) -> None:
        model, L = getattr(self, "_model", None), getattr(self, "_L", None)
        if model is not None and L is not None:
            try:
                L.llama_model_free(model)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


_QUIET: list[Any] = []


def _quiet(L: Any) -> None:
    """Silence llama.cpp's load log (the callback is kept alive for the process, as llama.cpp keeps its address)."""
    if _QUIET:
        return

    @L.llama_log_callback
    def cb(level: int, text: bytes, user_data: Any) -> None:
        return None

    _QUIET.append(cb)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(cb))
    L.llama_log_set(cb, ctypes.c_void_p())
