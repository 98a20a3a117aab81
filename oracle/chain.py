"""llama-server's C sampler chain built from a :class:`sampler.Params`, through llama-cpp-python.

``CChain(params, n_vocab, vm=None)`` adds, as ``common_sampler_init`` does: logit bias (request biases, ignore_eos
EOG biases, the vocabulary's suppress tokens) first, then the ``samplers`` list (``temperature`` = temp-ext), then
dist(seed) or adaptive-p; with mirostat 1/2, temp then mirostat. Disabled samplers are llama.cpp's own "empty" ones.

``stages(logits)`` applies the samplers one by one to one array and records the array after each, for per-stage
comparison with our port.

Example:
    >>> c = CChain(Params(seed=1), 1000)                     # doctest: +SKIP
    >>> r = c.apply(np.zeros(1000, np.float32)); c.accept(r.token)  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from oracle.llama import TOKEN_DATA, Candidates, CandidatesResult, L, VocabModel
from sampler.params import Params


def _suppress(vm: VocabModel | None) -> list[int]:
    if vm is None:
        return []
    n = ctypes.c_int32(0)
    ptr = L.llama_vocab_get_suppress_tokens(vm.vocab, ctypes.byref(n))
    return [ptr[i] for i in range(n.value)] if n.value > 0 else []


def build_c_chain(p: Params, n_vocab: int, vm: VocabModel | None = None) -> ctypes.c_void_p:
    """A ``llama_sampler`` chain equal to ``common_sampler_init``'s for ``p``."""
    cp = L.llama_sampler_chain_default_params()
    cp.no_perf = True
    chain = L.llama_sampler_chain_init(cp)

    def add(s: ctypes.c_void_p) -> None:
        L.llama_sampler_chain_add(chain, s)

    merged: list[tuple[int, float]] = []
    for tok, b in p.logit_bias:
        if isinstance(tok, str):
            assert vm is not None
            merged += [(t, b) for t in vm.tokenize(tok.encode(), False)]
        else:
            merged.append((int(tok), b))
    if p.ignore_eos:
        assert vm is not None
        merged += [(i, -math.inf) for i in range(vm.n_vocab) if vm.is_eog(i)]
    merged += [(t, -math.inf) for t in _suppress(vm)]
    if merged:
        arr = (L.llama_logit_bias * len(merged))()
        for i, (t, b) in enumerate(merged):
            arr[i].token = t
            arr[i].bias = b
        add(L.llama_sampler_init_logit_bias(n_vocab, len(merged), arr))
    seed = p.seed
    if p.mirostat == 0:
        use_adaptive = False
        for name in p.samplers:
            if name == "dry":
                brs = [s.encode() for s in p.dry_sequence_breakers]
                carr = (ctypes.c_char_p * max(1, len(brs)))(*brs)
                add(L.llama_sampler_init_dry(vm.vocab if vm is not None else None, p.dry_multiplier, p.dry_base,
                                             p.dry_allowed_length, p.dry_penalty_last_n, carr, len(brs)))
            elif name == "top_k":
                add(L.llama_sampler_init_top_k(p.top_k))
            elif name == "top_p":
                add(L.llama_sampler_init_top_p(p.top_p, p.min_keep))
            elif name == "top_n_sigma":
                add(L.llama_sampler_init_top_n_sigma(p.top_n_sigma))
            elif name == "min_p":
                add(L.llama_sampler_init_min_p(p.min_p, p.min_keep))
            elif name == "xtc":
                add(L.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, seed))
            elif name == "typ_p":
                add(L.llama_sampler_init_typical(p.typ_p, p.min_keep))
            elif name == "temperature":
                add(L.llama_sampler_init_temp_ext(p.temp, p.dynatemp_range, p.dynatemp_exponent))
            elif name == "penalties":
                add(L.llama_sampler_init_penalties(n_vocab, p.penalty_last_n, p.penalty_repeat, p.penalty_freq,
                                                   p.penalty_present))
            elif name == "adaptive_p":
                use_adaptive = True
            else:
                raise NotImplementedError(name)
        if use_adaptive:
            add(L.llama_sampler_init_adaptive_p(p.adaptive_target, p.adaptive_decay, seed))
        else:
            add(L.llama_sampler_init_dist(seed))
    elif p.mirostat == 1:
        add(L.llama_sampler_init_temp(p.temp))
        add(L.llama_sampler_init_mirostat(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100))
    else:
        add(L.llama_sampler_init_temp(p.temp))
        add(L.llama_sampler_init_mirostat_v2(seed, p.mirostat_tau, p.mirostat_eta))
    return chain


class CChain:
    """The C chain plus a reusable candidate buffer."""

    def __init__(self, p: Params, n_vocab: int, vm: VocabModel | None = None) -> None:
        self.n_vocab = n_vocab
        self.chain = build_c_chain(p, n_vocab, vm)
        self.cand = Candidates(n_vocab)

    def apply(self, logits: np.ndarray, mask: np.ndarray | None = None) -> CandidatesResult:
        """set_logits + (optional grammar mask as -inf) + chain apply."""
        self.cand.fill(logits)
        if mask is not None:
            self.cand.buf["logit"][~mask] = -np.inf
        L.llama_sampler_apply(self.chain, ctypes.byref(self.cand.arr))
        return self.cand.result()

    def stages(self, logits: np.ndarray) -> list[CandidatesResult]:
        """Apply each sampler of the chain in turn to one array; the state after every stage."""
        self.cand.fill(logits)
        out = []
        for i in range(L.llama_sampler_chain_n(self.chain)):
            s = L.llama_sampler_chain_get(self.chain, i)
            L.llama_sampler_apply(s, ctypes.byref(self.cand.arr))
            out.append(self.cand.result())
        return out

    def names(self) -> list[str]:
        return [L.llama_sampler_name(L.llama_sampler_chain_get(self.chain, i)).decode()
                for i in range(L.llama_sampler_chain_n(self.chain))]

    def accept(self, tok: int) -> None:
        L.llama_sampler_accept(self.chain, tok)

    def reset(self) -> None:
        L.llama_sampler_reset(self.chain)

    def free(self) -> None:
        if self.chain:
            L.llama_sampler_free(self.chain)
            self.chain = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.free()
        except Exception:
            pass


__all__ = ["CChain", "build_c_chain", "TOKEN_DATA"]
