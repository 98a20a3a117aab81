"""The compiled rule representation: llama.cpp's own (``llama_grammar_element`` vectors).

Each rule is a flat tuple of ``(type, value)`` elements: alternatives are separated by ``ALT`` and the rule ends
with ``END``, exactly as ``llama_grammar_parser`` lays them out, so that the matcher can follow llama.cpp's runtime
step for step and ``test-grammar-parser.cpp``'s expectations can be compared element for element.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum


class ElementType(IntEnum):
    """``llama_gretype`` values."""

    END = 0             # end of rule definition
    ALT = 1             # start of alternate definition for rule
    RULE_REF = 2        # non-terminal element: reference to rule (value = rule id)
    CHAR = 3            # terminal: character (code point)
    CHAR_NOT = 4        # inverse char(s) ([^a], [^a-b] [^abc])
    CHAR_RNG_UPPER = 5  # modifies a preceding CHAR or CHAR_ALT to be an inclusive range ([a-z])
    CHAR_ALT = 6        # modifies a preceding CHAR or CHAR_RNG_UPPER to add an alternate char ([ab], [a-zA])
    CHAR_ANY = 7        # any character (.)
    TOKEN = 8           # a specific token id (<[id]>)
    TOKEN_NOT = 9       # any token but this id (!<[id]>)


Element = tuple[int, int]
"""``(ElementType, value)``."""


@dataclass(frozen=True)
class ParsedGrammar:
    """Rules as llama.cpp lays them out, with token references resolved to ids.

    Attributes:
        rules: ``rules[i]`` is the element vector of rule id ``i`` (ALT-separated, END-terminated).
        symbol_ids: rule name → id, including the generated helper rules (``root_2``...).
        root_id: the id of the start rule.
    """

    rules: tuple[tuple[Element, ...], ...]
    symbol_ids: Mapping[str, int] = field(default_factory=dict)
    root_id: int = 0
