"""DRY ("don't repeat yourself"), as ``llama_sampler_init_dry`` in ``src/llama-sampler.cpp``.

Sequence breakers are processed once per (vocabulary, breakers) pair and cached: every token's text (the
``detokenize({id}, special=true)`` rendering) that contains a breaker is a single-token breaker; a token whose text
ends with a proper prefix of a breaker becomes the head of a multi-token breaker whose tail is the tokenization of
the rest (at most 20 tokens). Breakers are cut to 40 bytes.

Example:
    >>> import numpy as np
    >>> from sampler.candidates import Candidates
    >>> d = Dry(1.0, 2.0, 1, 8, breakers={})
    >>> for t in [1, 2, 1]: d.accept(t)
    >>> c = Candidates.from_logits(np.zeros(3, np.float32)); d.apply(c); c.logits.tolist()
    [0.0, 0.0, -1.0]
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from . import mathf
from .candidates import Candidates
from .kernels import K

_F32 = np.float32
MAX_CHAR_LEN = 40
MAX_SEQ_LEN = 20

Breakers = dict[int, list[tuple[int, ...]]]
#: processed breaker lists kept per vocabulary (least recently used dropped beyond this)
CACHE_SIZE = 32
#: and at most this many heads in all the kept lists (about 70 bytes each: a dict slot and its int key)
CACHE_ENTRIES = 200_000
_cache: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[bytes, ...], Breakers]] = weakref.WeakKeyDictionary()
_index: weakref.WeakKeyDictionary[Any, _TextIndex] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _clean_spaces(t: bytes) -> bytes:
    # as the clean_spaces passes of llama_vocab::impl::detokenize
    if not t:
        return t
    b = bytearray(t)
    out = bytearray(b[:1])
    for i in range(1, len(b)):
        x = b[i]
        if b[i - 1] == 0x20 and x in b"?!.,":
            out.pop()
        out.append(x)
    b = out
    out = bytearray(b[:1])
    i = 1
    while i < len(b):
        x = b[i]
        if x == 0x27 and i + 1 < len(b) and b[i - 1] == 0x20 and b[i + 1] == 0x20:
            out.pop()       # the space before
            b[i + 1] = 0    # the space after is dropped (and no longer counts as a space)
            out.append(x)
            i += 2
            continue
        out.append(x)
        i += 1
    b = out
    out = bytearray(b[:1])
    for i in range(1, len(b)):
        x = b[i]
        if b[i - 1] == 0x20 and x == 0x27 and i + 1 < len(b):
            x1 = b[i + 1]
            if x1 in b"sm":
                out.pop()
            elif x1 not in b"td" and i + 2 < len(b):
                x2 = b[i + 2]
                if (x1, x2) in ((0x72, 0x65), (0x76, 0x65)):
                    out.pop()
        out.append(x)
    return bytes(out)


def _flags(vocab: Any) -> tuple[bool, bool]:
    """(add_space_prefix, clean_spaces) of a vocabulary: its own attributes when it has them, else a guess from
    the tokenizer type (SPM/UGM add a space prefix; WPM cleans spaces)."""
    vt = getattr(vocab, "vocab_type", "")
    asp = getattr(vocab, "add_space_prefix", None)
    cs = getattr(vocab, "clean_spaces", None)
    return (vt in ("spm", "ugm") if asp is None else bool(asp)), (vt == "wpm" if cs is None else bool(cs))


def token_text(vocab: Any, token: int) -> bytes:
    """``llama_vocab::detokenize({token}, true)``: the piece, one leading space dropped for vocabularies that add a
    space prefix, and the clean-up passes for those that clean spaces."""
    piece = vocab.pieces[token]
    add_space_prefix, clean = _flags(vocab)
    if add_space_prefix and piece[:1] == b" ":
        piece = piece[1:]
    if clean:
        piece = _clean_spaces(piece)
    return piece


def _texts_from_llama(vocab: Any) -> list[bytes] | None:
    """Every token's detokenized text straight from llama.cpp, for vocabularies made by Vocabulary.from_llama."""
    owner = getattr(vocab, "_llama_owner", None)
    if owner is None:
        return None
    try:
        import ctypes

        from llama_cpp import llama_cpp as L
    except ImportError:  # pragma: no cover
        return None
    model = getattr(owner, "_model", None)
    ptr = model.vocab if model is not None else owner
    buf = ctypes.create_string_buffer(512)
    one = (L.llama_token * 1)()
    out = []
    for i in range(len(vocab.pieces)):
        one[0] = i
        k = L.llama_detokenize(ptr, one, 1, buf, len(buf), False, True)
        if k < 0:
            big = ctypes.create_string_buffer(-k + 8)
            k = L.llama_detokenize(ptr, one, 1, big, len(big), False, True)
            out.append(big.raw[:k])
        else:
            out.append(buf.raw[:k])
    return out


