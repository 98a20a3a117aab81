"""llama.cpp's ``infill`` sampler (``llama_sampler_init_infill``), for fill-in-the-middle completion.

After a sorted softmax it either keeps only the end-of-generation tokens (when their probability mass is large
against the text tokens: ``3 * p_eog * n > p_txt``), or merges every token into a token whose text it prefixes
(into the more probable of the two), drops text tokens under p = 0.2, renormalizes, drops text tokens under
``1 / (n_text + 1)`` and renormalizes again. When no text token survives the first cut, the array becomes the single
EOT token (EOS if the vocabulary has no EOT) with logit 1.

Token texts are ``llama_token_to_piece(id, lstrip=0, special=false)``: empty for UNKNOWN/CONTROL tokens (never
merged), the ``special=true`` piece otherwise. This is derived from :attr:`constrained.Vocabulary.attrs`; a
vocabulary without attrs is taken to have no control tokens.

Known difference: llama.cpp renders pieces into a 512-byte buffer and its resize path for a longer piece
(``buf.resize(len)`` with a negative length) throws; this port compares pieces of any length.

Example:
    >>> import numpy as np
    >>> from constrained import Vocabulary
    >>> from sampler.candidates import Candidates
    >>> v = Vocabulary([b"a", b"ab", b"x", b""], eog_ids=[3], special_ids={"eot": 3})
    >>> c = Candidates.from_logits(np.array([2.0, 1.9, 0.1, -9.0], np.float32))
    >>> Infill(v).apply(c); c.ids.tolist()
    [0, 3]
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from .candidates import Candidates
from .dist import fsum_seq, softmax
from .stage import Stage

_F32 = np.float32
_NINF = _F32(-np.inf)
_ATTR_UNKNOWN_OR_CONTROL = (1 << 0) | (1 << 3)  # llama_token_attr UNKNOWN | CONTROL


class Infill(Stage):
    """The infill sampler over a ``constrained.Vocabulary`` (needs ``pieces``, ``eog_ids``, ``attrs``,
    ``special_ids['eot'/'eos']``).

    Raises:
        ValueError: (at apply time) only EOG tokens are left and the vocabulary has neither an EOT nor an EOS
            token (llama.cpp's ``GGML_ASSERT(cur_p->data[0].id != LLAMA_TOKEN_NULL)``).
    """

    def __init__(self, vocab: Any) -> None:
        self.vocab = vocab
        n = len(vocab)
        self._eog = np.zeros(n, dtype=bool)
        ids = [int(t) for t in vocab.eog_ids if 0 <= int(t) < n]
        self._eog[ids] = True
        sp = getattr(vocab, "special_ids", None) or {}
        eot = int(sp.get("eot", -1))
        self._end = eot if eot >= 0 else int(sp.get("eos", -1))
        self._text: dict[int, bytes] = {}
        #: which way the last apply went: "eog" (only EOG kept), "end" (only EOG left -> EOT/EOS), "text"
        self.last_branch = ""

    def _piece(self, tok: int) -> bytes:
        # as llama_vocab::impl::token_to_piece(tok, ..., lstrip=0, special=false)
        s = self._text.get(tok)
        if s is None:
            attrs = self.vocab.attrs
            s = b"" if attrs is not None and attrs[tok] & _ATTR_UNKNOWN_OR_CONTROL else bytes(self.vocab.pieces[tok])
            self._text[tok] = s
        return s

    def _merge(self, c: Candidates) -> None:
        """The "combine tokens with common prefix" double loop, visiting only the pairs where it acts."""
        lg = c.logits
        live = np.flatnonzero(lg != _NINF).tolist()
        if len(live) < 2:
            return
        ids = c.ids
        texts = [self._piece(int(ids[i])) for i in live]
        order = sorted(range(len(live)), key=texts.__getitem__)
        keys = [texts[j] for j in order]
        # for each i0 (ascending), the i1 != i0 whose text starts with text(i0), ascending
        plan: list[tuple[int, list[int]]] = []
        for j0, i0 in enumerate(live):
            t0 = texts[j0]
            if not t0:
                continue
            k = bisect.bisect_left(keys, t0)
            hits = []
            while k < len(keys) and keys[k].startswith(t0):
                j1 = order[k]
                if j1 != j0:
                    hits.append(live[j1])
                k += 1
            if hits:
                hits.sort()
                plan.append((i0, hits))
        if not plan:
            return
        lg = c.own()
        p = c.p
        for i0, hits in plan:
            for i1 in hits:
                if lg[i0] == _NINF:
                    break
                if lg[i1] == _NINF:
                    continue
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] = p[dst] + p[src]
                lg[src] = _NINF
                p[src] = _F32(0.0)

    def _cut(self, c: Candidates, thold: np.float32) -> tuple[np.ndarray, int]:
        eog = self._eog[c.ids]
        keep = np.flatnonzero(~((c.p < thold) & ~eog))
        return keep, int(np.count_nonzero(~eog[keep]))

    # as llama_sampler_infill_apply
    def apply(self, c: Candidates) -> None:
        softmax(c, True)
        eog = self._eog[c.ids]
        p = c.p
        p_eog = fsum_seq(p[eog])
        p_txt = fsum_seq(p[~eog])
        with np.errstate(invalid="ignore", over="ignore"):
            eog_wins = _F32(3.0) * p_eog * _F32(c.size) > p_txt
        if eog_wins:
            self.last_branch = "eog"
            keep = np.flatnonzero(eog)
            c.take(keep)
            with np.errstate(invalid="ignore", divide="ignore"):
                c.p = c.p / fsum_seq(c.p)
            return
        self._merge(c)
        keep, n_txt = self._cut(c, _F32(0.2))
        if n_txt == 0:
            if self._end < 0:
                raise ValueError("infill: only end-of-generation tokens are left and the vocabulary has no EOT/EOS")
            self.last_branch = "end"
            c.take(np.array([keep[0] if len(keep) else 0], dtype=np.intp))
            c.ids[0] = self._end
            c.own()[0] = _F32(1.0)
            return
        self.last_branch = "text"
        c.take(keep)
        with np.errstate(invalid="ignore", divide="ignore"):
            c.p = c.p / fsum_seq(c.p)
        keep, _ = self._cut(c, _F32(1.0 / (n_txt + 1)))
        c.take(keep)
        with np.errstate(invalid="ignore", divide="ignore"):
            c.p = c.p / fsum_seq(c.p)
