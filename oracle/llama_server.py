"""The real llama-server, built from the sdist's vendored llama.cpp with the wheel's ggml flags, as an oracle.

The build (about 16 minutes on 2 cores, once) goes into ``<cache>/llama-server-0.3.36/``; later calls return the
cached binary at once. ``LlamaServer`` starts it on 127.0.0.1 with a free port and stops it with SIGTERM.

Recipe and the facts behind it: ``shared/reference/real-llama-server.md`` (the same ``GGML_NATIVE=OFF``, shared
libraries and Release build as llama-cpp-python's wheel, so the kernels and the logits are identical).

Example:
    >>> with LlamaServer(["-m", "model.gguf"]) as srv:           # doctest: +SKIP
    ...     srv.post("/completion", {"prompt": "Hi", "n_predict": 4})["content"]

Run as a script to build ahead of the tests: ``python -m oracle.llama_server``.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .sdist import VERSION, cache_dir, llama_cpp_source

CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_NATIVE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
]


def build_dir() -> Path:
    return cache_dir() / f"llama-server-{VERSION}"


def llama_server_binary() -> Path:
    """The path of the llama-server binary, building it on first use (a lock keeps concurrent builds apart)."""
    out = build_dir()
    binary = out / "bin" / "llama-server"
    marker = out / ".built"
    if marker.exists() and binary.exists():
        return binary
    src = llama_cpp_source()
    out.mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".llama-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and binary.exists():
            return binary
        gen = ["-G", "Ninja"] if _have("ninja") else []
        log = open(out / "build.log", "a")
        subprocess.run(["cmake", "-S", str(src), "-B", str(out), *gen, *CMAKE_FLAGS], check=True, stdout=log,
                       stderr=subprocess.STDOUT)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", str(out), "-j", jobs, "--target", "llama-server"], check=True,
                       stdout=log, stderr=subprocess.STDOUT)
        if not binary.exists():
            raise RuntimeError(f"llama-server build finished without {binary}; see {out / 'build.log'}")
        marker.touch()
    return binary


def _have(tool: str) -> bool:
    from shutil import which

    return which(tool) is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kb(pid: int) -> int:
    """A process's resident set size in KiB (``VmRSS`` of ``/proc/<pid>/status``; 0 where it has none)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one_thread_unless_told(args: list[str]) -> list[str]:
    """``args`` with ``-t 1`` added where they set no thread count (``-tb`` follows ``-t`` when not given): ggml's
    worker threads spin at their barriers, so two of them on a loaded 2-core machine made a 20-token request take
    3-35 s instead of ~1 s (the suite runs several servers at once). Both servers of an oracle pair get the same
    flags, so the comparison is unchanged.

    >>> one_thread_unless_told(["-m", "x.gguf"]), one_thread_unless_told(["-m", "x.gguf", "--threads=2"])
    (['-m', 'x.gguf', '-t', '1'], ['-m', 'x.gguf', '--threads=2'])
    """
    if any(a in ("-t", "--threads") or a.startswith("--threads=") for a in args):
        return list(args)
    return [*args, "-t", "1"]


class LlamaServer:
    """A running llama-server on 127.0.0.1 (``args``: its flags, ``-m`` included; ``--host``/``--port`` are added).

    ``post``/``get`` return the decoded JSON body (``raw=True``: ``(status, bytes)``).
    """

    def __init__(self, args: list[str], *, timeout: float = 300.0, binary: Path | None = None,
                 one_thread: bool = True) -> None:
        # one_thread=False: llama-server's own default thread count, for tests that compare the server with a model
        # loaded in this process (the thread count changes the batch's float sums: a probability's last digits)
        self.args = one_thread_unless_told(args) if one_thread else list(args)
        self.timeout = timeout
        self.binary = binary or llama_server_binary()
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = build_dir() / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LlamaServer:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(self.binary.parent) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(self.binary), *self.args, "--host", "127.0.0.1", "--port", str(self.port)],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: "
                                   f"{self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                status, _ = self.request("GET", "/health", raw=True)
                if status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"llama-server did not become healthy in {self.timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "_log", None):
            self._log.close()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def request(self, method: str, path: str, body: Any = None, *, raw: bool = False,
                headers: dict[str, str] | None = None, timeout: float = 600.0) -> Any:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, payload = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
        if raw:
            return status, payload
        return json.loads(payload)

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("POST", path, body, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)


def completion(srv: LlamaServer, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /completion`` with token ids returned: ``{"tokens", "content", "probs", "stop_type", "cached",
    "timings", "raw"}``; ``probs`` is per token ``(id, logprob, [(id, logprob), ...])`` when ``n_probs`` > 0.

    Raises RuntimeError on an error answer (with llama-server's message).
    """
    r = srv.post("/completion", {**body, "return_tokens": True})
    if "error" in r or "tokens" not in r:
        raise RuntimeError(f"llama-server answered {r}")
    probs = [(p["id"], p["logprob"], [(t["id"], t["logprob"]) for t in p["top_logprobs"]])
             for p in r.get("completion_probabilities", [])]
    return {"tokens": r["tokens"], "content": r["content"], "probs": probs, "stop_type": r["stop_type"],
            "cached": r["timings"]["cache_n"], "timings": r["timings"], "raw": r}


if __name__ == "__main__":
    print(llama_server_binary())
    sys.exit(0)