def token_texts(vocab: Any) -> list[bytes]:
    """:func:`token_text` of every token (from llama.cpp itself when the vocabulary came from it)."""
    texts = _texts_from_llama(vocab)
    if texts is None:
        texts = [token_text(vocab, i) for i in range(len(vocab.pieces))]
    return texts


class _TextIndex:
    """Every token's text laid end to end (one ``bytes`` and its offsets, plus each text's last and
    ``MAX_CHAR_LEN``-from-the-end bytes as arrays), so a breaker is looked up over the whole vocabulary with a few
    numpy passes instead of a Python loop over 262k texts."""

    def __init__(self, texts: list[bytes]) -> None:
        self.texts = texts
        self.blob = b"".join(texts)
        lens = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
        self.lens = lens
        self.starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64) if len(texts) else lens
        self.ends = self.starts + lens
        self.arr = np.frombuffer(self.blob, dtype=np.uint8)
        # the byte k from the end of each text (k = 1 .. MAX_CHAR_LEN; 0 where the text is shorter)
        self.back = np.zeros((MAX_CHAR_LEN + 1, len(texts)), dtype=np.uint8)
        for k in range(1, MAX_CHAR_LEN + 1):
            ok = lens >= k
            self.back[k, ok] = self.arr[self.ends[ok] - k]

    def containing(self, s: bytes) -> np.ndarray:
        """Ids of the tokens whose text contains ``s``, sorted."""
        a = self.arr
        n = len(s)
        if n == 0 or len(a) < n:
            return np.zeros(0, dtype=np.int64)
        pos = np.flatnonzero(a[: len(a) - n + 1] == s[0])
        for j in range(1, n):
            if not pos.size:
                break
            pos = pos[a[pos + j] == s[j]]
        if not pos.size:
            return np.zeros(0, dtype=np.int64)
        tok = np.searchsorted(self.starts, pos, side="right") - 1
        inside = pos + n <= self.ends[tok]
        return np.unique(tok[inside])

    def ending_with_prefix(self, s: bytes) -> np.ndarray:
        """Ids of the tokens whose text ends with a non-empty proper prefix of ``s``, sorted (a superset check
        on the first and last byte of each candidate suffix, then exact)."""
        found = np.zeros(len(self.texts), dtype=bool)
        for k in range(1, len(s)):
            found |= (self.back[1] == s[k - 1]) & (self.back[k] == s[0]) & (self.lens >= k)
        return np.flatnonzero(found)


def _text_index(vocab: Any) -> _TextIndex:
    with _lock:
        try:
            idx = _index.get(vocab)
        except TypeError:
            idx = None
        if idx is None:
            idx = _TextIndex(token_texts(vocab))
            try:
                _index[vocab] = idx
            except TypeError:
                pass
        return idx


# as get_overlapping_token_sequences: every token containing s is a single-token breaker; every token whose text
# ends with a proper prefix of s heads a multi-token one (its tail the tokenization of the rest), one tail per
# matching suffix, longest first; tokens in id order
def _overlapping(vocab: Any, idx: _TextIndex, s: bytes, out: Breakers) -> None:
    inside = idx.containing(s)
    heads = idx.ending_with_prefix(s)
    inside_set = set(inside.tolist())
    todo = sorted(inside_set | set(heads.tolist()))
    texts = idx.texts
    tails: dict[int, tuple[int, ...]] = {}    # the tail depends only on the matched length: tokenized once each
    for tid in todo:
        if tid in inside_set:
            lst = out.setdefault(tid, [])
            if () not in lst:
                lst.append(())
            continue
        word = texts[tid]
        for k in range(min(len(word), len(s) - 1), 0, -1):     # the suffix of length k, longest first
            if word.endswith(s[:k]):
                tail = tails.get(k)
                if tail is None:
                    tail = tails[k] = tuple(vocab.tokenize(s[k:], parse_special=False))[:MAX_SEQ_LEN]
                lst = out.setdefault(tid, [])
                if tail not in lst:
                    lst.append(tail)


def process_breakers(vocab: Any, breakers: tuple[str | bytes, ...]) -> Breakers:
    """head token -> list of tails (an empty tail = single-token breaker); the last :data:`CACHE_SIZE` lists
    are kept per vocabulary."""
    key = tuple(b.encode() if isinstance(b, str) else bytes(b) for b in breakers)
    with _lock:
        try:
            per_vocab = _cache.get(vocab)
            if per_vocab is None:
                per_vocab = _cache[vocab] = OrderedDict()
        except TypeError:  # not weak-referenceable
            per_vocab = OrderedDict()
        hit = per_vocab.get(key)
        if hit is not None:
            per_vocab.move_to_end(key)
            return hit
    out: Breakers = {}
    if any(key):
        idx = _text_index(vocab)
        for s in key:
            if not s:
                continue
            _overlapping(vocab, idx, s[:MAX_CHAR_LEN], out)
    # heads with the same tails share one (never mutated) list: a breaker such as "s1" makes every token ending
    # in "s" a head with the same tail, ~20,000 lists of one tuple (3 MB a table on a 262,144-token vocabulary)
    shared: dict[tuple[tuple[int, ...], ...], list[tuple[int, ...]]] = {}
    for tid, lst in out.items():
        out[tid] = shared.setdefault(tuple(lst), lst)
    with _lock:
        per_vocab[key] = out
        per_vocab.move_to_end(key)
        # bounded by lists and by heads in all: the oldest dropped (the newest always kept)
        total = sum(len(t) for t in per_vocab.values())
        while len(per_vocab) > 1 and (len(per_vocab) > CACHE_SIZE or total > CACHE_ENTRIES):
            total -= len(per_vocab.popitem(last=False)[1])
    return out


