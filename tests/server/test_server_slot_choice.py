"""Which slot a request gets, against the real llama-server: the same requests, in the same order, to both servers
started with the same flags; the slot of every answer (``id_slot``), the errors, and ``/slots`` at the end must be
the same.

llama-server picks a slot for every completion task, also for one it then refuses in the slot (a prompt past the
slot's context, invalid token ids): the refused task still saves and clears the idle slots (``--cache-idle-slots``)
and, released, becomes the most recently used slot. A server that refused such a prompt before choosing a slot
answered every later request from another slot than llama-server (the session-6 "slot-choice race" of
``test_server_oracle.py``: deterministic, from the refused 1,100-token prompt on).

Also here: the prompts of one request offered to the slots together (``server_queue::post(tasks)``), a deferred
request (its ``id_slot`` busy) served by the slot it asked for once it is released, and the unit checks of the
deferral queue (``pop_deferred_task``: one task per released slot, the one asking for that slot first).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

LONG = "word " * 1100          # > the 1024-token slot context: refused in the slot


def _cmpl(prompt: Any, n_predict: int = 4, **kw: Any) -> tuple[str, str, str, dict[str, Any]]:
    return ("cmpl", "POST", "/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0, **kw})


SEQUENCE: list[tuple[str, str, str, Any]] = [
    _cmpl("The capital of France is"),
    _cmpl(LONG),                                   # refused in a slot (exceed_context_size_error)
    _cmpl("Once upon a time"),
    _cmpl(LONG, stream=True),
    _cmpl("Once upon a time there"),               # similar to a cached prompt
    _cmpl([2, 999_999, 5]),                        # invalid token: refused when launched (no slot used)
    _cmpl("Hello"),
    _cmpl(["Cats", "Dogs"], 3),                    # two tasks posted at once
    _cmpl("My dog", 4, n=2, seed=3, temperature=0.8),    # a parent and its child
    _cmpl("Red, green,", 3, id_slot=1),
    _cmpl("The capital of France is", 3),
    _cmpl(LONG * 3, 1),
    _cmpl("After all that", 3),
    ("slots", "GET", "/slots", None),
]


def _summary(status: int, headers: dict[str, str], payload: bytes) -> Any:
    if headers.get("content-type", "").startswith("text/event-stream"):
        evs = [json.loads(b[6:]) for b in payload.split(b"\n\n") if b.startswith(b"data: {")]
        return status, [e.get("id_slot") for e in evs if e.get("stop")]
    d = json.loads(payload)
    if status != 200:
        return status, d["error"]["type"], d["error"]["message"]
    if isinstance(d, list) and d and "n_ctx" in d[0]:            # /slots
        return status, [(s["id"], s["is_processing"], s.get("n_prompt_tokens")) for s in d]
    items = d if isinstance(d, list) else [d]
    return status, [(x["id_slot"], x["tokens_cached"], x["timings"]["cache_n"], x["content"]) for x in items]


def _run(srv: LlamaServer) -> list[Any]:
    return [_summary(*raw(srv, m, p, b)) for _, m, p, b in SEQUENCE]


FLAGSETS = {
    "unified-4": ["-c", "1024", "-t", "1", "--slots"],
    "split-3": ["-c", "3072", "-np", "3", "-t", "1", "--slots"],
    "no-cache-ram": ["-c", "1024", "-t", "1", "--slots", "--cache-ram", "0"],
    "no-idle-cache": ["-c", "1024", "-t", "1", "--slots", "--no-cache-idle-slots"],
}


@pytest.mark.parametrize("flags", list(FLAGSETS))
def test_slot_choice_as_llama_server(default_model_path: str, flags: str) -> None:
    args = ["-m", default_model_path, *FLAGSETS[flags]]
    with LlamaServer(args) as real:
        want = _run(real)
    with ours(args) as us:
        got = _run(us)
    refused = [w for w in want if w[0] == 400 and w[1] == "exceed_context_size_error"]
    assert len(refused) >= 3, want                 # the refused prompts are in the sequence (not vacuous)
    slots_used = {x[0] for w in want if w[0] == 200 and isinstance(w[1], list) for x in w[1]
                  if isinstance(x, tuple)}
    assert len(slots_used) >= 3, want              # the choice moves between slots
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, (i, SEQUENCE[i][3] if not isinstance(SEQUENCE[i][3], dict) else
                        {k: (v if k != "prompt" or len(str(v)) < 60 else str(v)[:40]) for k, v in
                         SEQUENCE[i][3].items()})


def _deferred_round(srv: LlamaServer) -> list[Any]:
    # a long generation holds slot 0; a request for slot 0 waits (deferred) and is then served by slot 0, while a
    # request for any slot is served at once by another
    out: list[Any] = [None, None, None]

    def go(i: int, body: dict[str, Any]) -> None:
        s, h, p = raw(srv, "POST", "/completion", body)
        d = json.loads(p)
        out[i] = (s, d.get("id_slot"), d.get("content"))

    raw(srv, "POST", "/completion", {"prompt": "Warm", "n_predict": 1, "temperature": 0})
    t0 = threading.Thread(target=go, args=(0, {"prompt": "Count to a hundred:", "n_predict": 96,
                                               "ignore_eos": True, "temperature": 0, "id_slot": 0}))
    t0.start()
    import time

    for _ in range(200):                           # until slot 0 is busy
        s, _, p = raw(srv, "GET", "/slots")
        if json.loads(p)[0]["is_processing"]:
            break
        time.sleep(0.02)
    t1 = threading.Thread(target=go, args=(1, {"prompt": "Slot zero again", "n_predict": 3, "temperature": 0,
                                               "id_slot": 0}))
    t1.start()
    go(2, {"prompt": "Any slot", "n_predict": 3, "temperature": 0})
    t0.join()
    t1.join()
    return out


def test_deferred_request_gets_its_slot_as_llama_server(default_model_path: str) -> None:
    args = ["-m", default_model_path, "-c", "1024", "-t", "1", "--slots"]
    with LlamaServer(args) as real:
        want = _deferred_round(real)
    with ours(args) as us:
        got = _deferred_round(us)
    assert [w[1] for w in want][:2] == [0, 0]
    assert got == want


# ------------------------------------------------------------------ the deferral queue, white-box
class _FakeParams:
    def __init__(self, id_slot: int) -> None:
        self.id_slot = id_slot


def _sched(n: int) -> Any:
    from constrained.server.scheduler import SlotScheduler
    from constrained.server.slots import Slot

    class S(SlotScheduler):
        def _launch(self, slot: Any, task: Any) -> bool:       # no sampler: the slot taken, nothing else
            slot.task = task
            slot.state = "started"
            return True

    s = S.__new__(S)
    s.slots = [Slot(i, 64) for i in range(n)]
    s.cfg = type("C", (), {"slot_prompt_similarity": 0.1, "cache_idle_slots": True})()
    s.prompt_cache = None
    s.metrics = {"requests_processing": 0, "requests_deferred": 0}
    s._pending, s._deferred, s._tick = [], [], 0
    s.mem = None
    return s


def _task(id_slot: int = -1, toks: list[int] | None = None) -> Any:
    from constrained.server.slots import Task

    return Task(toks or [1, 2, 3], _FakeParams(id_slot), lambda ev: None)  # type: ignore[arg-type]


def test_deferred_tasks_offered_one_per_release() -> None:
    s = _sched(2)
    a, b, c, d, e = _task(), _task(), _task(1), _task(), _task(0)
    s._pending = [a, b, c, d, e]
    s._launch_pending()
    assert [x.task for x in s.slots] == [b, a]     # LRU: the last of the never-used slots first
    assert s._deferred == [c, d, e] and s.metrics["requests_deferred"] == 3
    s._release(s.slots[0])                         # slot 0 free: e asked for it, it goes first
    assert s._pending == [e] and s._deferred == [c, d]
    s._launch_pending()
    assert s.slots[0].task is e
    s._release(s.slots[1])                         # slot 1 free: c asked for it
    s._release(s.slots[0])                         # slot 0 free: nobody asked for it: the oldest (d), in front
    assert s._pending == [d, c] and s._deferred == []
    s._launch_pending()
    # d takes the least recently used slot (1, released before 0), so c, which asked for slot 1, waits again while
    # slot 0 stays idle: llama-server's order exactly (a deferred task is offered again only when a slot is
    # released)
    assert s.slots[1].task is d and s.slots[0].task is None and s._deferred == [c]
    s._release(s.slots[1])
    assert s._pending == [c]
    s._launch_pending()
    assert s.slots[1].task is c


def test_release_of_an_idle_slot_changes_nothing() -> None:
    s = _sched(2)
    s._deferred = [_task()]
    s._release(s.slots[0])
    assert s.slots[0].t_last_used == -1 and s._pending == [] and len(s._deferred) == 1


def test_cancelled_deferred_tasks_are_dropped() -> None:
    s = _sched(1)
    a, b, c = _task(), _task(), _task()
    s._pending = [a, b, c]
    s._launch_pending()
    b.cancel()
    s._release(s.slots[0])
    assert s._pending == [c] and s._deferred == []


def test_a_request_posts_its_tasks_at_once() -> None:
    import queue

    from constrained.server.engine import Engine

    eng = Engine.__new__(Engine)
    eng._queue = queue.Queue()
    eng._thread = None
    eng._stop = False
    t1, t2 = _task(), _task()
    eng.submit([t1, t2])
    assert eng._queue.qsize() == 1 and eng._queue.get() == [t1, t2]
