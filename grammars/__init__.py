"""Bundled GBNF grammars, loadable by name (see README.md here)."""
