"""The harness's emulation of llama-server's common_sampler_sample equals the real one (through our C++ shim).

Runs on the default model with injected logits (heavy ties, -inf entries), with a JSON grammar that forces
redraws, over several sampler configurations and seeds.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from oracle.llama import CGrammar

JSON_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
'''

CONFIGS = [
    dict(),
    dict(temp=1.5, top_k=0, top_p=1.0, min_p=0.0),
    dict(temp=0.0),
    dict(temp=-1.0, top_k=5),
    dict(penalty_repeat=1.3, penalty_freq=0.2, penalty_present=0.1, penalty_last_n=16, top_k=200, typ_p=0.9),
    dict(dry_multiplier=0.8, dry_allowed_length=1, xtc_probability=0.7, xtc_threshold=0.05, top_n_sigma=1.5,
         dynatemp_range=0.5, min_keep=3),
    dict(mirostat=1, temp=1.2),
    dict(mirostat=2, mirostat_tau=3.0),
    dict(adaptive_target=0.4, samplers="kpma"),
]


@pytest.fixture(scope="module")
def model(default_model_path):
    from oracle.server import InjectedLogits, load_model, vocab_model_of

    m = load_model(default_model_path)
    ctx = InjectedLogits(m)
    yield SimpleNamespace(model=m, ctx=ctx, vm=vocab_model_of(m, default_model_path))
    ctx.free()


def _logits(rng: np.random.Generator, n: int) -> np.ndarray:
    x = np.round(rng.normal(0, 3, n) * 2) / 2                # heavy ties: half-integer grid
    x[rng.random(n) < 0.01] = -np.inf
    return x.astype(np.float32)


@pytest.mark.parametrize("cfg", range(len(CONFIGS)), ids=lambda i: "-".join(f"{k}={v}" for k, v in CONFIGS[i].items()) or "defaults")
def test_emulation_equals_common_sampler_sample(model, cfg: int) -> None:
    from oracle.server import EmulatedServerSampler, ServerSampler

    redraws = 0
    for seed in (1, 42):
        params = SimpleNamespace(seed=seed, **CONFIGS[cfg])
        real = ServerSampler(model.model, params, grammar=JSON_GBNF)
        plain = ServerSampler(model.model, params)      # same chain construction, no grammar
        emu = EmulatedServerSampler(plain.chain, CGrammar(model.vm, JSON_GBNF), model.ctx.n_vocab)
        rng = np.random.default_rng(seed * 100 + cfg)
        prompt = rng.integers(0, model.ctx.n_vocab, 12).tolist()
        for t in prompt:                                 # llama-server accepts every prompt token (not the grammar)
            real.accept(t, False)
            emu.accept(t, False)
        for _ in range(40):
            logits = _logits(rng, model.ctx.n_vocab)
            model.ctx.write(logits)
            tok_real = real.sample(model.ctx.ctx)
            tok_emu, redrawn = emu.sample(logits)
            assert tok_emu == tok_real
            redraws += redrawn
            real.accept(tok_real, True)
            emu.accept(tok_emu, True)
            if model.vm.is_eog(tok_real):
                break
        real.free()
        plain.free()
    assert redraws > 0, "the grammar never forced a redraw: the test would not exercise the redraw path"
