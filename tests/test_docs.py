"""The documentation: the site builds without a warning, and every public path README.md and docs/ show imports.

The site (``mkdocs.yml``, pages in ``docs/``, the API reference from the docstrings through mkdocstrings) is built
with ``--strict`` into a temporary folder: a broken link, a missing page or a docstring mkdocstrings cannot resolve
fails the suite. README.md's and the pages' Python blocks have their imports of ``constrained`` / ``sampler``
executed, and every dotted path of ours they name in backticks must resolve (a module, or an attribute of one).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OURS = ("constrained", "sampler")


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config_dir / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, cwd=config_dir, env=env, timeout=600)


def test_site_builds_without_warnings(tmp_path: Path) -> None:
    r = _build(ROOT, tmp_path / "site")
    assert r.returncode == 0, r.stderr[-4000:]
    assert "WARNING" not in r.stderr, r.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("GrammarMatcher", "accept_token", "from_request", "ConstrainedError", "strtol"):
        assert name in api, name                         # the reference really comes from the docstrings


def test_a_warning_fails_the_build(tmp_path: Path) -> None:
    """--strict is in force: a page with a broken link does not build."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    with open(tmp_path / "docs" / "index.md", "a", encoding="utf-8") as f:
        f.write("\n[a page that does not exist](nowhere.md)\n")
    r = _build(tmp_path, tmp_path / "site")
    assert r.returncode != 0
    assert "nowhere.md" in r.stderr


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _import_statements(doc: Path) -> list[str]:
    out = []
    for block in _python_blocks(doc.read_text(encoding="utf-8")):
        for line in block.splitlines():
            for stmt in line.split("#", 1)[0].split(";"):
                stmt = stmt.strip()
                m = re.match(r"(?:from\s+([\w.]+)\s+import\s+.+|import\s+([\w.]+))$", stmt)
                if m and (m.group(1) or m.group(2)).split(".")[0] in OURS:
                    out.append(stmt)
    return out


def _dotted_paths(doc: Path) -> set[str]:
    spans = re.findall(r"`([^`\n]+)`", doc.read_text(encoding="utf-8"))
    out = set()
    for span in spans:
        for m in re.finditer(r"\b((?:constrained|sampler)(?:\.[A-Za-z_]\w*)+)", span):
            out.add(m.group(1))
    return out


def _resolve(path: str) -> object:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if e.name and ".".join(parts[:i]).startswith(e.name) and e.name.split(".")[0] in OURS:
                continue                              # not a module of ours: an attribute further up
            raise
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_shown_imports_work(doc: Path) -> None:
    stmts = _import_statements(doc)
    for stmt in stmts:
        exec(stmt, {})                                   # noqa: S102 - the statement as the reader would type it


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_named_paths_resolve(doc: Path) -> None:
    bad = []
    for path in sorted(_dotted_paths(doc)):
        try:
            _resolve(path)
        except (ImportError, AttributeError) as e:
            bad.append(f"{path}: {e}")
    assert not bad, bad


def test_readme_shows_imports_and_paths() -> None:
    """The checks above are not vacuous: README's tour imports and names our modules."""
    readme = ROOT / "README.md"
    assert len(_import_statements(readme)) >= 4
    assert "constrained.integrations.hf.GrammarLogitsProcessor" in _dotted_paths(readme)
    with pytest.raises(AttributeError):
        _resolve("constrained.grammar.no_such_name")
