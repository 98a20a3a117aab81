"""The infill sampler (sampler/infill.py) against llama.cpp's ``llama_sampler_init_infill`` on the same logits.

Standalone: the C sampler over a vocab-only model and ours over the same vocabulary get identical logits (a few
hundred finite entries, the rest -inf, so llama.cpp's O(n^2) prefix loop stays fast): prefix families with tied
logits (merging), dominant EOG tokens (only EOG kept), many small text tokens (only EOG left -> EOT/EOS), p exactly
at the 0.2 and 1/(n+1) thresholds. The whole array must match: ids in order, logit and p bits, size, sorted flag.
In a chain: ``top_k, infill, temperature`` (and other orders) against llama-server's own chain
(``common_sampler_init`` through oracle/server.py) for multi-step sequences, token by token.
"""

from __future__ import annotations

import bisect

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from constrained import Vocabulary  # noqa: E402
from oracle.cases.sampler import random_logits, same_state  # noqa: E402
from oracle.llama import Candidates, L, vocab_model  # noqa: E402
from oracle.sdist import vocab_gguf  # noqa: E402
from oracle.server import EmulatedServerSampler, ServerSampler  # noqa: E402
from sampler.candidates import Candidates as Ours  # noqa: E402
from sampler.chain import Sampler  # noqa: E402
from sampler.infill import Infill  # noqa: E402
from sampler.params import Params  # noqa: E402

N_STANDALONE = 60
VOCABS = ["gpt-2", "llama-spm", "qwen2", "deepseek-coder", "starcoder"]
COUNTS = {"standalone": 0, "eog_branch": 0, "eot_only": 0, "two_cuts": 0, "text_cut": 0, "chain_seq": 0,
          "chain_steps": 0,
          "chain_eog": 0, "chain_end": 0, "chain_text": 0}


class VocabCase:
    def __init__(self, name: str) -> None:
        path = vocab_gguf(name)
        self.vm = vocab_model(path)
        self.path = path
        self.v = Vocabulary.from_llama(self.vm.vocab)  # llama.cpp's own EOT/EOS ids (see test_vocab_loaders_agree)
        self.n = self.vm.n_vocab
        self.cand = Candidates(self.n)
        self.smpl = L.llama_sampler_init_infill(self.vm.vocab)
        self.eog = sorted(self.v.eog_ids)
        inf = Infill(self.v)
        texts = [(inf._piece(i), i) for i in range(self.n) if not self.v.is_eog(i)]
        texts = [(p, i) for p, i in texts if p]
        texts.sort()
        self.keys = [p for p, _ in texts]
        self.tids = [i for _, i in texts]
        self.short = [j for j, p in enumerate(self.keys) if len(p) <= 3]

    def family(self, rng: np.random.Generator) -> list[int]:
        """A random short token and tokens whose piece starts with its piece (the short token first)."""
        out: list[int] = []
        for _ in range(50):
            t = self.keys[self.short[int(rng.integers(0, len(self.short)))]]
            k = bisect.bisect_left(self.keys, t)
            out = []
            while k < len(self.keys) and self.keys[k].startswith(t) and len(out) < 40:
                out.append(self.tids[k])
                k += 1
            if len(out) >= 2:
                return out
        return out


_CASES: dict[str, VocabCase] = {}


def case(name: str) -> VocabCase:
    if name not in _CASES:
        _CASES[name] = VocabCase(name)
    return _CASES[name]


