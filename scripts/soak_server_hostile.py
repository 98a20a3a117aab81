"""A hostile soak of ``constrained serve`` (issue 28): many mixed hostile requests over real HTTP, RSS over time.

The server runs with the issue's flags (default model, ``-np 4 --jinja -t 1 -tb 1 -c 4096``); ``--clients`` threads
send ``--requests`` requests cycling through 12 kinds (deep lazy-trigger patterns, the failing lazy grammar of
finding 2, 3,000-deep bodies, NaN bodies, random ``id_slot``, distinct DRY breaker lists, 50-message chats, a
``json_schema`` given as a string, enums of varying size, 20 KB tokenizations, streamed chats with tools, bodies
above the size limit announced by ``Content-Length``), while a poller reads ``/health`` every 0.25 s. Printed: RSS
every ``--every`` requests, status counts per kind, connection failures, unexpected 5xx (a kind that should not
fail), the slowest ``/health``, and whether the server is healthy at the end. Exit status 1 if any check fails.

Run: PYTHONPATH=$PWD .venv/bin/python scripts/soak_server_hostile.py [--requests 1000] [--clients 4]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from constrained.llama import default_model_path  # noqa: E402
from oracle.cases.server import ours, raw  # noqa: E402
from oracle.llama_server import rss_kb  # noqa: E402

ARGS = ["-np", "4", "--jinja", "-t", "1", "-tb", "1", "-c", "4096"]
KINDS = 12
MAY_FAIL_5XX = {0, 1, 3}      # a deep trigger (500 set-up), the failing lazy grammar (500), NaN (500 as llama-server)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def hostile(i: int, rng: random.Random) -> tuple[str, str, Any]:
    k = i % KINDS
    lazy = {"prompt": "hi", "n_predict": 4, "grammar": 'root ::= "a"', "grammar_lazy": True}
    if k == 0:
        d = 300 + i % 7
        return "POST", "/completion", {**lazy, "grammar_triggers": [{"type": 2, "value": "(" * d + "a" + ")" * d}]}
    if k == 1:
        return "POST", "/completion", {"prompt": "Write a story:", "n_predict": 2, "grammar": 'root ::= "zzzq"',
                                       "grammar_lazy": True, "grammar_triggers": [{"type": 2, "value": ""}],
                                       "temperature": 0}
    if k == 2:
        return "POST", "/completion", b'{"prompt":"hi","x":' + b"[" * 3000 + b"]" * 3000 + b"}"
    if k == 3:
        return "POST", "/completion", b'{"prompt":"hi","temperature":NaN}'
    if k == 4:
        return "POST", "/completion", {"prompt": "hi", "n_predict": 1, "id_slot": rng.randint(-99, 99)}
    if k == 5:
        return "POST", "/completion", {"prompt": "hi", "n_predict": 1, "dry_multiplier": 0.5,
                                       "dry_sequence_breakers": [f"s{i}", "\n", f"t{i % 17}"]}
    if k == 6:
        return "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 2000}] * 50,
                                                "max_tokens": 1}
    if k == 7:
        return "POST", "/completion", {"prompt": "hi", "n_predict": 1, "json_schema": "x"}
    if k == 8:
        return "POST", "/completion", {"prompt": "hi", "n_predict": 1, "json_schema": {"enum": list(range(50 + i % 13))}}
    if k == 9:
        return "POST", "/tokenize", {"content": "abc " * 5000}
    if k == 10:
        return "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Weather in Paris?"}],
                                                "tools": TOOLS, "max_tokens": 24, "stream": True, "temperature": 0}
    return "BIG", "/completion", 200 * 1024 * 1024          # Content-Length above the limit, never sent


def big_announced(port: int, n: int) -> int:
    """A POST announcing ``n`` bytes (the server refuses it from the header): the status, -1 on failure."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(f"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {n}\r\n\r\n".encode() + b'{"prompt":"')
            head = s.recv(4096).decode("latin-1")
            return int(head.split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=200)
    a = ap.parse_args()
    srv = ours(["-m", default_model_path(), *ARGS]).start()
    try:
        assert srv.proc is not None
        pid = srv.proc.pid                         # our launcher execs python: the Popen pid is the server
        lock = threading.Lock()
        status: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
        conn_fail: list[tuple[int, str]] = []
        unexpected: list[tuple[int, int]] = []
        done = [0]
        rss: list[tuple[int, float, int]] = [(0, 0.0, rss_kb(pid))]
        health: list[float] = []
        stop = threading.Event()
        t0 = time.monotonic()
        next_i = [0]

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            while True:
                with lock:
                    i = next_i[0]
                    if i >= a.requests:
                        return
                    next_i[0] += 1
                m, p, b = hostile(i, rng)
                try:
                    st = big_announced(srv.port, b) if m == "BIG" else raw(srv, m, p, b, timeout=180)[0]
                    if st < 0:
                        raise OSError("no status")
                except OSError as e:
                    with lock:
                        conn_fail.append((i, repr(e)))
                    st = -1
                with lock:
                    status[i % KINDS][st] += 1
                    if st >= 500 and i % KINDS not in MAY_FAIL_5XX:
                        unexpected.append((i, st))
                    done[0] += 1
                    if done[0] % a.every == 0:
                        rss.append((done[0], time.monotonic() - t0, rss_kb(pid)))
                        print(f"{done[0]:5d} requests  {time.monotonic() - t0:7.1f} s  RSS {rss[-1][2] / 1024:7.1f} MB",
                              flush=True)

        def poll() -> None:
            while not stop.is_set():
                h0 = time.monotonic()
                try:
                    raw(srv, "GET", "/health", timeout=60)
                except OSError:
                    pass
                health.append(time.monotonic() - h0)
                time.sleep(0.25)

        ths = [threading.Thread(target=worker, args=(s,)) for s in range(a.clients)]
        pt = threading.Thread(target=poll)
        pt.start()
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        stop.set()
        pt.join()
        elapsed = time.monotonic() - t0
        st, _, body = raw(srv, "GET", "/health", timeout=30)
        healthy = st == 200 and json.loads(body).get("status") == "ok"
        alive = srv.proc.poll() is None
        base = next((r for r in rss if r[0] >= a.warmup), rss[-1])
        grew = rss[-1][2] - base[2]
        health.sort()
        print(f"\n{a.requests} requests, {a.clients} clients, {elapsed:.1f} s; server alive: {alive}, healthy: {healthy}")
        print(f"RSS: start {rss[0][2] / 1024:.1f} MB, after {base[0]} (warm-up) {base[2] / 1024:.1f} MB, "
              f"end {rss[-1][2] / 1024:.1f} MB (growth after warm-up {grew / 1024:+.1f} MB), "
              f"max {max(r[2] for r in rss) / 1024:.1f} MB")
        print("RSS series (requests, s, MB): " + ", ".join(f"({n}, {t:.0f}, {k / 1024:.1f})" for n, t, k in rss))
        print(f"/health: {len(health)} polls, p50 {health[len(health) // 2]:.3f} s, "
              f"p99 {health[min(len(health) - 1, int(0.99 * len(health)))]:.3f} s, max {health[-1]:.3f} s")
        for k in range(KINDS):
            print(f"  kind {k:2d}: {dict(sorted(status[k].items()))}")
        print(f"connection failures: {len(conn_fail)} {conn_fail[:5]}; unexpected 5xx: {len(unexpected)} "
              f"{unexpected[:5]}")
        ok = alive and healthy and not conn_fail and not unexpected
        return 0 if ok else 1
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
