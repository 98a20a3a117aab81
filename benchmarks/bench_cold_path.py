"""Where users wait, against the peers, in one run: the cold path of ``constrained serve`` beside llama-server, and
compile / first mask / steady mask / check + accept beside xgrammar, llguidance and llama.cpp.

**Servers** (the default model, ``-c 2048 -np 1 -t 1 -tb 1``, one process each, one after the other): time from
starting the process until ``/health`` answers 200, a first schema request (16 tokens), the same request again, a
request with a new schema (30 tokens); ``/completion`` with ``cache_prompt: false``, temperature 0, the same body to
both. Ours runs under the main venv's python (``python -m constrained.server``) with a bytecode cache (as an
installed package has; primed before the first start), llama-server is the oracle build. ``--rounds N`` starts each
N times (order alternating) and reports medians; ``--also-root PATH`` starts a second checkout (e.g. main) beside
this one, for a before/after in the same run.

**Grammar engines** (the default model's vocabulary, 262,144 tokens on gemma-3; each schema's grammar fresh, per
engine): *compile* = schema to a matcher ready to mask (ours: ``Grammar.from_json_schema`` + ``matcher()``,
xgrammar: ``compile_json_schema`` + ``GrammarMatcher``, llguidance: ``LLMatcher`` from the JSON schema, llama.cpp:
``llama_sampler_init_grammar`` on our converter's GBNF); *first mask* = compile + the first mask; then a
teacher-forced document (a JSON value of the schema, tokenized): per step the full mask (*mask*), then checking the
next token alone and accepting it (*check + accept*: ``allows`` + ``accept_token``; xgrammar and llguidance have no
one-token check, so theirs is ``accept_token`` / ``consume_token`` after a mask, reported as accept alone). Every
engine's masks are computed, none compared here (tests/scale/test_kinds_xgrammar.py and the hostile benchmark do).

Run in the scale venv (it has xgrammar, llguidance and llama-cpp-python), on a quiet machine::

    PYTHONPATH=$PWD heavy .venv-vllm/bin/python benchmarks/bench_cold_path.py [--skip-servers] [--skip-engines]

The load average at the start and end is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

MAIN_PY = Path(os.environ.get("CONSTRAINED_MAIN_PY", str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python")))
FLAGS = ["-c", "2048", "-np", "1", "-t", "1", "-tb", "1"]
PROMPT = "You extract records. Reply with JSON only.\nText: Maria Lopez, 34, maria@example.com.\nJSON:\n"
SCHEMA_A = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"]}
SCHEMA_B = {"type": "object", "properties": {"email": {"type": "string"}, "tags": {"type": "array",
                                                                                   "items": {"type": "string"}}},
            "required": ["email", "tags"]}

ENGINE_SCHEMAS = [
    (SCHEMA_A, {"name": "Maria Lopez", "age": 34}),
    (SCHEMA_B, {"email": "maria@example.com", "tags": ["billing", "support"]}),
    ({"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
                                 "required": ["id", "ok"]}, "maxItems": 4},
     [{"id": 1, "ok": True}, {"id": 22, "ok": False}]),
    ({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                       "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                                       "country": {"enum": ["FR", "DE", "IT"]}}, "required": ["city", "zip", "country"]},
     {"city": "Lyon", "zip": "69001", "country": "FR"}),
    ({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "number"}},
                                       "total": {"type": "number", "minimum": 0}}, "required": ["items", "total"]},
     {"items": [1.5, 2.25, 3], "total": 6.75}),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": 1, "bb": 22, "ccc": 333}),
]


def _get(url: str, body: dict | None = None, timeout: float = 600) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, {}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_row(cmd: list[str], port: int, env: dict) -> dict[str, float]:
    row: dict[str, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}")
            try:
                if _get(base + "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.02)
        row["start"] = time.perf_counter() - t0
        for name, schema, n in [("first", SCHEMA_A, 16), ("again", SCHEMA_A, 16), ("new", SCHEMA_B, 30)]:
            t = time.perf_counter()
            status, out = _get(base + "/completion", {"prompt": PROMPT, "json_schema": schema, "n_predict": n,
                                                       "temperature": 0, "cache_prompt": False})
            row[name] = time.perf_counter() - t
            assert status == 200, (cmd[0], name, status)
            row[name + "_n"] = out.get("tokens_predicted", 0)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return row


def _model_path() -> str:
    """The default model's GGUF (found by the main venv, which has the model package)."""
    try:
        from constrained.llama import default_model_path

        return str(default_model_path())
    except Exception:  # noqa: BLE001 - the scale venv has no model package: ask the main venv
        out = subprocess.run([str(MAIN_PY), "-c", "from constrained.llama import default_model_path as p; print(p())"],
                             capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        return out.stdout.strip().splitlines()[-1]


def _server_env(root: Path) -> dict:
    """The environment ``constrained serve`` runs in: ``root`` on the path and a bytecode cache (an installed
    package has its ``.pyc`` files; ``PYTHONDONTWRITEBYTECODE`` would make every start compile ~300 modules, ~0.7
    s), kept under ``~/.cache/constrained-bench/pyc`` and primed before the first timed start."""
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path.home() / ".cache" / "constrained-bench" / "pyc")
    subprocess.run([str(MAIN_PY), "-c", "import constrained.server.main, constrained.server.app, uvicorn"],
                   env=env, check=True, capture_output=True)
    return env


