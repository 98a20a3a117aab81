"""``LazyGrammar``: a :class:`~constrained.grammar.Grammar` that carries its triggers, so that whatever calls
``grammar.matcher(vocab)`` (``constrained.llama.generate``, the server) gets a lazy matcher without a change.

Example:
    >>> g = lazy_grammar('root ::= "<call>" [a-z]+', [r"<call>"])
    >>> type(g).__name__, g.trigger_patterns
    ('LazyGrammar', ('<call>',))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..vocab import Vocabulary
from .grammar import Grammar
from .lazy import LazyMatcher
from .lazy_regex import TriggerPattern
from .matcher import compile_grammar

__all__ = ["LazyGrammar", "lazy_grammar"]


@dataclass(frozen=True)
class LazyGrammar(Grammar):
    """A :class:`Grammar` that carries its triggers: ``matcher(vocab)`` is lazy, so ``constrained.llama.generate``
    (or anything that calls ``grammar.matcher(vocab)``) runs it unchanged. Build it with :func:`lazy_grammar`."""

    trigger_patterns: tuple[str, ...] = ()
    trigger_tokens: tuple[int, ...] = ()

    def matcher(self, vocab: Vocabulary, *, trigger_patterns: Sequence[str] | None = None,
                trigger_tokens: Sequence[int] | None = None) -> LazyMatcher:
        return LazyMatcher(compile_grammar(self, vocab),
                           self.trigger_patterns if trigger_patterns is None else trigger_patterns,
                           self.trigger_tokens if trigger_tokens is None else trigger_tokens)

    def __reduce__(self) -> tuple:
        return (_rebuild_lazy, (Grammar.__reduce__(self)[1], self.trigger_patterns, self.trigger_tokens))


def _rebuild_lazy(args: tuple, patterns: tuple, tokens: tuple) -> LazyGrammar:
    return lazy_grammar(Grammar(*args), patterns, tokens)


def lazy_grammar(grammar: Grammar | str, trigger_patterns: Sequence[str] = (),
                 trigger_tokens: Sequence[int] = ()) -> LazyGrammar:
    """``grammar`` (a Grammar or GBNF text) made lazy with these triggers; patterns are checked now.

    >>> lazy_grammar('root ::= "{" [a-z]* "}"', trigger_tokens=[7]).trigger_tokens
    (7,)
    """
    if isinstance(grammar, str):
        grammar = Grammar.from_gbnf(grammar)
    if isinstance(trigger_patterns, (str, bytes)):
        raise TypeError("trigger_patterns must be a sequence of patterns, not one string")
    for p in trigger_patterns:
        TriggerPattern.compile(p)
    values = {f.name: getattr(grammar, f.name) for f in dataclasses.fields(Grammar)}
    return LazyGrammar(**values, trigger_patterns=tuple(trigger_patterns),
                       trigger_tokens=tuple(int(t) for t in trigger_tokens))