def make_logits(vc: VocabCase, rng: np.random.Generator, mode: str) -> np.ndarray:
    lg = np.full(vc.n, -np.inf, np.float32)
    ties = np.array([0.0, 0.5, 1.0, 1.5, 3.0], np.float32)
    if mode == "merge":
        ids = vc.family(rng) + vc.family(rng) + list(rng.integers(0, vc.n, 20))
        lg[ids] = rng.choice(ties, len(ids))
        lg[rng.choice(vc.eog)] = float(rng.choice([-40.0, -25.0, -4.0]))
    elif mode == "eog":
        ids = list(rng.integers(0, vc.n, int(rng.integers(1, 80))))
        lg[ids] = rng.choice(ties, len(ids))
        eg = rng.choice(vc.eog, int(rng.integers(1, len(vc.eog) + 1)), replace=False)
        lg[eg] = rng.choice([0.0, 1.0, 3.0, 6.0], len(eg))
    elif mode == "eot_only":  # many small text tokens, a rare EOG: the 0.2 cut leaves only EOG tokens
        ids = rng.choice(vc.n, int(rng.integers(6, 60)), replace=False)
        lg[ids] = rng.choice([0.0, 0.0, 0.5], len(ids))
        lg[rng.choice(vc.eog)] = float(rng.choice([-40.0, -30.0, -20.0]))
    elif mode == "thresh":  # k tied tokens: p exactly 1/k, at or around 0.2 and 1/(n+1)
        k = int(rng.choice([2, 3, 4, 5, 6]))
        ids = rng.choice(vc.n, k + int(rng.integers(0, 4)), replace=False)
        lg[ids[:k]] = 2.0
        lg[ids[k:]] = rng.choice([-9.0, 0.0, 1.0], len(ids) - k)
        if rng.random() < 0.5:
            lg[rng.choice(vc.eog)] = float(rng.choice([-40.0, -25.0, -5.0]))
    else:  # random, many ties, a few hundred live entries
        ids = rng.choice(vc.n, int(rng.integers(1, 300)), replace=False)
        lg[ids] = random_logits(rng, len(ids), "ties")
        if rng.random() < 0.5:
            lg[rng.choice(vc.eog)] = float(rng.choice([-40.0, -20.0, rng.normal() * 3]))
    return lg


