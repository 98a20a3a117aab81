"""The package's architecture, checked: a folder is a layer and a lower layer never imports a higher one.

Every ``import`` of our own modules is read with ``ast`` (module level, inside functions and under
``TYPE_CHECKING`` alike) and checked against the layer order below; the whole import graph between our modules must
also be free of cycles, so no two modules of one layer lean on each other either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lower number = lower layer. A module may import its own layer and the layers below it.
LAYERS: dict[str, int] = {
    "constrained.errors": 0,          # the one exception tree
    "constrained.vocab": 1,           # a model's tokens as llama.cpp sees them
    "constrained.json_schema": 1,     # JSON Schema -> GBNF text, and jsonschema validation; knows nothing of the engine
    "constrained.grammars": 1,        # bundled .gbnf files (package data)
    "sampler": 2,                     # llama.cpp's sampler chain; standalone (no import of constrained)
    "constrained.grammar": 2,         # the engine; Grammar.from_json_schema uses the front end below it
    "constrained.chat": 3,            # chat templates, tool-call formats, reply parsing (PEG), stream deltas
    "constrained.llama": 4,           # the one-slot llama-server runtime: flags, model, slot, generation
    "constrained.integrations": 4,    # the engine in other stacks: sequence constraint, hf, llama-cpp-python, vllm
    "constrained.server": 5,          # HTTP: llama-server's routes, the model thread, the scheduler
    "constrained.cli": 6,
    "constrained": 7,                 # the package root: the public API, lazy re-exports of everything
}


def _module_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg_dir, pkg in ((ROOT / "constrained", "constrained"), (ROOT / "sampler", "sampler"),
                         (ROOT / "grammars", "constrained.grammars")):
        for f in pkg_dir.rglob("*.py"):
            parts = list(f.relative_to(pkg_dir).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([pkg, *parts])] = f
    return out


MODULES = _module_files()


def _layer_of(module: str) -> tuple[str, int]:
    best = ""
    for name in LAYERS:
        if (module == name or module.startswith(name + ".")) and len(name) > len(best):
            best = name
    assert best, f"{module} is in no layer: add it to LAYERS"
    return best, LAYERS[best]


def _resolve(module: str, node: ast.ImportFrom | ast.Import, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        base = node.module or ""
    else:
        here = module.split(".") if is_pkg else module.split(".")[:-1]
        up = here[: len(here) - (node.level - 1)]
        base = ".".join(up + ([node.module] if node.module else []))
    # "from pkg import name" may name a submodule: count it when it is one of ours
    names = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return names or [base]


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(module, node, path.name == "__init__.py"):
                    while target and target not in MODULES:
                        target = target.rpartition(".")[0]
                    if target and target != module:
                        deps.add(target)
        graph[module] = deps
    return graph


GRAPH = _imports()


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_from_a_higher_layer(module: str) -> None:
    mine, rank = _layer_of(module)
    for dep in sorted(GRAPH[module]):
        theirs, their_rank = _layer_of(dep)
        if theirs == mine:
            continue
        assert their_rank < rank, f"{module} (layer {mine}) imports {dep} (layer {theirs}, not below it)"


def test_import_graph_has_no_cycle() -> None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(GRAPH[m]):
            if state.get(d) == 1:
                cycle = path[path.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_the_checker_sees_a_violation() -> None:
    """The walk is not vacuous: the root imports modules of lower layers, and llama imports the sampler."""
    assert "constrained.errors" in GRAPH["constrained"]
    assert any(d.startswith("sampler") for d in GRAPH["constrained.llama.generation"])
    assert any(d.startswith("constrained.json_schema") for d in GRAPH["constrained.grammar.grammar"])


def test_import_constrained_stays_light() -> None:
    code = ("import sys, constrained; heavy = [m for m in ('llama_cpp', 'jsonschema', 'lark', 'torch', 'starlette')"
            " if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", ["constrained.Grammar", "constrained.GrammarMatcher", "constrained.Vocabulary",
                                  "constrained.json_schema_to_gbnf", "constrained.validate", "constrained.TokenAttr",
                                  "constrained.json_schema.json_schema_to_gbnf", "constrained.grammar.Grammar",
                                  "sampler.Params", "sampler.Sampler", "sampler.token_probs", "sampler.S2Sampler"])
def test_public_paths_kept(path: str) -> None:
    import importlib

    mod, _, attr = path.rpartition(".")
    assert getattr(importlib.import_module(mod), attr) is not None


def _classes_deriving_exceptions() -> list[tuple[str, str]]:
    """Public classes (no leading underscore) that subclass an exception, outside ``constrained/errors.py``."""
    out = []
    for module, path in MODULES.items():
        if module == "constrained.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if any(b.endswith(("Error", "Exception")) or b in ("ConstrainedError",) for b in bases):
                    out.append((module, node.name))
    return out


# internal signals that never leave their module's callers (caught inside the package); not part of the API
INTERNAL_EXCEPTIONS = {("constrained.chat.peg", "PegFail"), ("constrained.chat.tool_parse", "ParseFailure"),
                       ("constrained.grammar._gbnf_text", "Fail"), ("constrained.json_schema._pattern", "UnsupportedPattern"),
                       ("constrained.json_schema._pattern", "InvalidPattern"), ("constrained.json_schema.regex", "Unsupported"),
                       ("constrained.json_schema.validation", "PatternTimeout"), ("constrained.server.errors", "HttpError")}


def test_public_exceptions_live_in_errors() -> None:
    """One exception tree: every public exception is defined in ``constrained/errors.py`` under ConstrainedError."""
    import constrained.errors as errors

    stray = [c for c in _classes_deriving_exceptions() if c not in INTERNAL_EXCEPTIONS]
    assert not stray, f"exceptions defined outside constrained/errors.py: {stray}"
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == "constrained.errors":
            assert issubclass(obj, errors.ConstrainedError), name
            import constrained

            assert getattr(constrained, name) is obj, f"constrained.{name} is not exported"


def test_no_private_import_across_packages() -> None:
    """``from pkg.mod import _name`` only inside ``pkg`` (a name used by another package is public)."""
    bad = []
    for module, path in MODULES.items():
        top = _layer_of(module)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                target = node.module
                if not (target.startswith("constrained") or target.startswith("sampler")):
                    continue
                if _layer_of(target)[0] == top:
                    continue
                if any(part.startswith("_") for part in target.split(".")):
                    bad.append(f"{module}: imports the private module {target}")
                bad += [f"{module}: from {target} import {a.name}" for a in node.names
                        if a.name.startswith("_") and a.name != "__version__"]
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                is_pkg = path.name == "__init__.py"
                for target in _resolve(module, node, is_pkg):
                    base = target
                    while base and base not in MODULES:
                        base = base.rpartition(".")[0]
                    if base and _layer_of(base)[0] != top:
                        if any(part.startswith("_") for part in base.split(".")):
                            bad.append(f"{module}: imports the private module {base}")
                        bad += [f"{module}: from {'.' * node.level}{node.module or ''} import {a.name}"
                                for a in node.names if a.name.startswith("_")]
    assert not bad, bad
