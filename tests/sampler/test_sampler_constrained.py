"""Sampler.sample_constrained against llama-server's common_sampler_sample (grammar_first = false), as emulated by
oracle/server.py's EmulatedServerSampler over llama.cpp's C chain and C grammar (itself proven equal to the
real function in tests/sampler/test_oracle_server.py): identical tokens and identical redraw flags, redraws included."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from constrained.vocab import Vocabulary  # noqa: E402
from oracle.cases.sampler import random_logits  # noqa: E402
from oracle.chain import CChain  # noqa: E402
from oracle.llama import CGrammar, vocab_model  # noqa: E402
from oracle.sdist import llama_cpp_source, vocab_gguf  # noqa: E402
from sampler.chain import Sampler  # noqa: E402
from sampler.params import Params  # noqa: E402

server = pytest.importorskip("oracle.server")

GRAMMARS = {
    "digits": 'root ::= [0-9]+ ("." [0-9]+)? "\\n"',
    "words": 'root ::= (" the" | " cat" | " sat" | " on" | " mat")+ "."',
}


def _params(rng: np.random.Generator, i: int) -> Params:
    base = Params(seed=int(rng.integers(0, 2**32 - 1)))
    variants = [
        {}, {"temp": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0}, {"xtc_probability": 1.0, "xtc_threshold": 0.05},
        {"mirostat": 2}, {"mirostat": 1, "temp": 1.2}, {"samplers": ("top_k", "adaptive_p"), "adaptive_target": 0.3},
        {"temp": 0.0}, {"penalty_repeat": 1.3, "penalty_last_n": 16, "dynatemp_range": 0.5},
    ]
    return base.replace(**variants[i % len(variants)])


@pytest.mark.parametrize("gname", list(GRAMMARS))
def test_sample_constrained_matches_server(gname: str) -> None:
    vm = vocab_model(vocab_gguf("gpt-2"))
    v = Vocabulary.from_llama(vm.vocab)
    n = vm.n_vocab
    rng = np.random.default_rng(len(gname))
    redraws = steps = 0
    gbnf = GRAMMARS[gname] if gname != "json" else (llama_cpp_source() / "grammars" / "json.gbnf").read_text()
    for i in range(8):
        p = _params(rng, i)
        c = CChain(p, n, vm)
        with CGrammar(vm, gbnf) as g_c, CGrammar(vm, gbnf) as g_ours:
            emu = server.EmulatedServerSampler(c.chain, g_c, n)
            ours = Sampler(p, v)
            for t in rng.integers(0, n, size=10).tolist():  # prompt: chain only, not the grammar
                emu.accept(t, False)
                ours.accept(t)
            for _ in range(12):
                lg = random_logits(rng, n, str(rng.choice(["normal", "ties", "wide"])))
                want, redrew_c = emu.sample(lg)
                got, redrew = ours.sample_constrained(lg, g_ours.allows, g_ours.mask)
                assert (got, redrew) == (want, redrew_c), (i, p)
                redraws += redrew
                steps += 1
                if v.is_eog(got) and not g_c.allows(got):
                    break
                emu.accept(got, True)
                g_ours.accept(got)
                ours.accept(got)
                if g_ours.mask().sum() == 0:
                    break
        c.free()
    assert redraws >= 10 and steps >= 60


def test_redraw_uses_fresh_logits_and_same_rng() -> None:
    lg = np.array([5.0, 4.0, 0.0, -1.0], np.float32)
    a = Sampler(Params(seed=11, top_k=0, top_p=1.0, min_p=0.0, temp=1.0))
    b = a.clone()
    tok, redrew = a.sample_constrained(lg, lambda t: t == 3, lambda: np.array([0, 0, 0, 1], bool))
    assert (tok, redrew) == (3, True)
    # the same generator drew twice: b must now be one draw behind a
    b.sample(lg)
    b.sample(lg)
    assert a.sample(lg) == b.sample(lg)
