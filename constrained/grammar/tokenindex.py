"""Vocabulary preprocessing for the grammar matcher, done once per :class:`~constrained.vocab.Vocabulary`.

Every token piece is decoded to code points with llama.cpp's lenient partial-UTF-8 decoder (``decode_utf8`` in
src/llama-grammar.cpp), and the results are laid out as flat numpy arrays (a "token table") that the vectorised
mask walk in :mod:`constrained.grammar.mask` consumes. The index is shared by every grammar compiled for the vocabulary.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> idx = vocab_index(Vocabulary([b"a", b"\\xc3", b"\\xa9x", b""], eog_ids=[3]))
    >>> idx.table.ids.tolist(), idx.table.length.tolist(), idx.table.rem.tolist()
    ([0, 1, 2, 3], [1, 0, 0, 0], [0, 1, -1, -1])
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..vocab import Vocabulary

_NA_NONE = 1 << 40      # "no code point from 128 on" in TokenTable.summary
_LOOKUP = (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4)


def decode_utf8(piece: bytes, value: int = 0, n_remain: int = 0) -> tuple[list[int], int, int]:
    """Decode ``piece`` continuing a partial sequence, exactly as llama.cpp's ``decode_utf8(src, partial_start)``.

    Returns ``(code_points, value, n_remain)``: the code points (without llama.cpp's terminating 0, but with any
    zero code point an overlong sequence produced) and the partial state at the end. Decoding stops at a NUL byte.
    An invalid sequence (a stray continuation byte, or a non-continuation byte where a pending sequence needs one)
    gives ``([], 0, -1)``. Continuation bytes of a *new* sequence are not checked, as in llama.cpp.

    Example:
        >>> decode_utf8("é".encode()[:1]), decode_utf8(b"\\xa9!", 3, 1)
        (([], 3, 1), ([233, 33], 33, 0))
    """
    nul = piece.find(b"\0")
    if nul >= 0:
        piece = piece[:nul]
    n = len(piece)
    pos = 0
    cps: list[int] = []
    rem = n_remain
    # continue the previous sequence, if any
    while pos < n and rem > 0:
        b = piece[pos]
        if (b >> 6) != 2:
            return [], 0, -1
        value = (value << 6) + (b & 0x3F)
        pos += 1
        rem -= 1
    if n_remain > 0 and rem == 0:
        cps.append(value)
    while pos < n:
        first = piece[pos]
        rem = _LOOKUP[first >> 4] - 1
        if rem < 0:
            return [], 0, -1
        value = first & ((1 << (7 - rem)) - 1)
        pos += 1
        while pos < n and rem > 0:
            value = (value << 6) + (piece[pos] & 0x3F)
            pos += 1
            rem -= 1
        if rem == 0:
            cps.append(value)
    return cps, value, rem


def _decode_fast(piece: bytes) -> tuple[list[int], int, int]:
    """``decode_utf8(piece)`` from a clean state; valid UTF-8 without NUL takes Python's decoder (same result)."""
    if b"\0" not in piece:
        try:
            cps = [ord(c) for c in piece.decode("utf-8")]
        except UnicodeDecodeError:
            pass
        else:
            return cps, (cps[-1] if cps else 0), 0
    return decode_utf8(piece)


def apply_view(cps: list[int]) -> list[int]:
    """The code points ``llama_grammar_apply_impl`` looks at: up to (not including) the first 0."""
    try:
        return cps[:cps.index(0)]
    except ValueError:
        return cps


