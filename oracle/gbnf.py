"""llama.cpp's GBNF parser itself (``llama_grammar_parser::parse``) through a small C++ shim of ours
(``oracle/shims/gbnf_parser_shim.cpp``), to compare symbol tables and rule vectors element for element.

The shim is compiled with g++ against the sdist's headers on first use into ``oracle/_build/`` (gitignored) and
linked to the ``libllama`` of llama-cpp-python, which exports the parser's methods.

Example:
    >>> ok, symbols, rules = llama_parse(b'root ::= "a"+')     # doctest: +SKIP
    >>> ok, symbols, rules[1]                                  # doctest: +SKIP
    (True, {'root': 0, 'root_1': 1}, ((3, 97), (2, 1), (1, 0), (0, 0)))
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from oracle.cxx import build_shim

HERE = Path(__file__).resolve().parent
SHIM_SRC = HERE / "shims" / "gbnf_parser_shim.cpp"


@functools.lru_cache(maxsize=1)
def _shim() -> ctypes.CDLL:
    lib = build_shim(SHIM_SRC, libs=("libllama.so",))
    lib.gbnf_shim_parse.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.gbnf_shim_parse.restype = ctypes.c_void_p
    lib.gbnf_shim_free.argtypes = [ctypes.c_void_p]
    lib.gbnf_shim_free.restype = None
    return lib


def llama_parse(text: bytes, vocab: int | ctypes.c_void_p | None = None
                ) -> tuple[bool, dict[str, int], tuple[tuple[tuple[int, int], ...], ...]]:
    """(parse() returned true, symbol_ids, rules) as ``llama_grammar_parser(vocab)`` leaves them; ``vocab`` is a
    ``llama_vocab *`` (e.g. ``vocab_model(path).vocab``) or None.

    On failure llama.cpp clears ``rules`` but keeps ``symbol_ids``; its message goes to stderr.
    """
    lib = _shim()
    ptr = lib.gbnf_shim_parse(text, vocab)
    try:
        out = ctypes.string_at(ptr).decode("utf-8", "surrogateescape")
    finally:
        lib.gbnf_shim_free(ptr)
    lines = out.split("\n")
    symbols: dict[str, int] = {}
    rules = []
    for line in lines[1:]:
        if line.startswith("S "):
            _, sid, name = line.split(" ", 2)
            symbols[name] = int(sid)
        elif line.startswith("R"):
            nums = [int(x) for x in line[1:].split()]
            rules.append(tuple(zip(nums[::2], nums[1::2], strict=True)))
    return lines[0] == "1", symbols, tuple(rules)
