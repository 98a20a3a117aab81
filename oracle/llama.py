"""llama.cpp's own C code through llama-cpp-python's ctypes API, for oracle tests and benchmarks.

Everything here calls into the ``libllama`` shipped by llama-cpp-python 0.3.36 (llama.cpp commit 0c1e57098).

Example:
    >>> vm = vocab_model(vocab_gguf("gpt-2"))                      # doctest: +SKIP
    >>> with CGrammar(vm, 'root ::= "a"+') as g:                    # doctest: +SKIP
    ...     m = g.mask(); g.accept(vm.tokenize(b"a", False)[0])
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from llama_cpp import llama_cpp as L  # noqa: E402

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert TOKEN_DATA.itemsize == ctypes.sizeof(L.llama_token_data)


@L.llama_log_callback
def _silent_log(level, text, user_data):  # noqa: ANN001
    return None


ctypes.pythonapi.Py_IncRef(ctypes.py_object(_silent_log))  # never freed: llama.cpp may log at interpreter exit
L.llama_log_set(_silent_log, ctypes.c_void_p())
L.llama_backend_init()


@dataclass
class VocabModel:
    """A vocab-only ``llama_model`` (no weights) and its ``llama_vocab``."""

    path: Path
    model: ctypes.c_void_p
    vocab: ctypes.c_void_p
    n_vocab: int

    def piece(self, token: int, special: bool = True) -> bytes:
        buf = ctypes.create_string_buffer(256)
        k = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if k < 0:
            buf = ctypes.create_string_buffer(-k)
            k = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:k]

    def is_eog(self, token: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, text: bytes, parse_special: bool = False) -> list[int]:
        cap = len(text) + 8
        while True:
            out = (L.llama_token * cap)()
            k = L.llama_tokenize(self.vocab, text, len(text), out, cap, False, parse_special)
            if k >= 0:
                return list(out[:k])
            cap = -k


@functools.cache
def vocab_model(path: str | Path) -> VocabModel:
    """Load (once per path, kept for the whole process) a GGUF with ``vocab_only = True``."""
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise ValueError(f"llama.cpp could not load {path}")
    vocab = L.llama_model_get_vocab(model)
    return VocabModel(Path(path), model, vocab, L.llama_vocab_n_tokens(vocab))


@dataclass
class CandidatesResult:
    ids: np.ndarray
    logits: np.ndarray
    p: np.ndarray
    selected: int
    token: int
    sorted: bool


class Candidates:
    """A reusable ``llama_token_data_array`` over a numpy buffer of ``n`` entries."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.buf = np.zeros(n, dtype=TOKEN_DATA)
        self.arr = L.llama_token_data_array()
        self._ptr = self.buf.ctypes.data_as(ctypes.POINTER(L.llama_token_data))

    def fill(self, logits: np.ndarray) -> None:
        logits = np.asarray(logits, dtype=np.float32)
        if logits.shape != (self.n,):
            raise ValueError(f"expected {self.n} logits, got shape {logits.shape}")
        self.buf["id"] = np.arange(self.n, dtype=np.int32)
        self.buf["logit"] = logits
        self.buf["p"] = 0.0
        self.arr.data = self._ptr
        self.arr.size = self.n
        self.arr.selected = -1
        self.arr.sorted = False

    def result(self) -> CandidatesResult:
        size = self.arr.size
        addr = ctypes.cast(self.arr.data, ctypes.c_void_p).value or 0
        view = np.ctypeslib.as_array((ctypes.c_byte * (size * TOKEN_DATA.itemsize)).from_address(addr)) \
            .view(TOKEN_DATA).copy() if size else np.zeros(0, dtype=TOKEN_DATA)
        sel = int(self.arr.selected)
        tok = int(view["id"][sel]) if 0 <= sel < size else -1
        return CandidatesResult(view["id"].copy(), view["logit"].copy(), view["p"].copy(), sel, tok,
                                bool(self.arr.sorted))

    def apply(self, smpl: ctypes.c_void_p, logits: np.ndarray) -> CandidatesResult:
        """Fill from ``logits`` (id order, p = 0, unsorted, nothing selected), apply ``smpl``, read the result."""
        self.fill(logits)
        L.llama_sampler_apply(smpl, ctypes.byref(self.arr))
        return self.result()


class CGrammar:
    """llama.cpp's grammar sampler (``llama_sampler_init_grammar``) on a vocabulary."""

    def __init__(self, vm: VocabModel, gbnf: str | bytes, root: str = "root", *, _smpl: ctypes.c_void_p = None) -> None:
        self.vm = vm
        if _smpl is None:
            text = gbnf.encode() if isinstance(gbnf, str) else gbnf
            _smpl = L.llama_sampler_init_grammar(vm.vocab, text, root.encode())
            if not _smpl:
                raise ValueError("llama.cpp refused the grammar (llama_sampler_init_grammar returned NULL)")
        self.smpl = _smpl
        self._one = Candidates(1)
        self._all = Candidates(vm.n_vocab)
        self._zeros = np.zeros(vm.n_vocab, dtype=np.float32)

    def allows(self, token: int) -> bool:
        """The one-candidate check llama-server makes (``{id, 1.0, 0}``; valid iff the logit stays finite)."""
        one = self._one
        one.buf[0] = (token, 1.0, 0.0)
        one.arr.data = one._ptr
        one.arr.size = 1
        one.arr.selected = -1
        one.arr.sorted = False
        L.llama_sampler_apply(self.smpl, ctypes.byref(one.arr))
        return bool(np.isfinite(one.buf["logit"][0]))

    def mask(self) -> np.ndarray:
        """The full-vocabulary mask: True where llama.cpp leaves the token's logit finite."""
        r = self._all.apply(self.smpl, self._zeros)
        out = np.zeros(self.vm.n_vocab, dtype=bool)
        out[r.ids] = np.isfinite(r.logits)
        return out

    def accept(self, token: int) -> None:
        """Advance the grammar; raises ValueError for a token it rejects (llama.cpp would abort the process)."""
        if not self.allows(token):
            raise ValueError(f"grammar rejects token {token} ({self.vm.piece(token)!r})")
        L.llama_sampler_accept(self.smpl, token)

    def clone(self) -> CGrammar:
        return type(self)(self.vm, b"", _smpl=L.llama_sampler_clone(self.smpl))

    def free(self) -> None:
        if self.smpl:
            L.llama_sampler_free(self.smpl)
            self.smpl = None

    def __enter__(self) -> CGrammar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.free()
        except Exception:
            pass
