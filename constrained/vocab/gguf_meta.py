"""A fast reader for the metadata (key/value) section of a GGUF file.

The ``gguf`` package's ``GGUFReader`` builds a numpy view for every array element and parses the tensor section
too: for a 262,144-token vocabulary it takes 10-20 s. Here only the key/value section is read, with the type codes
of :class:`gguf.GGUFValueType`; string arrays come back as lists of ``bytes`` and numeric arrays as numpy arrays.
Arrays that are not needed (merges, scores...) are skipped without being decoded.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Container
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUF_MAGIC, GGUFValueType

from ..errors import VocabularyError
from . import _ext

_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i", GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_NUMPY = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2", GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4", GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "<u8", GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}
MAX_KV = 1 << 20


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes, path: Path) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise VocabularyError(f"{self.path}: truncated or corrupt GGUF metadata at byte {self.pos}")

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def string(self) -> bytes:
        n = self.unpack("<Q")
        self.need(n)
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(s)

    def skip_string(self) -> None:
        n = self.unpack("<Q")
        self.need(n)
        self.pos += n

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype == GGUFValueType.STRING:
            if keep:
                return self.string()
            self.skip_string()
            return None
        if vtype == GGUFValueType.ARRAY:
            etype = self.unpack("<I")
            count = self.unpack("<Q")
            if etype == GGUFValueType.STRING:
                if not keep:
                    end = _skip_strings(self.buf, self.pos, count) if _skip_strings is not None else -1
                    if end >= 0:
                        self.pos = end
                        return None
                    for _ in range(count):      # the reference (and the error at the right byte)
                        self.skip_string()
                    return None
                return [self.string() for _ in range(count)]
            if etype in _NUMPY:
                dt = np.dtype(_NUMPY[GGUFValueType(etype)])
                self.need(dt.itemsize * count)
                arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy() if keep else None
                self.pos += dt.itemsize * count
                return arr
            if etype == GGUFValueType.ARRAY:
                return [self.value(GGUFValueType.ARRAY, keep) for _ in range(count)]
            raise VocabularyError(f"{self.path}: unknown GGUF array element type {etype}")
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[GGUFValueType(vtype)])
        raise VocabularyError(f"{self.path}: unknown GGUF value type {vtype}")


def read_metadata(path: str | Path, skip: Container[str] = ()) -> dict[str, Any]:
    """Read the key/value metadata of a GGUF file.

    Args:
        path: the GGUF file.
        skip: keys whose values are skipped (not decoded) to save time, e.g. ``{"tokenizer.ggml.merges"}``.

    Returns:
        key → value: ints, floats, bools, ``bytes`` for strings, lists of ``bytes`` for string arrays and numpy
        arrays for numeric arrays.

    Raises:
        VocabularyError: the file is missing, is not GGUF, or its metadata is corrupt.

    Example:
        >>> meta = read_metadata("model.gguf", skip={"tokenizer.ggml.merges"})  # doctest: +SKIP
        >>> meta["tokenizer.ggml.model"]  # doctest: +SKIP
        b'llama'
    """
    p = Path(path)
    if not p.exists():
        raise VocabularyError(f"{p}: no such file")
    if not p.is_file():
        raise VocabularyError(f"{p}: not a regular file")
    with open(p, "rb") as f:
        try:
            buf: mmap.mmap | bytes = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            buf = b""
    try:
        cur = _Cursor(buf, p)
        if len(buf) < 8 or struct.unpack_from("<I", buf, 0)[0] != GGUF_MAGIC:
            raise VocabularyError(f"{p}: not a GGUF file (bad magic)")
        cur.pos = 4
        version = cur.unpack("<I")
        if version not in (2, 3):
            raise VocabularyError(f"{p}: unsupported GGUF version {version} (only 2 and 3 are read)")
        cur.unpack("<Q")  # tensor count
        n_kv = cur.unpack("<Q")
        if n_kv > MAX_KV:
            raise VocabularyError(f"{p}: implausible metadata count {n_kv}")
        out: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string().decode("utf-8", "replace")
            vtype = cur.unpack("<I")
            out[key] = cur.value(vtype, key not in skip)
        return out
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


_skip_strings: Any = getattr(_ext.read_ext, "skip_strings", None)   # the compiled string-array skip, if built

SAMPLING_PREFIX = "general.sampling."
_LARGE_KEYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.scores",
                         "tokenizer.ggml.token_type", "tokenizer.chat_template"})


def sampling_metadata(path: str | Path) -> dict[str, Any]:
    """The ``general.sampling.*`` entries of a GGUF's metadata (the vocabulary arrays skipped, not decoded): what
    ``sampler.Params.from_gguf`` applies (``common_init_sampler_from_model``).

    Raises:
        VocabularyError: as :func:`read_metadata`.

    Example:
        >>> from sampler import Params
        >>> Params.from_gguf(sampling_metadata("model.gguf")).top_k  # doctest: +SKIP
        40
    """
    meta = read_metadata(path, skip=_LARGE_KEYS)
    return {k: v for k, v in meta.items() if k.startswith(SAMPLING_PREFIX)}
