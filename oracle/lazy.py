"""llama.cpp's lazy grammar sampler and its trigger search, through a small C++ shim of ours (``lazy_shim.cpp``).

- :func:`regex_find` runs ``llama_grammar_trigger_pattern::find`` (exported by ``libllama``) with a pattern compiled
  by ``std::regex`` (ECMAScript): the oracle for the regex dialect.
- :class:`CLazyGrammar` is ``llama_sampler_init_grammar_lazy_patterns``; ``accept`` catches the
  ``std::runtime_error`` llama.cpp throws ("Unexpected empty grammar stack after accepting piece") and reports it,
  which is what aborts every slot of llama-server (``server-context.cpp`` ``abort_all_slots``).

Example:
    >>> regex_find(r"<tool_call>", b"ok<tool_call>")          # doctest: +SKIP
    2
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from oracle.cxx import build_shim
from oracle.llama import CGrammar, VocabModel

HERE = Path(__file__).resolve().parent
SHIM_SRC = HERE / "shims" / "lazy_shim.cpp"


class RegexError(Exception):
    """``std::regex`` refused the pattern (``std::regex_error``)."""


class LlamaThrew(Exception):
    """llama.cpp threw while accepting a token (llama-server: 500 and every slot aborted)."""


@functools.cache
def _lib() -> ctypes.CDLL:
    from llama_cpp import llama_cpp as L

    lib = build_shim(SHIM_SRC)
    sp = L.llama_sampler_p_ctypes
    lib.lazy_regex_find.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_longlong), ctypes.c_char_p, ctypes.c_size_t]
    lib.lazy_regex_find.restype = ctypes.c_int
    lib.lazy_sampler_init.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                      ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.lazy_sampler_init.restype = sp
    lib.lazy_sampler_accept.argtypes = [sp, ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t]
    lib.lazy_sampler_accept.restype = ctypes.c_int
    lib.lazy_sampler_awaiting.argtypes = [sp]
    lib.lazy_sampler_awaiting.restype = ctypes.c_int
    lib.lazy_sampler_n_stacks.argtypes = [sp]
    lib.lazy_sampler_n_stacks.restype = ctypes.c_longlong
    return lib


def regex_find(pattern: str | bytes, text: bytes) -> int:
    """llama.cpp's trigger search: the replay start in ``text``, or -1. Raises RegexError if std::regex refuses."""
    p = pattern.encode() if isinstance(pattern, str) else pattern
    start = ctypes.c_longlong(-2)
    err = ctypes.create_string_buffer(512)
    rc = _lib().lazy_regex_find(p, len(p), text, len(text), ctypes.byref(start), err, len(err))
    if rc == 1:
        raise RegexError(err.value.decode(errors="replace"))
    if rc != 0:
        raise RuntimeError(f"std::regex threw while searching: {err.value.decode(errors='replace')}")
    return int(start.value)


class CLazyGrammar(CGrammar):
    """``llama_sampler_init_grammar_lazy_patterns`` on a vocab-only model (see ``oracle.llama``); ``allows``,
    ``mask``, ``clone`` and ``free`` are CGrammar's (the same sampler calls on a lazy sampler)."""

    def __init__(self, vm: VocabModel, gbnf: str | bytes, patterns: list[str] | tuple = (),
                 tokens: list[int] | tuple = (), root: str = "root", *, _smpl: object = None) -> None:
        if _smpl is None:
            text = gbnf.encode() if isinstance(gbnf, str) else gbnf
            pats = (ctypes.c_char_p * max(1, len(patterns)))(*[p.encode() if isinstance(p, str) else p
                                                                 for p in patterns])
            toks = (ctypes.c_int32 * max(1, len(tokens)))(*tokens)
            err = ctypes.create_string_buffer(512)
            _smpl = _lib().lazy_sampler_init(vm.vocab, text, root.encode(), pats, len(patterns), toks, len(tokens),
                                             err, len(err))
            if not _smpl:
                raise RegexError(err.value.decode(errors="replace") or "llama.cpp refused the grammar")
        super().__init__(vm, b"", root, _smpl=_smpl)

    @property
    def awaiting(self) -> bool:
        return _lib().lazy_sampler_awaiting(self.smpl) == 1

    def accept(self, token: int) -> None:
        """``llama_sampler_accept``; raises LlamaThrew where llama.cpp throws (the state is then llama.cpp's
        broken one: clone first if the walk goes on)."""
        err = ctypes.create_string_buffer(1024)
        if _lib().lazy_sampler_accept(self.smpl, int(token), err, len(err)):
            raise LlamaThrew(err.value.decode(errors="replace"))

    def throws_on(self, token: int) -> bool:
        """Whether accepting ``token`` now makes llama.cpp throw (tried on a clone)."""
        c = self.clone()
        try:
            c.accept(token)
        except LlamaThrew:
            return True
        finally:
            c.free()
        return False
