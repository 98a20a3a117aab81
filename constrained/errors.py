"""The exception tree of ``constrained``: one root, one subclass per kind of failure."""

from __future__ import annotations


class ConstrainedError(Exception):
    """Root of every error this package raises on purpose."""


class GrammarSyntaxError(ConstrainedError, ValueError):
    """A GBNF grammar that does not parse, or that llama.cpp would refuse.

    ``line`` and ``column`` are 1-based; ``source_line`` is the offending line of the grammar text.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None,
                 source_line: str | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        text = message
        if line is not None and column is not None:
            text = f"line {line}, column {column}: {message}"
            if source_line is not None:
                text += f"\n    {source_line}\n    {' ' * (column - 1)}^"
        super().__init__(text)


class GrammarLimitError(GrammarSyntaxError):
    """A grammar that exceeds a size or nesting limit (raised instead of hanging or exhausting memory)."""


class GrammarStateError(ConstrainedError, ValueError):
    """Rule vectors llama.cpp could not run (a bad rule reference, left recursion, a rule that expands forever)."""


class SchemaError(ConstrainedError, ValueError):
    """A JSON schema that cannot be converted; ``path`` is the JSON path of the offending keyword."""

    def __init__(self, message: str, *, path: str = "") -> None:
        self.message = message
        self.path = path
        super().__init__(message)


class VocabularyError(ConstrainedError, ValueError):
    """A vocabulary that cannot be read (missing file, not GGUF, no tokenizer)."""


class TriggerPatternError(GrammarSyntaxError):
    """A lazy grammar's trigger pattern std::regex refuses, or one whose libstdc++ behaviour is not reproduced here."""


class TriggerPatternBudgetError(TriggerPatternError):
    """A trigger pattern std::regex takes but only a backtracking search reproduces exactly, beyond the budget that
    keeps such a search bounded (``constrained.grammar.lazy_regex.BACKTRACK_CHOICES``); the server answers 400 with
    this message."""


class TokenIdError(ConstrainedError, ValueError, TypeError):
    """A token id that is not an integer (a float, a string, bytes...) or is outside the vocabulary."""


class GrammarRejectedToken(ConstrainedError, ValueError):
    """The engine produced a token the grammar does not allow (its mask was not applied, or was overridden)."""


class FlagError(ConstrainedError, ValueError):
    """A llama-server command line that cannot be used (unknown flag, bad value, unsupported feature)."""


class GenerationError(ConstrainedError):
    """Generation stopped by an error; ``generation`` holds what was produced until then."""

    def __init__(self, message: str, generation: object) -> None:
        super().__init__(message)
        self.generation = generation


class ChatTemplateError(ConstrainedError, ValueError):
    """A chat template that cannot be applied (llama-server answers these as errors)."""


class ToolError(ConstrainedError):
    """Bad ``tools`` / ``tool_choice`` (llama-server's message where it has one)."""
