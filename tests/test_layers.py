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
    "sampler": 0,                     # llama.cpp's sampler chain and the C runtime's number conversions (cconv):
                                      # standalone (imports nothing of constrained), so any layer may use it
    "constrained.vocab": 1,           # a model's tokens as llama.cpp sees them
    "constrained.json_schema": 1,     # JSON Schema -> GBNF text, and jsonschema validation; knows nothing of the engine
    "constrained.grammars": 1,        # bundled .gbnf files (package data)
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


def _extension_modules() -> set[str]:
    """The compiled extensions (``[[tool.setuptools.ext-modules]]`` of pyproject.toml): leaves of the graph, imported
    plainly (``from . import _walk``) by their package's one loader."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    out = set()
    for block in text.split("[[tool.setuptools.ext-modules]]")[1:]:
        for line in block.splitlines():
            if line.startswith("name ="):
                out.add(line.split("=", 1)[1].strip().strip('"'))
                break
    return out


EXTENSIONS = _extension_modules()


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
    # "from pkg import name" may name a submodule: count it when it is one of ours (or one of our extensions)
    names = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES or f"{base}.{a.name}" in EXTENSIONS]
    return names or [base]


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(module, node, path.name == "__init__.py"):
                    if target in EXTENSIONS:
                        continue                   # a compiled leaf: imports nothing of ours
                    while target and target not in MODULES:
                        target = target.rpartition(".")[0]
                    if target and target != module:
                        deps.add(target)
        graph[module] = deps
    return graph


GRAPH = _imports()


def test_extensions_are_known() -> None:
    assert EXTENSIONS == {"sampler._kernels", "constrained.grammar._walk", "constrained.vocab._read"}
    assert "constrained.grammar._walk" not in GRAPH["constrained.grammar.stacks"]
    assert "constrained.grammar" not in GRAPH["constrained.grammar.stacks"]   # ``from . import _walk`` is no cycle


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


def _extension_importers() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(module, node, path.name == "__init__.py"):
                    if target in EXTENSIONS:
                        out.setdefault(target, []).append(module)
    return out


def test_one_extension_loader_per_package() -> None:
    """Each compiled extension is imported by exactly one module of its package (the others read it from there)."""
    importers = _extension_importers()
    assert importers == {"sampler._kernels": ["sampler.kernels"],
                         "constrained.grammar._walk": ["constrained.grammar.stacks"],
                         "constrained.vocab._read": ["constrained.vocab._ext"]}, importers


def _dynamic_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """``importlib.import_module(...)`` / ``__import__(...)`` calls, with the function they are in."""
    out = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call):
                f = child.func
                called = (f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
                if called in ("import_module", "__import__"):
                    out.append((child.lineno, func))
            visit(child, name)

    visit(tree, "")
    return out


def test_no_importlib_tricks() -> None:
    """Our modules import each other with ``import`` statements, which this checker reads: a module loaded by name
    (``importlib.import_module``, ``__import__``) is allowed only in a package's PEP 562 ``__getattr__`` (the lazy
    public API of ``__init__.py``). (``importlib.util.find_spec`` for an optional dependency is no import.)"""
    bad = []
    for module, path in MODULES.items():
        for line, func in _dynamic_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if not (path.name == "__init__.py" and func == "__getattr__"):
                bad.append(f"{module}:{line}")
    assert not bad, f"modules loaded by name (use a plain import): {bad}"


def _reexports(module: str, path: Path) -> tuple[bool, list[str]]:
    """(the module is only imports, [names imported from our modules and not used in it])."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    body = [n for n in body if not (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                                        for t in n.targets))]
    only_imports = bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] in
                                                 ("constrained", "sampler")):
            for a in node.names:
                imported[a.asname or a.name] = a.name
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return only_imports, sorted(k for k in imported if k not in used)


def test_no_facade_modules() -> None:
    """No module (``__init__.py`` apart: the packages' public API) that only re-exports, and no name imported from
    our modules only to be importable from another place: import a name from the module that defines it."""
    facades, reexported = [], []
    for module, path in sorted(MODULES.items()):
        if path.name == "__init__.py":
            continue
        only, names = _reexports(module, path)
        if only:
            facades.append(module)
        reexported += [f"{module}: {n}" for n in names]
    assert not facades, f"modules that only re-export: {facades}"
    assert not reexported, f"names imported and not used (re-exports): {reexported}"


def test_the_facade_check_sees_one(tmp_path: Path) -> None:
    f = tmp_path / "facade.py"
    f.write_text('"""A facade."""\nfrom .stacks import GrammarRules, Stack  # noqa: F401\n__all__ = ["Stack"]\n')
    assert _reexports("constrained.grammar.facade", f) == (True, ["GrammarRules", "Stack"])
    f.write_text("import importlib\n\ndef load():\n    return importlib.import_module('x')\n")
    assert _dynamic_imports(ast.parse(f.read_text())) == [(4, "load")]


def test_sampler_stands_alone() -> None:
    """``sampler`` imports nothing of ``constrained`` (read from the source, and at run time: every module of it
    imports with ``constrained`` made unimportable)."""
    bad = [f"{m} -> {d}" for m in MODULES if m.startswith("sampler") for d in GRAPH[m] if not d.startswith("sampler")]
    assert not bad, bad
    mods = sorted(m for m in MODULES if m.split(".")[0] == "sampler")
    code = ("import importlib, sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'constrained' or name.startswith('constrained.'):\n"
            "            raise ImportError('sampler must not import ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            f"for m in {mods!r}:\n"
            "    importlib.import_module(m)\n"
            "print(sum(m.startswith('constrained') for m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "0"
