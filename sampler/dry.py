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

import weakref
from collections import deque
from typing import Any

import numpy as np

from . import mathf
from .candidates import Candidates
from .kernels import K

_F32 = np.float32
MAX_CHAR_LEN = 40
MAX_SEQ_LEN = 20

Breakers = dict[int, list[tuple[int, ...]]]
_cache: weakref.WeakKeyDictionary[Any, dict[tuple[bytes, ...], Breakers]] = weakref.WeakKeyDictionary()


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


# as get_overlapping_token_sequences
def _overlapping(vocab: Any, texts: list[bytes], s: bytes, out: Breakers) -> None:
    first = s[:1]
    for tid, word in enumerate(texts):
        if s in word:
            out.setdefault(tid, [])
            if () not in out[tid]:
                out[tid].append(())
            continue
        pos = word.find(first)
        while pos != -1:
            i = 1
            match = True
            while i < len(s) and i + pos < len(word):
                if word[pos + i] != s[i]:
                    match = False
                    break
                i += 1
            if match:
                tail = tuple(vocab.tokenize(s[i:], parse_special=False))[:MAX_SEQ_LEN]
                lst = out.setdefault(tid, [])
                if tail not in lst:
                    lst.append(tail)
            pos = word.find(first, pos + 1)


def process_breakers(vocab: Any, breakers: tuple[str | bytes, ...]) -> Breakers:
    """head token -> list of tails (an empty tail = single-token breaker); cached per vocabulary."""
    key = tuple(b.encode() if isinstance(b, str) else bytes(b) for b in breakers)
    try:
        per_vocab = _cache.setdefault(vocab, {})
    except TypeError:  # not weak-referenceable
        per_vocab = {}
    if key in per_vocab:
        return per_vocab[key]
    out: Breakers = {}
    if any(key):
        texts = token_texts(vocab)
        for s in key:
            if not s:
                continue
            _overlapping(vocab, texts, s[:MAX_CHAR_LEN], out)
    per_vocab[key] = out
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
