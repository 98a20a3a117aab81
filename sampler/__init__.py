"""sampler: llama-server's sampler chain, token for token with the same seed, and the s2 profile.

- :class:`Params`: llama-server's sampling parameters (defaults, GGUF defaults, request fields and refusals).
- :class:`Sampler`: the chain (``sample``, ``sample_constrained`` = ``common_sampler_sample``, ``accept``...).
- :func:`token_probs`: the probabilities llama-server reports (``n_probs``).
- :class:`S2Params` / :class:`S2Sampler`: the s2 profile (sorted softmax, joint top-k/top-p, temperature,
  ``std::discrete_distribution``).
"""

from __future__ import annotations

from .chain import Sampler
from .params import Params
from .probs import TokenProbs, logprob, token_probs

_LAZY = {"S2Params": ("sampler.s2", "S2Params"), "S2Sampler": ("sampler.s2", "S2Sampler"),
         "Mt19937": ("sampler.rng", "Mt19937")}


def __getattr__(name: str):  # PEP 562
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'sampler' has no attribute {name!r}")


__all__ = ["Params", "Sampler", "TokenProbs", "logprob", "token_probs", *_LAZY]
