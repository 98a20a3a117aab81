"""Bundled GBNF grammars, loadable by name (see README.md here for what each accepts and where they come from).

Example:
    >>> "json" in names()
    True
    >>> load("arithmetic").splitlines()[-1]
    'sp ::= " "?'
"""

from __future__ import annotations

from importlib import resources

__all__ = ["load", "names"]


def names() -> list[str]:
    """The names of the bundled grammars, sorted."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".gbnf"))


def load(name: str) -> str:
    """The GBNF text of the bundled grammar ``name`` (e.g. ``"json"``); KeyError for an unknown name."""
    if name not in names():
        raise KeyError(f"no bundled grammar {name!r}; available: {', '.join(names())}")
    return resources.files(__name__).joinpath(f"{name}.gbnf").read_text(encoding="utf-8")
