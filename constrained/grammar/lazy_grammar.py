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
from typing import Any

from ..errors import SchemaError
from ..vocab import Vocabulary
from . import grammar as _grammar_module
from .grammar import Grammar, format_gbnf
from .kinds import parse_structural_tag, structural_tag_gbnf
from .lazy import LazyMatcher
from .lazy_regex import TriggerPattern, regex_escape

__all__ = ["LazyGrammar", "lazy_grammar"]


@dataclass(frozen=True)
class LazyGrammar(Grammar):
    """A :class:`Grammar` that carries its triggers: ``matcher(vocab)`` is lazy, so ``constrained.llama.generate``
    (or anything that calls ``grammar.matcher(vocab)``) runs it unchanged. Build it with :func:`lazy_grammar`."""

    trigger_patterns: tuple[str, ...] = ()
    trigger_tokens: tuple[int, ...] = ()

    def matcher(self, vocab: Vocabulary, *, trigger_patterns: Sequence[str] | None = None,
                trigger_tokens: Sequence[int] | None = None) -> LazyMatcher:
        m = Grammar.matcher(self, vocab,  # Grammar's: the checks of unique_rules come along
                            trigger_patterns=self.trigger_patterns if trigger_patterns is None else trigger_patterns,
                            trigger_tokens=self.trigger_tokens if trigger_tokens is None else trigger_tokens)
        assert isinstance(m, LazyMatcher)
        return m

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


def _structural_tag_grammar(cls: type[Grammar], spec: Any, triggers: Sequence[str] | None, enforce: str) -> Grammar:
    """:meth:`Grammar.from_structural_tag`: lazy until the first trigger unless ``at_least_one``."""

    unique: list[str] = []   # the unique arrays' rules of every schema (enforce="all"), under their new names

    def json_rules(schema: Any, prefix: str) -> tuple[str, list[str]]:
        g = cls.from_json_schema(schema, enforce=enforce)
        names = tuple(f"{prefix}{n}" for n in g.rule_names)
        unique.extend(f"{prefix}{n}" for n in g.unique_rules)
        return names[g.root_id].replace("_", "-"), format_gbnf(g.rules, names, g.token_texts).splitlines()

    st = parse_structural_tag(spec, triggers)
    lazy = not st.at_least_one
    grammar = cls.from_gbnf(structural_tag_gbnf(st, lazy=lazy, json_rules=json_rules))
    if unique:
        missing = [n for n in unique if n not in grammar.symbol_ids]
        if missing:   # never expected: the names are printed as given
            raise SchemaError(f"JSON schema error at #: the unique arrays' rules {missing} were renamed")
        grammar = dataclasses.replace(grammar, unique_rules=tuple(dict.fromkeys(unique)))
    if not lazy:
        return grammar
    return lazy_grammar(grammar, [regex_escape(t) for t in st.triggers])


_grammar_module._BUILDERS["structural_tag"] = _structural_tag_grammar
