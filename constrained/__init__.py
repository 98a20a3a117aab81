"""constrained: grammar-constrained decoding with llama.cpp's exact semantics.

The root imports only the light core (lark, numpy, jsonschema); integrations live in submodules.
"""

from __future__ import annotations

from .errors import (
    ChatTemplateError,
    ConstrainedError,
    FlagError,
    GenerationError,
    GrammarLimitError,
    GrammarRejectedToken,
    GrammarStateError,
    GrammarSyntaxError,
    SchemaError,
    TokenIdError,
    ToolError,
    TriggerPatternBudgetError,
    TriggerPatternError,
    VocabularyError,
)
from .vocab import TokenAttr, Vocabulary

__version__ = "0.1.0"

_LAZY = {
    "Grammar": ("constrained.grammar", "Grammar"),
    "GrammarMatcher": ("constrained.grammar.matcher", "GrammarMatcher"),
    "json_schema_to_gbnf": ("constrained.json_schema", "json_schema_to_gbnf"),
    "validate": ("constrained.json_schema.validation", "validate"),
}


def __getattr__(name: str):  # PEP 562: import the heavier modules on first use
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'constrained' has no attribute {name!r}")


__all__ = ["ChatTemplateError", "ConstrainedError", "FlagError", "GenerationError", "GrammarLimitError",
           "GrammarRejectedToken", "GrammarStateError", "GrammarSyntaxError", "SchemaError", "TokenAttr", "TokenIdError",
           "ToolError", "TriggerPatternBudgetError", "TriggerPatternError", "Vocabulary", "VocabularyError", *_LAZY]
