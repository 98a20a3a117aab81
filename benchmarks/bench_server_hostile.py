"""Normal requests' throughput and latency while hostile ones arrive: ``constrained serve`` vs the real llama-server,
in one run, same flags (default model, ``-np 4 --jinja -t 1 -tb 1 -c 4096``).

For each server: ``--normal`` client threads send small ``/completion`` requests (8 tokens, greedy) back to back
for ``--seconds``; meanwhile one hostile thread cycles through requests llama-server survives too (a 20,000-message
chat body, a 50 MB body, NaN bodies, a deeply nested body, out-of-range ``id_slot``, a lazy grammar whose trigger
replay fails, a 200-breaker DRY list, a 5,000-value enum schema). Reported: normal requests completed per second,
their p50 / p99 / max latency, ``/health`` p99 (polled every 0.2 s), hostile requests sent and their status
counts, and whether the server was still healthy at the end.

Run: .venv/bin/python benchmarks/bench_server_hostile.py [--seconds 40] [--normal 3]
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from constrained.llama import default_model_path  # noqa: E402
from oracle.cases.server import ours  # noqa: E402
from oracle.llama_server import LlamaServer  # noqa: E402

ARGS = ["-np", "4", "--jinja", "-t", "1", "-tb", "1", "-c", "4096"]


def _req(port: int, method: str, path: str, body: Any = None, timeout: float = 300) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    try:
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status
    except OSError:
        return -1
    finally:
        conn.close()


def hostile_requests() -> list[tuple[str, str, Any]]:
    deep = b'{"prompt":' + b"[" * 5000 + b"]" * 5000 + b"}"
    return [
        ("POST", "/apply-template", {"messages": [{"role": "user", "content": "word " * 5}] * 20_000}),
        ("POST", "/completion", b'{"prompt":"' + b"a" * (50 * 1024 * 1024) + b'"}'),
        ("POST", "/completion", b'{"prompt":"hi","temperature":NaN}'),
        ("POST", "/completion", deep),
        ("POST", "/completion", {"prompt": "hi", "n_predict": 2, "id_slot": 99}),
        ("POST", "/completion", {"prompt": "Write a story:", "n_predict": 8, "grammar": 'root ::= "zzzq"',
                                 "grammar_lazy": True, "grammar_triggers": [{"type": 2, "value": ""}]}),
        ("POST", "/completion", {"prompt": "hi", "n_predict": 4, "dry_multiplier": 0.8,
                                 "dry_sequence_breakers": [f"w{i}" for i in range(100)]}),
        ("POST", "/completion", {"prompt": "hi", "n_predict": 4, "json_schema": {"enum": list(range(5000))}}),
    ]


def run(srv: LlamaServer, seconds: float, n_normal: int) -> dict[str, Any]:
    stop = threading.Event()
    lat: list[float] = []
    health: list[float] = []
    hostile: collections.Counter[str] = collections.Counter()
    took: dict[int, float] = {}      # the longest answer of each hostile kind, seconds
    lock = threading.Lock()

    def normal() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            st = _req(srv.port, "POST", "/completion", {"prompt": "The capital of France is", "n_predict": 8,
                                                        "temperature": 0})
            with lock:
                if st == 200:
                    lat.append(time.monotonic() - t0)
                else:
                    hostile["normal-failed"] += 1

    def bad() -> None:
        reqs = hostile_requests()
        i = 0
        while not stop.is_set():
            m, p, b = reqs[i % len(reqs)]
            t0 = time.monotonic()
            st = _req(srv.port, m, p, b, timeout=120)
            with lock:
                hostile[f"{i % len(reqs)}:{st}"] += 1
                took[i % len(reqs)] = max(took.get(i % len(reqs), 0.0), time.monotonic() - t0)
            i += 1

    def poll() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            _req(srv.port, "GET", "/health", timeout=60)
            health.append(time.monotonic() - t0)
            time.sleep(0.2)

    ths = [threading.Thread(target=normal) for _ in range(n_normal)]
    ths += [threading.Thread(target=bad), threading.Thread(target=poll)]
    t0 = time.monotonic()
    for t in ths:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ths:
        t.join(timeout=180)
    dt = time.monotonic() - t0
    lat.sort()
    health.sort()

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")

    return {"normal_per_s": len(lat) / dt, "n_normal": len(lat), "p50": q(lat, 0.5), "p99": q(lat, 0.99),
            "max": lat[-1] if lat else float("nan"), "health_p99": q(health, 0.99),
            "health_max": health[-1] if health else float("nan"), "hostile": dict(sorted(hostile.items())),
            "hostile_s": {k: round(v, 2) for k, v in sorted(took.items())},
            "healthy_after": _req(srv.port, "GET", "/health", timeout=30) == 200}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--normal", type=int, default=3)
    a = ap.parse_args()
    model = default_model_path()
    out = {}
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores shared; a figure under load is marked so)")
    for name, mk in (("llama-server", lambda: LlamaServer(["-m", model, *ARGS])),
                     ("constrained", lambda: ours(["-m", model, *ARGS]))):
        with mk() as srv:
            out[name] = run(srv, a.seconds, a.normal)
        r = out[name]
        print(f"{name:13s} normal {r['normal_per_s']:.2f}/s (n={r['n_normal']}) p50 {r['p50']:.2f} s "
              f"p99 {r['p99']:.2f} s max {r['max']:.2f} s | /health p99 {r['health_p99']:.3f} s "
              f"max {r['health_max']:.3f} s | healthy after: {r['healthy_after']}", flush=True)
        print(f"{'':13s} hostile (index:status -> count): {r['hostile']}", flush=True)
        print(f"{'':13s} hostile longest answer by index, s: {r['hostile_s']} | load {os.getloadavg()[0]:.2f}",
              flush=True)
    a_, b_ = out["constrained"], out["llama-server"]
    print(f"ratio ours/llama-server: throughput {a_['normal_per_s'] / b_['normal_per_s']:.2f}, "
          f"p99 {a_['p99'] / b_['p99']:.2f}", flush=True)


if __name__ == "__main__":
    main()
