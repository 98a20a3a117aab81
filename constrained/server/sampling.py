"""Sampling per slot, as llama-server's ``process_token`` path: the slot's row of logits sampled by its own
:class:`sampler.Sampler` (``common_sampler_sample``; with a grammar, ``sample_constrained`` redraws refused
tokens), ``n_probs`` (``populate_token_probs``, before or after sampling), stop strings (full and partial
matches, ``find_stopping_strings``), cut-off UTF-8 held back, the limits, and the final result with its timings.

:class:`SlotSampling` is a part of :class:`~.engine.Engine` (a mixin).

Example:
    >>> _valid_utf8_len("é".encode()[:1]), _partial_stop(b"hello wor", b"world")
    (0, 6)
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np
from llama_cpp import llama_cpp as L

from sampler import token_probs
from sampler.reasoning_budget import DONE as RB_DONE
from sampler.reasoning_budget import IDLE as RB_IDLE
from sampler.stdalgo import sort_perm

from ..errors import ConstrainedError
from .slots import STOP_EOS, STOP_LIMIT, STOP_WORD, Final, Partial, Slot, TokenOut

__all__ = ["SlotSampling"]


class SlotSampling:
    """A slot's token drawn, checked against its stops and limits, and sent (methods of
    :class:`~.engine.Engine`)."""

    ctx: Any
    vocab: Any
    n_vocab: int
    ctx_shift: bool
    metrics: dict[str, Any]

    def _init_sampler(self, s: Slot) -> None:
        assert s.sampler is not None and s.task is not None
        s.sampler.reset()                     # init_sampler: common_sampler_reset, then the prompt tokens
        for t in s.task.tokens:
            s.sampler.accept(t)

    def _logits_row(self, row: int) -> np.ndarray:
        ptr = L.llama_get_logits_ith(self.ctx, row)
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                     shape=(self.n_vocab,)).copy()

    def _sample(self, s: Slot, row: int, t_decode: float) -> None:
        task = s.task
        assert task is not None and s.sampler is not None
        p = task.params
        logits = self._logits_row(row)
        m = s.matcher
        rb = s.sampler.rbudget
        # grammar_should_apply: a lazy grammar waits while the reasoning budget counts or forces (common/sampling.cpp)
        use_grammar = m is not None and (rb is None or not p.grammar_lazy or rb.state in (RB_IDLE, RB_DONE))
        if use_grammar:
            tok, _ = s.sampler.sample_constrained(logits, m.allows, m.mask)
        else:
            tok = s.sampler.sample(logits)
        # common_sampler_accept: the budget first; on its end, the matched end tag replayed into a grammar that did
        # not see the token (it may complete a trigger); then the grammar, then the chain
        if rb is not None:
            rb.accept(tok)
            if m is not None and not use_grammar and rb.state == RB_DONE and rb.end_match:
                for t in rb.end_match:
                    if not m.accept_token(t):
                        raise ConstrainedError(f"the grammar rejected the reasoning end token {t}")
        if use_grammar and not self.vocab.is_eog(tok) and not m.accept_token(tok):
            raise ConstrainedError(f"the grammar rejected the sampled token {tok}")
        s.sampler.accept(tok)
        s.n_decoded += 1
        now = time.perf_counter()
        if s.n_decoded == 1:
            s.t_prompt_done = now
        s.t_gen_last = now
        special = bool(p.preserved_tokens) and tok in p.preserved_tokens
        out = TokenOut(tok, self.piece(tok, special))
        n_probs = p.sampling.n_probs
        if n_probs > 0:
            self._token_probs(s, out, logits, n_probs, p.post_sampling_probs)
        s.sampled = tok
        if not self._process_token(s, out):
            self._finish(s)

    def _token_probs(self, s: Slot, out: TokenOut, logits: np.ndarray, n_probs: int, post: bool) -> None:
        # populate_token_probs
        if post:
            c = s.sampler.candidates if s.sampler is not None else None
            if c is None:
                return
            ids = np.asarray(c.ids)[: c.size]
            pr = np.asarray(c.p)[: c.size]
            if not c.sorted:
                order = sort_perm(pr, descending=True)
                ids, pr = ids[order], pr[order]
            hit = np.flatnonzero(ids == out.tok)
            if hit.size:
                out.prob = float(pr[hit[0]])
            for i in range(min(len(ids), n_probs)):
                if pr[i] == 0.0:
                    break
                out.probs.append((int(ids[i]), self.piece(int(ids[i])), float(pr[i])))
        else:
            r = token_probs(logits, out.tok, n_probs)
            out.prob = float(r.prob)
            out.probs = [(int(t), self.piece(int(t)), float(q)) for t, q in zip(r.ids, r.probs, strict=True)]

    def _process_token(self, s: Slot, out: TokenOut) -> bool:
        task = s.task
        assert task is not None
        p = task.params
        piece = out.text
        s.generated += piece
        if p.return_tokens:
            s.gen_tokens.append(out.tok)
        has_next = True
        incomplete = _valid_utf8_len(s.generated) < len(s.generated)
        is_eog = self.vocab.is_eog(out.tok)
        if not incomplete:
            pos = min(s.n_sent, len(s.generated))
            test = bytes(s.generated[pos:])
            send = True
            stop_pos = _find_stop(test, len(piece), p.stop, True, s)
            if stop_pos is not None:
                has_next = False
                del s.generated[pos + stop_pos:]
                pos = min(s.n_sent, len(s.generated))
            elif not is_eog:
                send = _find_stop(test, len(piece), p.stop, False, s) is None
            if send:
                out.text = bytes(s.generated[pos:])
                s.n_sent += len(out.text)
            else:
                out.text = b""
            s.probs.append(out)
            if p.stream:
                task.emit(Partial(task, out, s.n_decoded, len(task.tokens), s.n_cached,
                                  timings=self._timings(s) if p.timings_per_token else None))
        if not self.ctx_shift and len(s.tokens) + 1 >= s.n_ctx:   # no context shift: the slot is full
            s.truncated = True
            s.stop = STOP_LIMIT
            has_next = False
        if s.n_decoded > 0 and has_next and p.n_predict != -1 and p.n_predict - s.n_decoded <= 0:
            s.stop = STOP_LIMIT
            has_next = False
        if b"\n" in out.text:
            s.has_new_line = True
        if is_eog:
            s.stop = STOP_EOS
            has_next = False
        return has_next

    def _timings(self, s: Slot) -> dict[str, Any]:
        # server_slot_stats::to_json: whole microseconds; the prompt's time runs to its last batch (advanced after
        # every batch); the generation's from there, at least 1 us once a token is out; the rates count decode
        # steps, and the first token, from the prompt's logits, is not one
        t_prompt_ms = int((s.t_prompt_done - s.t_start) * 1e6) / 1000.0 if s.t_prompt_done else 0.0
        t_gen_ms = _gen_us(s) / 1000.0
        npp, ngen = s.n_processed, s.n_decoded
        steps = max(ngen - 1, 0)
        return {"cache_n": s.n_cached, "prompt_n": npp, "prompt_ms": t_prompt_ms,
                "prompt_per_token_ms": t_prompt_ms / npp if npp > 0 else 0.0,
                "prompt_per_second": 1e3 / t_prompt_ms * npp if t_prompt_ms > 0 else 0.0,
                "predicted_n": ngen, "predicted_ms": t_gen_ms,
                "predicted_per_token_ms": t_gen_ms / steps if steps > 0 else 0.0,
                "predicted_per_second": 1e3 / t_gen_ms * steps if t_gen_ms > 0 else 0.0}

    def _finish(self, s: Slot) -> None:
        task = s.task
        assert task is not None
        p = task.params
        probs = list(s.probs)
        if p.sampling.n_probs > 0 and not p.stream and s.stop == STOP_WORD and s.stopping_word:
            k = len(self.tokenize(s.stopping_word, False, False))
            probs = probs[: len(probs) - min(len(probs), k)]
        n_tokens_cached = len(s.tokens)
        self.metrics["tokens_predicted_total"] += s.n_decoded
        # metrics_on_prediction: the slot's generation time (1 us at least) and decode steps
        self.metrics["tokens_predicted_seconds_total"] += _gen_us(s) / 1e6
        self.metrics["tokens_predicted_steps_total"] = (self.metrics.get("tokens_predicted_steps_total", 0)
                                                        + max(s.n_decoded - 1, 0))
        fin = Final(task=task, id_slot=s.id, content=b"" if p.stream else bytes(s.generated),
                    tokens=[] if p.stream else list(s.gen_tokens), stop=s.stop, stopping_word=s.stopping_word,
                    n_decoded=s.n_decoded, n_prompt=len(task.tokens), n_cached_prompt=s.n_cached,
                    n_tokens_cached=n_tokens_cached, has_new_line=s.has_new_line, truncated=s.truncated,
                    probs=probs, prompt_text=self.detokenize(task.tokens, True).decode("utf-8", "replace"),
                    timings=self._timings(s))
        self._release(s)
        task.emit(fin)


def _valid_utf8_len(b: bytes | bytearray) -> int:
    # validate_utf8 (server-common.cpp:903): the length without a cut-off multi-byte character at the end
    n = len(b)
    for i in range(1, min(4, n) + 1):
        c = b[n - i]
        if (c & 0xE0) == 0xC0 and i < 2:
            return n - i
        if (c & 0xF0) == 0xE0 and i < 3:
            return n - i
        if (c & 0xF8) == 0xF0 and i < 4:
            return n - i
    return n


def _partial_stop(text: bytes, word: bytes) -> int | None:
    # string_find_partial_stop (common.h:862)
    if text and word:
        last = text[-1]
        for ln in range(min(len(text), len(word)), 0, -1):
            if word[ln - 1] == last and text.endswith(word[:ln]):
                return len(text) - ln
    return None


def _find_stop(text: bytes, last_size: int, words: list[str], full: bool, s: Slot) -> int | None:
    # server_slot::find_stopping_strings
    stop_pos = None
    for w in words:
        wb = w.encode("utf-8")
        if full:
            tmp = len(wb) + last_size
            frm = len(text) - tmp if len(text) > tmp else 0
            pos = text.find(wb, frm)
            pos = None if pos < 0 else pos
        else:
            pos = _partial_stop(text, wb)
        if pos is not None and (stop_pos is None or pos < stop_pos):
            if full:
                s.stop = STOP_WORD
                s.stopping_word = w
            stop_pos = pos
    return stop_pos


def _gen_us(s: Slot) -> int:
    """``server_slot_stats::t_gen_us``: 0 before the first token, else at least 1 us."""
    return max(1, int((s.t_gen_last - s.t_prompt_done) * 1e6)) if s.t_gen_last else 0