@pytest.mark.parametrize("name", VOCABS)
def test_vocab_loaders_agree(name: str) -> None:
    # what infill reads: pieces (special=false rendering via attrs), EOG ids, EOT/EOS ids
    vc = case(name)
    other = Vocabulary.from_gguf(vc.path)
    assert other.pieces == vc.v.pieces and other.eog_ids == vc.v.eog_ids and other.attrs == vc.v.attrs
    a, b = Infill(vc.v), Infill(other)
    for t in range(0, vc.n, max(1, vc.n // 2000)):
        assert a._piece(t) == b._piece(t) == vc.vm.piece(t, special=False), t
    assert vc.v.special_ids["eos"] == other.special_ids["eos"] == L.llama_vocab_eos(vc.vm.vocab)
    # qwen2 has two EOT texts: from_gguf follows llama.cpp's unordered_map walk (constrained/_stdhash.py)
    assert vc.v.special_ids["eot"] == other.special_ids["eot"] == L.llama_vocab_eot(vc.vm.vocab)


@pytest.mark.parametrize("name", VOCABS)
def test_infill_standalone_oracle(name: str) -> None:
    vc = case(name)
    ours = Infill(vc.v)
    rng = np.random.default_rng(len(name) * 7919)
    modes = ["merge", "eog", "eot_only", "thresh", "random"]
    for it in range(N_STANDALONE):
        mode = modes[it % len(modes)]
        lg = make_logits(vc, rng, mode)
        r = vc.cand.apply(vc.smpl, lg)
        c = Ours.from_logits(lg)
        ours.apply(c)
        same_state(c, r, f"{name} case {it} ({mode})")
        COUNTS["standalone"] += 1
        COUNTS[{"eog": "eog_branch", "end": "eot_only", "text": "two_cuts"}[ours.last_branch]] += 1
        if ours.last_branch == "text" and np.count_nonzero(np.isfinite(lg)) > len(r.ids) and \
                np.any(np.isin(r.ids, np.flatnonzero(np.isfinite(lg)))):
            COUNTS["text_cut"] += 1


def test_branches_covered() -> None:
    # each branch of llama_sampler_infill_apply was reached by the oracle cases above
    assert COUNTS["standalone"] >= N_STANDALONE * len(VOCABS), COUNTS
    assert COUNTS["eog_branch"] >= 30 and COUNTS["eot_only"] >= 30 and COUNTS["two_cuts"] >= 60, COUNTS


@pytest.mark.parametrize("name", VOCABS)
def test_prefix_pair_merges(name: str) -> None:
    # two tied tokens, one's text a prefix of the other's: llama.cpp keeps one with p = 1 (without the merge both
    # would stay at p = 0.5); ours must give the same array
    vc = case(name)
    rng = np.random.default_rng(11)
    merged = 0
    for _ in range(30):
        fam = vc.family(rng)
        lg = np.full(vc.n, -np.inf, np.float32)
        lg[fam[:2]] = 0.0
        lg[vc.eog[0]] = -20.0
        r = vc.cand.apply(vc.smpl, lg)
        c = Ours.from_logits(lg)
        Infill(vc.v).apply(c)
        same_state(c, r, f"{name} pair {fam[:2]}")
        merged += int(len([t for t in r.ids if int(t) not in vc.v.eog_ids]) == 1)
    assert merged == 30


def test_only_eog_no_end_token_raises() -> None:
    # six tied text tokens (p = 1/6 < 0.2 each) and a rare EOG: only EOG is left, and there is no EOT/EOS to put
    pieces = [b"a", b"b", b"c", b"d", b"e", b"f", b"<e>"]
    lg = np.array([0.0] * 6 + [-9.0], np.float32)
    v = Vocabulary(pieces, eog_ids=[6], attrs=[4] * 6 + [8])
    c = Ours.from_logits(lg)
    with pytest.raises(ValueError, match="no EOT/EOS"):
        Infill(v).apply(c)
    w = Vocabulary(pieces, eog_ids=[6], attrs=[4] * 6 + [8], special_ids={"eot": -1, "eos": 6})
    c = Ours.from_logits(lg)
    Infill(w).apply(c)
    assert c.ids.tolist() == [6] and c.logits.tolist() == [1.0]


def test_chain_needs_vocab() -> None:
    with pytest.raises(ValueError, match="vocabulary"):
        Sampler(Params(samplers=("top_k", "infill", "temperature"), seed=1))


CHAINS = [("top_k", "infill", "temperature"), ("top_k", "infill", "temperature"), ("top_k", "temperature", "infill"),
          ("top_k", "top_p", "infill", "min_p", "temperature")]


@pytest.mark.parametrize("name", VOCABS)
def test_infill_in_server_chain(name: str) -> None:
    vc = case(name)
    rng = np.random.default_rng(1000 + len(name))
    n_seq = 12
    for s in range(n_seq):
        samplers = CHAINS[s % len(CHAINS)]
        p = Params(samplers=samplers, seed=int(rng.integers(0, 2**32 - 1)),
                   top_k=int(rng.choice([1, 5, 20, 40, 100])), temp=float(rng.choice([0.0, 0.5, 0.8, 1.3])),
                   top_p=float(rng.choice([0.5, 0.95, 1.0])), min_p=float(rng.choice([0.0, 0.05, 0.3])))
        ss = ServerSampler(vc.vm.model, p)
        try:
            emu = EmulatedServerSampler(ss.chain, None, vc.n)
            ours = Sampler(p, vc.v)
            for t in rng.integers(0, vc.n, int(rng.integers(0, 8))):
                ours.accept(int(t))
                emu.accept(int(t), False)
            for step in range(6):
                lg = random_logits(rng, vc.n, str(rng.choice(["ties", "ties", "normal", "ties_inf", "flat"])))
                if rng.random() < 0.4:  # push EOG tokens and a prefix family up to reach every branch
                    lg[np.array(vc.eog)] = float(lg.max()) - float(rng.choice([0.0, 1.0, 3.0]))
                if rng.random() < 0.5:
                    lg[np.array(vc.family(rng))] = float(lg.max())
                tok_c, _ = emu.sample(lg)
                tok = ours.sample(lg)
                assert ours.candidates is not None
                same_state(ours.candidates, emu.last, f"{name} seq {s} step {step} {samplers}")
                assert tok == tok_c
                inf = next(st for st in ours.steps if isinstance(st, Infill))
                COUNTS["chain_" + inf.last_branch] += 1
                ours.accept(tok)
                emu.accept(tok_c, True)
                COUNTS["chain_steps"] += 1
        finally:
            ss.free()
        COUNTS["chain_seq"] += 1


def test_report_counts() -> None:
    print("infill oracle comparisons:", COUNTS)
    assert COUNTS["chain_seq"] >= 50, COUNTS
    assert COUNTS["chain_eog"] > 0 and COUNTS["chain_end"] > 0 and COUNTS["chain_text"] > 0, COUNTS