@dataclass
class TokenTable:
    """Decoded candidates as flat arrays (row ``r`` is token ``ids[r]``).

    ``flat[start[r]:start[r] + length[r]]`` are the code points ``apply`` sees; ``rem``/``val`` the final partial
    UTF-8 state (``rem`` -1 = invalid, which every stack rejects).
    """

    ids: np.ndarray      # int64 [n]
    start: np.ndarray    # int64 [n]
    length: np.ndarray   # int64 [n], non-increasing: rows are sorted by length, longest first
    flat: np.ndarray     # int64 [total]
    rem: np.ndarray      # int64 [n]
    val: np.ndarray      # int64 [n]
    order0: np.ndarray = None    # rows with length > 0 sorted by first code point (then by row)
    cp0: np.ndarray = None       # first code points in that order
    longer: np.ndarray = None    # longer[d] = number of rows with length > d (= first row with length <= d)
    inv: np.ndarray = None       # row of each token id, when the table holds every id once (the vocabulary table)
    lex: tuple = None            # (order, columns): see build_lex (the vocabulary table)

    @property
    def n(self) -> int:
        return len(self.ids)

    def col(self, d: int) -> np.ndarray:
        """The code point at depth ``d`` of rows ``0 .. longer[d]-1`` (built once per depth, int32)."""
        cols = self.__dict__.setdefault("_cols", {})
        c = cols.get(d)
        if c is None:
            k = int(self.longer[d])
            c = cols[d] = self.flat[self.start[:k] + d].astype(np.int32)
        return c

    def build_lex(self, depth: int = 4) -> None:
        """A token trie as sorted arrays: ``lex = (order, cols)``, ``order`` the rows with code points sorted by their
        first ``depth`` code points (then by row), ``cols[d]`` the code point at depth ``d`` in that order (-1 past the
        end). The rows sharing a prefix of ``d < depth`` code points are then one slice of ``order``, within which
        ``cols[d]`` is sorted (those that end first): a class test at depth ``d`` is a binary search per range."""
        k0 = int(self.longer[0]) if len(self.longer) else 0
        cols = []
        for d in range(depth):
            k = int(self.longer[d]) if d < len(self.longer) else 0
            c = np.full(k0, -1, dtype=np.int32)
            if k:
                c[:k] = self.col(d)
            cols.append(c)
        order = np.lexsort(cols[::-1]) if k0 else np.zeros(0, dtype=np.int64)
        self.lex = (order, [c[order] for c in cols])

    def summary(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per row, which code points it holds, in brief: ``(lo, hi, na_min, na_max)``, the bits of its ASCII code
        points below 64 and from 64 to 127 (uint64), and its smallest and largest code point from 128 on
        (``_NA_NONE`` and -1 if it has none). Built once per table (the vocabulary's up front)."""
        s = self.__dict__.get("_summary")
        if s is None:
            n = self.n
            off, v = self._row_codepoints()
            length = self.length
            lo = np.zeros(n, dtype=np.uint64)
            hi = np.zeros(n, dtype=np.uint64)
            na_min = np.full(n, _NA_NONE, dtype=np.int64)
            na_max = np.full(n, -1, dtype=np.int64)
            nz = np.flatnonzero(length > 0)
            if len(nz):
                bit = np.left_shift(np.uint64(1), (v & 63).astype(np.uint64))
                zero = np.uint64(0)
                at = off[nz]
                lo[nz] = np.bitwise_or.reduceat(np.where(v < 64, bit, zero), at)
                hi[nz] = np.bitwise_or.reduceat(np.where((v >= 64) & (v < 128), bit, zero), at)
                na_min[nz] = np.minimum.reduceat(np.where(v >= 128, v, _NA_NONE), at)
                na_max[nz] = np.maximum.reduceat(np.where(v >= 128, v, -1), at)
            s = self.__dict__["_summary"] = (lo, hi, na_min, na_max)
        return s

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rem, ids)`` as int8 and int32 (built once per table, the vocabulary's up front): the compiled loop
        shortcut reads these instead of the int64 columns."""
        c = self.__dict__.get("_compact")
        if c is None:
            c = self.__dict__["_compact"] = (self.rem.astype(np.int8), self.ids.astype(np.int32))
        return c

    def ascii_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """An inverted index of the ASCII code points: ``(off, rows)``, the rows holding code point ``c < 128`` are
        ``rows[off[c]:off[c + 1]]`` (ascending, a row once per occurrence). Built once per table (the vocabulary's
        up front); with it the rows wholly inside a class that excludes a few ASCII code points (a JSON string's
        characters) are found from those code points' rows alone."""
        a = self.__dict__.get("_ascii_rows")
        if a is None:
            n = self.n
            _, v = self._row_codepoints()
            owner = np.repeat(np.arange(n, dtype=np.int64), self.length)
            low = v < 128
            c, owner = v[low], owner[low]
            o = np.argsort(c.astype(np.uint8), kind="stable")     # the same order: a radix sort on 8 bits
            a = self.__dict__["_ascii_rows"] = (np.searchsorted(c[o], np.arange(129)).astype(np.int64),
                                                np.ascontiguousarray(owner[o], dtype=np.int64))
        return a

    def _row_codepoints(self) -> tuple[np.ndarray, np.ndarray]:
        """``(off, v)``: every row's code points back to back in row order (``v``), row ``r``'s from ``off[r]``
        (a caller that asks twice may hold them in ``_rowcp`` meanwhile, as VocabIndex does)."""
        rc = self.__dict__.get("_rowcp")
        if rc is not None:
            return rc
        length = self.length
        off = np.zeros(self.n, dtype=np.int64)
        if self.n:
            np.cumsum(length[:-1], out=off[1:])
        v = self.flat[np.repeat(self.start - off, length) + np.arange(int(length.sum()))]
        return off, v

    def _finish(self) -> TokenTable:
        length = self.length
        top = int(length.max()) if len(length) else 0
        # a stable sort is one order: on 16 bits numpy's stable sort is a radix sort
        o = np.argsort(-length.astype(np.int16) if top < 1 << 15 else -length, kind="stable")
        if not np.array_equal(o, np.arange(len(o))):
            self.ids, self.start, self.length = self.ids[o], self.start[o], length[o]
            self.rem, self.val = self.rem[o], self.val[o]
            self.perm = o
        else:
            self.perm = None
        length = self.length
        nz = np.flatnonzero(length > 0)
        first = self.flat[self.start[nz]]
        o0 = np.argsort(first, kind="stable")
        self.order0, self.cp0 = nz[o0], first[o0]
        top = int(length[0]) if len(length) else 0
        self.longer = np.searchsorted(-length, -np.arange(top + 2), side="left")
        return self

    @classmethod
    def build(cls, ids: list[int], decoded: list[tuple[list[int], int, int]]) -> TokenTable:
        """A table of ``decoded`` ``(code_points, value, n_remain)`` for token ``ids`` (reordered by length)."""
        n = len(ids)
        length = np.fromiter((len(d[0]) for d in decoded), dtype=np.int64, count=n)
        start = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(length[:-1], out=start[1:])
        total = int(length.sum())
        flat = np.fromiter((c for d in decoded for c in d[0]), dtype=np.int64, count=total)
        rem = np.fromiter((d[2] for d in decoded), dtype=np.int64, count=n)
        val = np.fromiter((d[1] if d[2] > 0 else 0 for d in decoded), dtype=np.int64, count=n)
        return cls(np.asarray(ids, dtype=np.int64), start, length, flat, rem, val)._finish()

    def shifted(self, rows: np.ndarray, depths: np.ndarray) -> TokenTable:
        """The candidates ``rows`` with their first ``depths`` code points dropped (sharing ``flat``).

        The result's rows are reordered by length; its ``perm`` maps them back to positions in ``rows``.
        """
        t = TokenTable(self.ids[rows], self.start[rows] + depths, self.length[rows] - depths, self.flat,
                       self.rem[rows], self.val[rows])._finish()
        if t.perm is None:
            t.perm = np.arange(len(rows))
        return t


def _vocab_table(pieces: tuple[bytes, ...], skip: np.ndarray) -> TokenTable:
    """The apply-side table of every token id (``skip``: EOG/empty/NUL-led, given no code points and rem -1).

    The compiled decode (``_walk.decode_pieces``) where it is built, else :func:`_vocab_table_python` (the
    reference; the same arrays bit for bit).
    """
    from .stacks import _walk_ext

    if _walk_ext is not None and type(pieces) is tuple:
        n = len(pieces)
        length, rem, val, flat = (np.frombuffer(b, dtype=np.int64)
                                  for b in _walk_ext.decode_pieces(pieces, np.ascontiguousarray(skip, dtype=np.uint8)))
        start = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(length[:-1], out=start[1:])
        return TokenTable(np.arange(n, dtype=np.int64), start, length, flat, rem, val)._finish()
    return _vocab_table_python(pieces, skip)


def _vocab_table_python(pieces: tuple[bytes, ...], skip: np.ndarray) -> TokenTable:
    """:func:`_vocab_table` in Python: valid UTF-8 pieces without NUL (nearly all) are decoded in one pass with
    Python's decoder (same code points as the port); the others go through :func:`decode_utf8` one by one."""
    n = len(pieces)
    fast = np.zeros(n, dtype=bool)
    slow: dict[int, tuple[list[int], int, int]] = {}
    for i, p in enumerate(pieces):
        if skip[i]:
            continue
        if b"\0" not in p:
            try:
                p.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                fast[i] = True
                continue
        c, v, r = decode_utf8(p)
        slow[i] = (apply_view(c), v if r > 0 else 0, r)
    fast_ids = np.flatnonzero(fast)
    blob = b"".join([pieces[i] for i in fast_ids.tolist()])
    cps = np.frombuffer(blob.decode("utf-8").encode("utf-32-le"), dtype="<u4").astype(np.int64)
    starts = (np.frombuffer(blob, dtype=np.uint8) & 0xC0) != 0x80
    blen = np.fromiter((len(pieces[i]) for i in fast_ids.tolist()), dtype=np.int64, count=len(fast_ids))
    boff = np.zeros(len(fast_ids), dtype=np.int64)
    np.cumsum(blen[:-1], out=boff[1:])
    counts = np.add.reduceat(starts.astype(np.int64), boff) if len(fast_ids) else np.zeros(0, np.int64)
    length = np.zeros(n, dtype=np.int64)
    rem = np.where(skip, -1, 0).astype(np.int64)
    val = np.zeros(n, dtype=np.int64)
    length[fast_ids] = counts
    for i, (c, v, r) in slow.items():
        length[i], rem[i], val[i] = len(c), r, v
    start = np.zeros(n, dtype=np.int64)
    np.cumsum(length[:-1], out=start[1:])
    flat = np.zeros(int(length.sum()), dtype=np.int64)
    vstart = np.zeros(len(fast_ids), dtype=np.int64)
    np.cumsum(counts[:-1], out=vstart[1:])
    flat[np.repeat(start[fast_ids] - vstart, counts) + np.arange(len(cps))] = cps
    for i, (c, _, _) in slow.items():
        flat[start[i]:start[i] + len(c)] = c
    return TokenTable(np.arange(n, dtype=np.int64), start, length, flat, rem, val)._finish()


class VocabIndex:
    """Per-vocabulary decoded pieces, shared by all compiled grammars (see :func:`vocab_index`)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.n_vocab = n = len(vocab)
        self.pieces = vocab.pieces
        self.eog = np.zeros(n, dtype=bool)
        for i in vocab.eog_ids:
            self.eog[i] = True
        self.eog_ids = np.flatnonzero(self.eog)
        # tokens llama_grammar_apply_impl masks before looking at the grammar: empty pieces, a leading NUL
        # the first byte of every piece (256 for an empty one), from the pieces joined
        plen = np.fromiter(map(len, self.pieces), dtype=np.int64, count=n)
        blob = np.frombuffer(b"".join(self.pieces), dtype=np.uint8)
        first = np.full(n, 256, dtype=np.int64)
        has = plen > 0
        if n:
            poff = np.zeros(n, dtype=np.int64)
            np.cumsum(plen[:-1], out=poff[1:])
            first[has] = blob[poff[has]]
        self.dead = ((first == 256) | (first == 0)) & ~self.eog
        self._full: dict[int, tuple[list[int], int, int]] = {}   # accept-side decodes, filled on demand
        self.table = _vocab_table(self.pieces, self.eog | self.dead)
        inv = np.empty(n, dtype=np.intp)        # ids is a permutation of 0..n-1: its inverse by a scatter
        inv[self.table.ids] = np.arange(n, dtype=np.intp)
        self.table.inv = inv
        for d in range(len(self.table.longer) - 1):     # the per-depth code point columns, built up front
            self.table.col(d)
        self.table.__dict__["_rowcp"] = self.table._row_codepoints()   # read by both, then dropped
        self.table.summary()
        self.table.ascii_rows()
        del self.table.__dict__["_rowcp"]
        self.table.compact()
        self.table.build_lex()
        # tokens whose piece starts with a continuation byte: the only ones a pending partial sequence can take
        self.cont_ids = np.flatnonzero(has & ((first >> 6) == 2) & ~self.eog).tolist()
        self._partial_tables: OrderedDict[tuple[int, int], TokenTable] = OrderedDict()
        # per-suffix walks (constrained.grammar.mask.LocalInfo) shared by all grammars, keyed on the rules' structure
        self.shared_local: OrderedDict[tuple, object] = OrderedDict()
        self.shared_local_bytes = 128 << 20     # bound on the bytes those walks hold
        self.shared_local_held = 0
        self._shared_cost: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def shared_get(self, key: tuple) -> object | None:
        """A per-suffix walk shared between grammars (LRU), or None."""
        with self._lock:
            li = self.shared_local.get(key)
            if li is not None:
                self.shared_local.move_to_end(key)
            return li

    def shared_put(self, key: tuple, info: object, nbytes: int) -> None:
        """Keep a per-suffix walk, evicting the least recently used past ``shared_local_bytes``."""
        with self._lock:
            if key in self.shared_local:
                return
            self.shared_local[key] = info
            self._shared_cost[key] = nbytes
            self.shared_local_held += nbytes
            while self.shared_local_held > self.shared_local_bytes and len(self.shared_local) > 1:
                k, _ = self.shared_local.popitem(last=False)
                self.shared_local_held -= self._shared_cost.pop(k)

    def decode(self, token: int, value: int, n_remain: int) -> tuple[list[int], int, int]:
        """The accept-side decode of ``token`` from partial state ``(value, n_remain)``."""
        if n_remain <= 0:
            d = self._full.get(token)
            if d is None:
                d = self._full[token] = _decode_fast(self.pieces[token])
            return d
        return decode_utf8(self.pieces[token], value, n_remain)

    def partial_table(self, value: int, n_remain: int) -> TokenTable:
        """The candidates that can continue a pending sequence, decoded from it (cached, LRU)."""
        key = (value, n_remain)
        with self._lock:
            t = self._partial_tables.get(key)
            if t is not None:
                self._partial_tables.move_to_end(key)
                return t
        dec = [decode_utf8(self.pieces[i], value, n_remain) for i in self.cont_ids]
        t = TokenTable.build(self.cont_ids, [(apply_view(c), v, r) for c, v, r in dec])
        with self._lock:
            self._partial_tables[key] = t
            if len(self._partial_tables) > 256:
                self._partial_tables.popitem(last=False)
        return t


_INDEXES: weakref.WeakKeyDictionary[Vocabulary, VocabIndex] = weakref.WeakKeyDictionary()
_INDEX_LOCK = threading.Lock()


def vocab_index(vocab: Vocabulary) -> VocabIndex:
    """The :class:`VocabIndex` of ``vocab``, built on first use and kept while the vocabulary lives."""
    with _INDEX_LOCK:
        idx = _INDEXES.get(vocab)
        if idx is None:
            idx = _INDEXES[vocab] = VocabIndex(vocab)
        return idx