def servers(rounds: int = 1, also_root: str | None = None) -> None:
    from oracle.llama_server import llama_server_binary

    model = _model_path()
    binary = llama_server_binary()
    env2 = dict(os.environ, LD_LIBRARY_PATH=str(Path(binary).parent) + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    runs: list[tuple[str, list[str] | None, dict]] = [("constrained serve", None, _server_env(ROOT)),
                                                      ("llama-server", [str(binary)], env2)]
    if also_root:
        runs.append((f"constrained serve ({also_root})", None, _server_env(Path(also_root))))
    rows: dict[str, list[dict[str, float]]] = {}
    for r in range(rounds):
        for name, cmd, env in (runs if r % 2 == 0 else runs[::-1]):
            port = _free_port()
            argv = [*(cmd or [str(MAIN_PY), "-m", "constrained.server"]), "-m", model, *FLAGS,
                    "--host", "127.0.0.1", "--port", str(port)]
            rows.setdefault(name, []).append(_server_row(argv, port, env))
    print(f"\n## Cold path (default model, -c 2048 -np 1 -t 1 -tb 1; median of {rounds} round(s), order alternating)\n")
    names = [n for n, _, _ in runs]
    print("| | " + " | ".join(names) + " | ratio to llama-server |\n|---|" + "---|" * len(names) + "---|")
    for key, label in [("start", "start until /health 200"), ("first", "first schema request"),
                       ("again", "the same schema again"), ("new", "a new schema")]:
        med = {n: statistics.median(x[key] for x in rows[n]) for n in names}
        toks = "" if key == "start" else " (" + " / ".join(str(int(rows[n][0].get(key + "_n", 0))) for n in names) + " tokens)"
        ratios = ", ".join(f"{med[n] / med['llama-server']:.2f}x" for n in names if n != "llama-server")
        print(f"| {label}{toks} | " + " | ".join(f"{med[n]:.2f} s" for n in names) + f" | {ratios} |")
    tot = {n: statistics.median(x["start"] + x["first"] for x in rows[n]) for n in names}
    print("| start + first request | " + " | ".join(f"{tot[n]:.2f} s" for n in names) + " | "
          + ", ".join(f"{tot[n] / tot['llama-server']:.2f}x" for n in names if n != "llama-server") + " |")


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def engines() -> None:
    import numpy as np

    from constrained.grammar import Grammar
    from constrained.vocab import Vocabulary

    path = _model_path()
    vocab = Vocabulary.from_gguf(path)
    n = len(vocab)
    res: dict[str, dict[str, list[float]]] = {}

    def rec(engine: str, key: str, value: float) -> None:
        res.setdefault(engine, {}).setdefault(key, []).append(value)

    docs = [(s, vocab.tokenize(json.dumps(d))) for s, d in ENGINE_SCHEMAS]
    ours_first = Grammar.from_json_schema({"type": "boolean"}).matcher(vocab)   # the vocabulary index, once
    ours_first.mask()
    def run(engine: str, make: Callable[[Any], Any], mask: Callable[[Any], Any],
            check: Callable[[Any, int], bool] | None, accept: Callable[[Any, int], Any], steps: int | None = None) -> None:
        """One engine on every document: ``make(schema)`` (compile + matcher), the first mask, then per token a
        mask (after the first), the check (engines that have one) and the accept."""
        for schema, ids in docs:
            t0 = time.perf_counter()
            m = make(schema)
            t1 = time.perf_counter()
            mask(m)
            t2 = time.perf_counter()
            rec(engine, "compile", t1 - t0)
            rec(engine, "first", t2 - t0)
            for k, t in enumerate(ids[:steps]):
                if k:
                    a = time.perf_counter()
                    mask(m)
                    rec(engine, "mask", time.perf_counter() - a)
                a = time.perf_counter()
                ok = check(m, t) if check is not None else True
                b = time.perf_counter()
                accept(m, t)
                c = time.perf_counter()
                assert ok
                if check is not None:
                    rec(engine, "check", b - a)
                rec(engine, "accept", c - b)

    run("ours", lambda schema: Grammar.from_json_schema(schema).matcher(vocab), lambda m: m.mask(),
        lambda m, t: m.allows(t), lambda m, t: m.accept_token(t))
    try:
        import xgrammar as xgr
        info = xgr.TokenizerInfo(list(vocab.pieces), vocab_type=xgr.VocabType.RAW, vocab_size=n,
                                 stop_token_ids=sorted(vocab.eog_ids))
        bm = xgr.allocate_token_bitmask(1, n)

        def xgr_make(schema: Any) -> Any:
            compiler = xgr.GrammarCompiler(info, cache_enabled=False)
            return xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(schema), any_whitespace=True))

        run("xgrammar", xgr_make, lambda m: m.fill_next_token_bitmask(bm), None, lambda m, t: m.accept_token(t))
    except ImportError as err:
        print(f"(xgrammar not measured: {err})")
    try:
        import llguidance
        import llguidance.numpy as lln

        tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_LLTok(vocab))) if hasattr(llguidance, "TokenizerWrapper") \
            else None
        if tok is None:
            raise ImportError("no TokenizerWrapper")
        bml = lln.allocate_token_bitmask(1, n)
        run("llguidance",
            lambda schema: llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))),
            lambda m: lln.fill_next_token_bitmask(m, bml, 0), None, lambda m, t: m.consume_token(t))
    except Exception as err:  # noqa: BLE001 - the peer is optional
        print(f"(llguidance not measured: {err})")
    try:
        from oracle.llama import CGrammar, vocab_model

        vm = vocab_model(path)
        gbnfs = {id(schema): Grammar.from_json_schema(schema).to_gbnf() for schema, _ in docs}
        # its full mask costs tens of ms at 262,144 tokens: 8 steps per document
        run("llama.cpp", lambda schema: CGrammar(vm, gbnfs[id(schema)]), lambda m: m.mask(),
            lambda m, t: m.allows(t), lambda m, t: m.accept(t), steps=8)
    except Exception as err:  # noqa: BLE001
        print(f"(llama.cpp not measured: {err})")
    del np
    print(f"\n## Grammar engines ({n:,} tokens, {len(docs)} schemas, fresh grammars)\n")
    cols = [e for e in ("ours", "xgrammar", "llguidance", "llama.cpp") if e in res]
    print("| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))

    def cell(e: str, key: str, f) -> str:  # noqa: ANN001
        xs = res[e].get(key)
        return f(xs) if xs else "-"

    ms = lambda v: f"{v * 1e3:.2f}"   # noqa: E731
    us = lambda v: f"{v * 1e6:.1f}"   # noqa: E731
    print("| compile, median / max (ms) | " + " | ".join(
        cell(e, "compile", lambda xs: f"{ms(statistics.median(xs))} / {ms(max(xs))}") for e in cols) + " |")
    print("| time to first mask, median (ms) | " + " | ".join(
        cell(e, "first", lambda xs: ms(statistics.median(xs))) for e in cols) + " |")
    print("| full mask, median / p99 (us) | " + " | ".join(
        cell(e, "mask", lambda xs: f"{us(statistics.median(xs))} / {us(_pct(xs, 99))}") for e in cols) + " |")
    print("| check one token, median (us) | " + " | ".join(
        cell(e, "check", lambda xs: us(statistics.median(xs))) for e in cols) + " |")
    print("| accept one token, median (us) | " + " | ".join(
        cell(e, "accept", lambda xs: us(statistics.median(xs))) for e in cols) + " |")


class _LLTok:
    """llguidance's tokenizer protocol over our vocabulary (token bytes, EOS)."""

    def __init__(self, vocab) -> None:  # noqa: ANN001
        self.tokens = list(vocab.pieces)
        self.eos_token_id = min(vocab.eog_ids) if vocab.eog_ids else 0
        self.bos_token_id = None
        self.special_token_ids = sorted(vocab.eog_ids)
        self._vocab = vocab

    def __call__(self, s: bytes | str):  # noqa: ANN204
        return self._vocab.tokenize(s if isinstance(s, str) else s.decode("utf-8", "replace"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-servers", action="store_true")
    ap.add_argument("--skip-engines", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="server rounds (order alternating), medians reported")
    ap.add_argument("--also-root", help="a second checkout of constrained to start beside this one (before/after)")
    a = ap.parse_args()
    load0 = os.getloadavg()
    if not a.skip_servers:
        servers(a.rounds, a.also_root)
    if not a.skip_engines:
        engines()
    load1 = os.getloadavg()
    print(f"\nload average at start {load0[0]:.2f} / {load0[1]:.2f}, at end {load1[0]:.2f} / {load1[1]:.2f} (1 / 5 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
