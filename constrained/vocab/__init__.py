"""The vocabulary layer: token pieces and end-of-generation ids exactly as llama.cpp loads them from a GGUF.

- :mod:`.vocabulary`: :class:`Vocabulary` and :class:`TokenAttr`.
- :mod:`.gguf_meta`: a fast reader of GGUF metadata (keys and arrays, no tensors).
- :mod:`._load`: llama.cpp's ``llama_vocab::load`` rules (token types, special ids, EOG set, detokenize flags).
- :mod:`._stdhash`: libstdc++'s ``std::hash<std::string>`` and ``unordered_map`` walk order, which decide some roles.

This layer imports only :mod:`constrained.errors` and ``sampler.cconv`` (the C runtime's ``strtol``, standalone).
"""

from __future__ import annotations

from .vocabulary import TokenAttr, Vocabulary

__all__ = ["TokenAttr", "Vocabulary"]
