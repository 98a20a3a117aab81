"""The grammar layer: llama.cpp's grammar engine, GBNF text -> rules -> stacks -> matcher and masks.

- :mod:`.gbnf` (+ ``gbnf.lark``, :mod:`._gbnf_text`): GBNF text parsed with lark into llama.cpp's rules.
- :mod:`.ir`: the rule representation (``llama_grammar_element``) and its static checks.
- :mod:`.grammar`: :class:`Grammar`, the immutable parsed grammar and its constructors (GBNF, bundled, JSON schema).
- :mod:`.stacks`: the pushdown stacks of ``llama_grammar_advance_stack`` / ``accept``.
- :mod:`.tokenindex`: the vocabulary preprocessed for the mask walk.
- :mod:`.mask`: the vocabulary mask walk's driver (the compiled walk ``_walk``) and the per-suffix walk; below it
  :mod:`.walk_python` (the Python reference walk), :mod:`.charclass` (the table through one character class),
  :mod:`.packing` (rows <-> token-id bits) and :mod:`.limits` (``MatcherLimits``, the work budget).
- :mod:`.token_mask_cache`: the adaptive token mask cache (``TokenMaskCache``, the masks of a set of stacks).
- :mod:`.matcher`: :class:`CompiledGrammar` and :class:`GrammarMatcher`, the matcher verbs (``allows``, ``mask``,
  ``accept_token``...).
- :mod:`.bitmask`, :mod:`.lazy`: packed token bitmasks; lazy grammars with triggers.

This layer imports :mod:`constrained.errors`, :mod:`constrained.vocab`, :mod:`constrained.json_schema` (the
schema front end, which produces GBNF text) and the bundled grammars; nothing above them.
"""

from __future__ import annotations

from . import lazy_grammar as _lazy_grammar  # noqa: E402, F401 - registers Grammar.from_structural_tag
from .grammar import Grammar
from .matcher import CompiledGrammar, GrammarMatcher, compile_grammar

__all__ = ["CompiledGrammar", "Grammar", "GrammarMatcher", "compile_grammar"]
