"""The ``constrained`` command, run as a user runs it (a subprocess of the installed console script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).with_name("constrained")


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "constrained.cli"]
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env)


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def test_check_ok(tmp_path: Path) -> None:
    g = tmp_path / "ok.gbnf"
    g.write_text('root ::= "yes" | "no"\n')
    r = run("check", str(g))
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


def test_check_syntax_error_points_at_it(tmp_path: Path) -> None:
    g = tmp_path / "bad.gbnf"
    g.write_text('root ::= item+\nitem ::= "a" | "\\q"\n')
    r = run("check", str(g))
    assert r.returncode == 2
    assert "line 2, column 17" in r.stderr and "escape" in r.stderr
    lines = r.stderr.splitlines()
    caret = next(i for i, ln in enumerate(lines) if ln.strip() == "^")
    assert lines[caret - 1].strip() == 'item ::= "a" | "\\q"'
    assert lines[caret].index("^") - lines[caret - 1].index("item") == 16


def test_check_undefined_rule(tmp_path: Path) -> None:
    g = tmp_path / "undef.gbnf"
    g.write_text('root ::= thing\n')
    r = run("check", str(g))
    assert r.returncode == 2
    assert "thing" in r.stderr


def test_check_missing_file(tmp_path: Path) -> None:
    r = run("check", str(tmp_path / "nope.gbnf"))
    assert r.returncode == 2
    assert "not found" in r.stderr


def test_grammar_prints_llama_servers_gbnf(tmp_path: Path) -> None:
    from constrained import json_schema_to_gbnf

    s = tmp_path / "person.json"
    s.write_text(json.dumps(PERSON))
    r = run("grammar", "--schema", str(s))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == json_schema_to_gbnf(PERSON).strip()
    assert r.stdout.startswith("age-kv ::=") or "root ::=" in r.stdout


def test_grammar_reports_unenforced_and_strict(tmp_path: Path) -> None:
    s = tmp_path / "bounds.json"
    s.write_text(json.dumps({"type": "number", "minimum": 3}))
    r = run("grammar", "--schema", str(s))
    assert r.returncode == 0
    assert "minimum" in r.stderr
    r = run("grammar", "--strict", "--schema", str(s))
    assert r.returncode == 2
    assert "minimum" in r.stderr


def test_grammar_bad_schema(tmp_path: Path) -> None:
    s = tmp_path / "bad.json"
    s.write_text('{"type": "integer", "minimum": ')
    r = run("grammar", "--schema", str(s))
    assert r.returncode == 2 and "not valid JSON" in r.stderr
    s.write_text(json.dumps({"type": "frobnicate"}))
    r = run("grammar", "--schema", str(s))
    assert r.returncode == 2 and "JSON schema error at" in r.stderr


def test_generate_with_schema(tmp_path: Path) -> None:
    s = tmp_path / "person.json"
    s.write_text(json.dumps(PERSON))
    r = run("generate", "--prompt", "A person as JSON: ", "--schema", str(s), "--seed", "5", "--temp", "0.7",
            "-n", "48", "--trace")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"name", "age"}
    assert "schema: valid" in r.stderr
    assert "redrawn" in r.stderr          # the trace table's header


def test_generate_bad_parameter_gets_llama_servers_message(tmp_path: Path) -> None:
    r = run("generate", "--prompt", "x", "--repeat-last-n", "-1", "-n", "2")
    assert r.returncode == 2
    assert "Field 'repeat_last_n': Value must be between 0 <= value <= " in r.stderr


def test_generate_missing_model(tmp_path: Path) -> None:
    r = run("generate", "--prompt", "x", "--model", str(tmp_path / "missing.gguf"))
    assert r.returncode == 3
    assert "model file not found" in r.stderr


def test_generate_model_that_fails_to_load(tmp_path: Path) -> None:
    m = tmp_path / "broken.gguf"
    m.write_bytes(b"GGUF" + b"\0" * 64)
    r = run("generate", "--prompt", "x", "--model", str(m))
    assert r.returncode == 3
    assert "could not load" in r.stderr


@pytest.mark.parametrize("args", [["generate"], ["generate", "--prompt", "x", "--json", "--schema", "s.json"]])
def test_usage_errors(args: list[str]) -> None:
    r = run(*args)
    assert r.returncode == 2
    assert "usage:" in r.stderr
