"""llama-server's ``common_sampler_sample``: the real one (through ``server_shim.cpp``) and a Python emulation.

- :class:`ServerSampler` is llama-server's own ``common_sampler`` (``common_sampler_init``, ``_sample``,
  ``_accept``, ``_reset``) from the wheel's ``libllama-common.so``, driven on a real ``llama_context``.
- :class:`EmulatedServerSampler` replays ``common_sampler_sample`` (with ``grammar_first = false``) from Python
  with llama.cpp's C pieces: the chain on the raw logits, the one-token grammar check, and on rejection fresh
  logits, the grammar over the whole vocabulary, the chain again. It takes logits as a numpy array, so it can run
  on any logits source; ``tests/sampler/test_oracle_server.py`` proves it equal to the real function.
- :class:`InjectedLogits` is a real context whose logits we overwrite, so the real function samples from them.

Parameters are read by name from any object with llama-server's field names (``sampler.Params`` or
:class:`types.SimpleNamespace`); missing ones take llama-server's defaults.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

from oracle.cxx import build_shim
from oracle.llama import TOKEN_DATA, Candidates, CGrammar, L, VocabModel

SRC = Path(__file__).resolve().parent / "shims" / "server_shim.cpp"
GRAMMAR_USER, GRAMMAR_OUTPUT_FORMAT, GRAMMAR_TOOL_CALLS = 1, 2, 3

_LETTERS = {"penalties": "e", "dry": "d", "top_n_sigma": "s", "top_k": "k", "typ_p": "y", "typical_p": "y",
            "top_p": "p", "min_p": "m", "xtc": "x", "temperature": "t", "infill": "i", "adaptive_p": "a"}


class ShimParams(ctypes.Structure):
    _fields_ = [("seed", ctypes.c_uint32), ("n_prev", ctypes.c_int32), ("n_probs", ctypes.c_int32),
                ("min_keep", ctypes.c_int32), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("xtc_probability", ctypes.c_float), ("xtc_threshold", ctypes.c_float),
                ("typ_p", ctypes.c_float), ("temp", ctypes.c_float), ("dynatemp_range", ctypes.c_float),
                ("dynatemp_exponent", ctypes.c_float), ("penalty_last_n", ctypes.c_int32),
                ("penalty_repeat", ctypes.c_float), ("penalty_freq", ctypes.c_float),
                ("penalty_present", ctypes.c_float), ("dry_multiplier", ctypes.c_float), ("dry_base", ctypes.c_float),
                ("dry_allowed_length", ctypes.c_int32), ("dry_penalty_last_n", ctypes.c_int32),
                ("adaptive_target", ctypes.c_float), ("adaptive_decay", ctypes.c_float), ("mirostat", ctypes.c_int32),
                ("top_n_sigma", ctypes.c_float), ("mirostat_tau", ctypes.c_float), ("mirostat_eta", ctypes.c_float),
                ("samplers", ctypes.c_char_p), ("dry_breakers", ctypes.c_char_p), ("grammar", ctypes.c_char_p),
                ("grammar_type", ctypes.c_int32), ("bias_ids", ctypes.POINTER(ctypes.c_int32)),
                ("bias_vals", ctypes.POINTER(ctypes.c_float)), ("n_bias", ctypes.c_int32)]


_DEFAULTS = dict(seed=0xFFFFFFFF, n_prev=64, n_probs=0, min_keep=0, top_k=40, top_p=0.95, min_p=0.05,
                 xtc_probability=0.0, xtc_threshold=0.1, typ_p=1.0, temp=0.8, dynatemp_range=0.0,
                 dynatemp_exponent=1.0, penalty_last_n=64, penalty_repeat=1.0, penalty_freq=0.0, penalty_present=0.0,
                 dry_multiplier=0.0, dry_base=1.75, dry_allowed_length=2, dry_penalty_last_n=64,
                 adaptive_target=-1.0, adaptive_decay=0.9, mirostat=0, top_n_sigma=-1.0, mirostat_tau=5.0,
                 mirostat_eta=0.1)


def _samplers_letters(samplers: Any) -> bytes | None:
    if samplers is None:
        return None
    if isinstance(samplers, str):
        return samplers.encode()
    return "".join(_LETTERS[str(getattr(s, "value", s)).lower()] for s in samplers).encode()


def _bias_pairs(bias: Any) -> list[tuple[int, float]]:
    if not bias:
        return []
    items = bias.items() if isinstance(bias, dict) else bias
    return [(int(t), float(b)) for t, b in items]


class ServerSampler:
    """llama-server's real ``common_sampler`` over ``model`` (a ``llama_model`` pointer)."""

    _lib: ctypes.CDLL | None = None

    @classmethod
    def lib(cls) -> ctypes.CDLL:
        if cls._lib is None:
            lib = build_shim(SRC)
            lib.shim_init.argtypes = [ctypes.c_void_p, ctypes.POINTER(ShimParams), ctypes.c_char_p, ctypes.c_int]
            lib.shim_init.restype = ctypes.c_void_p
            lib.shim_sample.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
            lib.shim_sample.restype = ctypes.c_int32
            lib.shim_accept.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
            lib.shim_accept.restype = ctypes.c_int
            lib.shim_candidates.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                            ctypes.POINTER(ctypes.POINTER(L.llama_token_data)),
                                            ctypes.POINTER(ctypes.c_int64)]
            lib.shim_candidates.restype = ctypes.c_int32
            for f in ("shim_reset", "shim_free"):
                getattr(lib, f).argtypes = [ctypes.c_void_p]
                getattr(lib, f).restype = None
            lib.shim_chain.argtypes = [ctypes.c_void_p]
            lib.shim_chain.restype = ctypes.c_void_p
            lib.shim_seed.argtypes = [ctypes.c_void_p]
            lib.shim_seed.restype = ctypes.c_uint32
            cls._lib = lib
        return cls._lib

    def __init__(self, model: Any, params: Any = None, grammar: str | None = None,
                 grammar_type: int = GRAMMAR_USER) -> None:
        lib = self.lib()
        p = ShimParams()
        for name, default in _DEFAULTS.items():
            setattr(p, name, getattr(params, name, default) if params is not None else default)
        self._keep: list[Any] = []
        letters = _samplers_letters(getattr(params, "samplers", None))
        p.samplers = letters
        breakers = getattr(params, "dry_sequence_breakers", None)
        p.dry_breakers = "\x1f".join(breakers).encode() if breakers is not None else None
        p.grammar = grammar.encode() if grammar else None
        p.grammar_type = grammar_type
        pairs = _bias_pairs(getattr(params, "logit_bias", None))
        ids = (ctypes.c_int32 * max(1, len(pairs)))(*[t for t, _ in pairs])
        vals = (ctypes.c_float * max(1, len(pairs)))(*[b for _, b in pairs])
        self._keep += [letters, ids, vals]
        p.bias_ids, p.bias_vals, p.n_bias = ids, vals, len(pairs)
        err = ctypes.create_string_buffer(4096)
        self.ptr = lib.shim_init(model, ctypes.byref(p), err, len(err))
        if not self.ptr:
            raise ValueError(err.value.decode())

    def sample(self, ctx: Any, idx: int = -1) -> int:
        err = ctypes.create_string_buffer(4096)
        tok = self.lib().shim_sample(self.ptr, ctx, idx, err, len(err))
        if tok < 0 and err.value:
            raise RuntimeError(err.value.decode())
        return tok

    def accept(self, token: int, is_generated: bool) -> None:
        err = ctypes.create_string_buffer(4096)
        if self.lib().shim_accept(self.ptr, token, int(is_generated), err, len(err)):
            raise RuntimeError(err.value.decode())

    def candidates(self, do_sort: bool = False) -> tuple[np.ndarray, int]:
        """The last candidate array (``common_sampler_get_candidates``) and its selected index."""
        data = ctypes.POINTER(L.llama_token_data)()
        sel = ctypes.c_int64(-1)
        n = self.lib().shim_candidates(self.ptr, int(do_sort), ctypes.byref(data), ctypes.byref(sel))
        addr = ctypes.cast(data, ctypes.c_void_p).value
        raw = (ctypes.c_byte * (n * TOKEN_DATA.itemsize)).from_address(addr)
        return np.frombuffer(raw, dtype=TOKEN_DATA).copy(), int(sel.value)

    @property
    def chain(self) -> ctypes.c_void_p:
        """The ``llama_sampler`` chain that ``common_sampler_init`` built (logit bias ... dist)."""
        return ctypes.cast(self.lib().shim_chain(self.ptr), L.llama_sampler_p_ctypes)

    def reset(self) -> None:
        self.lib().shim_reset(self.ptr)

    def free(self) -> None:
        if self.ptr:
            self.lib().shim_free(self.ptr)
            self.ptr = None


