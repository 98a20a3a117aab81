"""sampler: llama-server's sampler chain, token for token with the same seed, and the s2 profile.

- :class:`Params`: llama-server's sampling parameters (defaults, GGUF defaults, request fields and refusals).
- :class:`Sampler`: the chain (``sample``, ``sample_constrained`` = ``common_sampler_sample``, ``accept``...).
- :func:`token_probs`: the probabilities llama-server reports (``n_probs``).
- :class:`S2Params` / :class:`S2Sampler`: the s2 profile (sorted softmax, joint top-k/top-p, temperature,
  ``std::discrete_distribution``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# every name on first use (PEP 562), so that a module that needs only ``sampler.cconv`` (the C runtime's number
# conversions, read by constrained.vocab and constrained.json_schema) does not load the chain and its kernels
_LAZY = {"Sampler": ("sampler.chain", "Sampler"), "Params": ("sampler.params", "Params"),
         "TokenProbs": ("sampler.probs", "TokenProbs"), "logprob": ("sampler.probs", "logprob"),
         "token_probs": ("sampler.probs", "token_probs"),
         "S2Params": ("sampler.s2", "S2Params"), "S2Sampler": ("sampler.s2", "S2Sampler"),
         "Mt19937": ("sampler.rng", "Mt19937")}

if TYPE_CHECKING:
    from .chain import Sampler
    from .params import Params
    from .probs import TokenProbs, logprob, token_probs
    from .rng import Mt19937
    from .s2 import S2Params, S2Sampler


def __getattr__(name: str):  # PEP 562
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'sampler' has no attribute {name!r}")


__all__ = ["Mt19937", "Params", "S2Params", "S2Sampler", "Sampler", "TokenProbs", "logprob", "token_probs"]
assert sorted(__all__) == sorted(_LAZY)
