"""What a JSON schema costs in generation speed: the same requests with and without the grammar, on ``constrained
serve`` and on the real llama-server, both models, in one run.

Per model, each server is started with ``-c 2048 -np 1 -t 1 -tb 1`` (one after the other), warmed by one request,
then gets ``--runs`` pairs of ``/completion`` requests, each pair the same prompt with a ``json_schema`` and without
(temperature 0, ``cache_prompt: false``; which of the two goes first alternates). Generation speed is the server's
own ``timings.predicted_per_second`` (ours reports the same field); the table gives the medians, the constrained /
unconstrained ratio per server (1.00 = the grammar costs nothing) and ours against llama-server's.

Run (the load average at the start and end is printed; the machine is shared)::

    heavy .venv/bin/python benchmarks/bench_constraint_overhead.py [--runs 4] [--n-predict 48] [--models default smollm2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from bench_cold_path import FLAGS, MAIN_PY, _free_port, _get, _server_env  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                                           "email": {"type": "string"},
                                           "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
          "required": ["name", "age", "email", "tags"]}
PROMPTS = ["You extract records. Reply with JSON only.\nText: Maria Lopez, 34, maria@example.com, works on billing.\n"
           "JSON:\n",
           "Describe the customer as a JSON record.\nCustomer: Tom Baker, 51, tom.b@example.org, support and sales.\n",
           "Write a JSON object for this person: Ana Silva, age 28, ana@silva.pt, tags: design, web.\n"]


def _model(name: str) -> str:
    from constrained.llama import default_model_path
    from constrained.llama.model import smollm2_model_path

    return str(default_model_path() if name == "default" else smollm2_model_path())


def _start(cmd: list[str], port: int, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}")
        try:
            if _get(f"http://127.0.0.1:{port}/health", timeout=2)[0] == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.05)


def _server(name: str, model: str, runs: int, n_predict: int) -> dict[str, list[float]]:
    port = _free_port()
    if name == "llama-server":
        from oracle.llama_server import llama_server_binary

        binary = llama_server_binary()
        env = dict(os.environ, LD_LIBRARY_PATH=str(Path(binary).parent) + os.pathsep
                   + os.environ.get("LD_LIBRARY_PATH", ""))
        cmd = [str(binary)]
    else:
        env = _server_env(ROOT)
        cmd = [str(MAIN_PY), "-m", "constrained.server"]
    proc = _start([*cmd, "-m", model, *FLAGS, "--host", "127.0.0.1", "--port", str(port)], port, env)
    out: dict[str, list[float]] = {"json_schema": [], "none": [], "n_json_schema": [], "n_none": []}
    try:
        def one(prompt: str, schema: dict | None) -> tuple[float, int]:
            body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": False}
            if schema is not None:
                body["json_schema"] = schema
            status, res = _get(f"http://127.0.0.1:{port}/completion", body)
            assert status == 200, (name, status)
            t = res.get("timings", {})
            return float(t.get("predicted_per_second", 0.0)), int(t.get("predicted_n", 0))

        one(PROMPTS[0], SCHEMA)                       # warm: first request, first grammar
        for r in range(runs):
            prompt = PROMPTS[r % len(PROMPTS)]
            order = [SCHEMA, None] if r % 2 == 0 else [None, SCHEMA]
            for schema in order:
                tps, n = one(prompt, schema)
                key = "json_schema" if schema is not None else "none"
                out[key].append(tps)
                out["n_" + key].append(n)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--n-predict", type=int, default=48)
    ap.add_argument("--models", nargs="+", default=["default", "smollm2"], choices=["default", "smollm2"])
    a = ap.parse_args()
    load0 = os.getloadavg()
    print("| model | server | generation tok/s, schema | without | schema / without | tokens (schema / without) |")
    print("|---|---|---|---|---|---|")
    for m in a.models:
        path = _model(m)
        res = {}
        for name in ("llama-server", "constrained serve"):
            res[name] = r = _server(name, path, a.runs, a.n_predict)
            c, u = statistics.median(r["json_schema"]), statistics.median(r["none"])
            print(f"| {m} | {name} | {c:.1f} | {u:.1f} | {c / u:.3f} | {sum(r['n_json_schema'])} / {sum(r['n_none'])} |",
                  flush=True)
        ours, theirs = res["constrained serve"], res["llama-server"]
        print(f"| {m} | ours / llama-server | {statistics.median(ours['json_schema']) / statistics.median(theirs['json_schema']):.2f}x"
              f" | {statistics.median(ours['none']) / statistics.median(theirs['none']):.2f}x | | |", flush=True)
    load1 = os.getloadavg()
    print(f"\nload average at start {load0[0]:.2f} / {load0[1]:.2f}, at end {load1[0]:.2f} / {load1[1]:.2f} (1 / 5 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