class EmulatedServerSampler:
    """``common_sampler_sample(..., grammar_first=false)`` and ``common_sampler_accept`` in Python over C pieces.

    Args:
        chain: a C sampler chain built as ``common_sampler_init`` builds it (e.g. ``ServerSampler(...).chain`` of a
            grammar-less instance, kept alive by the caller).
        grammar: llama.cpp's grammar sampler, or None.
        n_vocab: the logits length.
    """

    def __init__(self, chain: Any, grammar: CGrammar | None, n_vocab: int) -> None:
        self.chain = chain
        self.grammar = grammar
        self.cand = Candidates(n_vocab)
        self.last: Any = None

    def sample(self, logits: np.ndarray) -> tuple[int, bool]:
        """The token and whether it was redrawn after a grammar rejection."""
        r = self.cand.apply(self.chain, logits)          # set_logits + chain on the raw logits
        self.last = r
        tok = r.token
        if self.grammar is None or self.grammar.allows(tok):
            return tok, False
        self.cand.fill(logits)                           # set_logits again: fresh raw logits
        L.llama_sampler_apply(self.grammar.smpl, ctypes.byref(self.cand.arr))
        L.llama_sampler_apply(self.chain, ctypes.byref(self.cand.arr))
        r = self.cand.result()
        self.last = r
        if r.selected < 0:
            raise RuntimeError("no selected token during sampling - check your sampling configuration")
        return r.token, True

    def accept(self, token: int, is_generated: bool) -> None:
        if self.grammar is not None and is_generated:
            self.grammar.accept(token)
        L.llama_sampler_accept(self.chain, token)


class InjectedLogits:
    """A real ``llama_context`` on ``model`` whose last logits row we overwrite before each sample."""

    def __init__(self, model: Any, n_ctx: int = 256, prompt: list[int] | None = None) -> None:
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_ctx
        cp.n_threads = 1
        cp.n_threads_batch = 1
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(model, cp)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(vocab)
        toks = prompt or [L.llama_vocab_bos(vocab)]
        arr = (L.llama_token * len(toks))(*toks)
        if L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(toks))) != 0:
            raise RuntimeError("llama_decode failed")
        self._row = np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))

    def logits(self) -> np.ndarray:
        return self._row.copy()

    def write(self, logits: np.ndarray) -> None:
        self._row[:] = np.asarray(logits, dtype=np.float32)

    def free(self) -> None:
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None


def load_model(path: str | Path) -> Any:
    """A full ``llama_model`` (weights on the CPU), for contexts."""
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise RuntimeError(f"could not load {path}")
    return model


def vocab_model_of(model: Any, path: str | Path) -> VocabModel:
    vocab = L.llama_model_get_vocab(model)
    return VocabModel(Path(path), model, vocab, L.llama_vocab_n_tokens(vocab))