class Dry:
    """``llama_sampler_init_dry(vocab, multiplier, base, allowed_length, last_n, breakers)``."""

    name = "dry"

    def __init__(self, multiplier: float, base: float, allowed_length: int, last_n: int, *,
                 breakers: Breakers) -> None:
        self.multiplier = _F32(multiplier)
        self.base = _F32(base)
        self.allowed = int(allowed_length)
        self.last_n = max(int(last_n), 0)
        self.breakers = breakers
        self.last: deque[int] = deque(maxlen=self.last_n if self.last_n > 0 else 1)

    def enabled(self) -> bool:
        return self.multiplier != 0.0 and self.base >= 1.0 and self.last_n != 0

    def accept(self, token: int) -> None:
        if not self.enabled():
            return
        self.last.append(int(token))

    # as llama_sampler_dry_apply
    def apply(self, c: Candidates) -> None:
        if not self.enabled():
            return
        n = min(len(self.last), self.last_n)
        if n <= self.allowed:
            return
        if K is not None:  # steps 1-3 in the kernel
            rep = K.dry_repeats(self.last, self.last_n, self.allowed, self.breakers)
            if rep is not None:
                self._penalize(c, rep)
            return
        toks = list(self.last)
        rat = toks[::-1]  # rat(i): i-th most recent
        rep_limit = n
        for i in range(n):
            tails = self.breakers.get(rat[i])
            if tails is None:
                continue
            longest = -1
            for tail in tails:
                sl = len(tail)
                if sl > longest and sl <= i:
                    if all(tail[o] == rat[i - o - 1] for o in range(sl)):
                        longest = sl
            if longest >= 0:
                rep_limit = i - longest
                break
        if rep_limit < self.allowed:
            return
        count = [0] * n
        last = n - 1
        rt = lt = 0
        for k in range(1, n):
            if k > rt:
                m = 0
                while m + k < n and rat[m] == rat[m + k]:
                    m += 1
                count[last - k] = min(m, rep_limit)
                if m > 0:
                    lt, rt = k, k + m - 1
            else:
                p = k - lt
                right = rt - k + 1
                if count[last - p] < right:
                    count[last - k] = min(count[last - p], rep_limit)
                else:
                    i = rt + 1
                    while i < n and rat[i] == rat[i - k]:
                        i += 1
                    count[last - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1
        maxrep: dict[int, int] = {}
        for i in range(n - 1):
            rl = count[i]
            if rl >= self.allowed:
                tok = rat[n - 2 - i]
                if maxrep.get(tok, -1) < rl:
                    maxrep[tok] = rl
        self._penalize(c, maxrep)

    def _penalize(self, c: Candidates, maxrep: dict[int, int]) -> None:
        # step 4: every candidate that would extend a repeat of at least allowed_length tokens
        max_exp = 0
        if self.base > _F32(1.000001):
            max_exp = int(_F32(_F32(88.7228391) / _F32(mathf.logf(float(self.base)))))
        if maxrep:
            if c.identity:  # ids 0..size-1: a token's position is the token
                size = c.size
                pos = [t for t in maxrep if 0 <= t < size]
                lg = c.own()
            else:
                ids = c.ids
                keys = np.fromiter(maxrep.keys(), dtype=np.int64, count=len(maxrep))
                pos = np.flatnonzero(np.isin(ids, keys)).tolist()
                lg = c.own()
            for j in pos:
                tok = j if c.identity else int(ids[j])
                tails = self.breakers.get(tok)
                if tails is not None and () in tails:
                    continue
                e = maxrep[tok] - self.allowed
                if max_exp > 0 and e > max_exp:
                    e = max_exp
                pen = _F32(float(self.multiplier) * mathf.pow_(float(self.base), float(e)))
                lg[j] = lg[j] - pen
        c.sorted = False

    def reset(self) -> None:
        self.last.clear()

    def clone(self) -> Dry:
        d = Dry(float(self.multiplier), float(self.base), self.allowed, self.last_n, breakers=self.breakers)
        d.last = deque(self.last, maxlen=self.last.maxlen)
        return d
