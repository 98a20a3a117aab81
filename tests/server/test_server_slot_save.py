"""Slot persistence (``POST /slots/{id}?action=save|restore|erase``, ``--slot-save-path``) against the real
llama-server: the same requests, in the same order, to both servers started with the same flags (each its own save
directory); bodies identical apart from timings, the files byte for byte the same, and a restored slot reusing its
cache as llama-server's does (``timings.cache_n`` / ``prompt_n`` of the next request).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

PROMPT = ("You are a careful assistant. Here is a long agent prompt that should be kept between sessions: "
          + " ".join(f"rule {i} says be precise;" for i in range(12)))


def _cmpl(prompt: str, id_slot: int, n: int = 4, **kw: Any) -> tuple[str, str, Any]:
    return "POST", "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "id_slot": id_slot, **kw}


def _act(id_slot: Any, action: str | None, body: Any = None) -> tuple[str, str, Any]:
    q = f"?action={action}" if action is not None else ""
    return "POST", f"/slots/{id_slot}{q}", body


CORRUPT = b"\x00\x01garbage"

SEQUENCE: list[tuple[str, str, Any]] = [
    _cmpl(PROMPT, 1),
    _act(1, "save", {"filename": "agent.bin"}),
    _act(1, "erase"),
    _act(1, "erase"),                                    # nothing left: n_erased 0
    _cmpl(PROMPT, 1),                                    # recomputed: cache_n 0
    _act(0, "restore", {"filename": "agent.bin"}),       # into another slot
    _cmpl(PROMPT + " And one more", 0),                  # reuses the restored prefix
    _act(1, "save", {"filename": "two.bin"}),
    _act(99, "save", {"filename": "wrap.bin"}),          # slot 99 % 4 = 3 (empty); the answer says 99
    _act(3, "restore", {"filename": "two.bin"}),
    _cmpl(PROMPT, 3),
    _act(2, "restore", {"filename": "wrap.bin"}),        # an empty slot's file
    # errors
    _act(0, "restore", {"filename": "missing.bin"}),
    _act(0, "restore", {"filename": "corrupt.bin"}),
    _act(0, "save", {"filename": "../escape.bin"}),
    _act(0, "save", {"filename": "sub/x.bin"}),
    _act(0, "save", {"filename": "a\\b"}),
    _act(0, "save", {"filename": ""}),
    _act(0, "save", {"filename": "x."}),
    _act(0, "save", {"filename": " x"}),
    _act(0, "save", {"filename": "x "}),
    _act(0, "save", {"filename": "a:b"}),
    _act(0, "save", {"filename": "a|b"}),
    _act(0, "save", {"filename": "."}),
    _act(0, "save", {"filename": "a..b"}),
    _act(0, "save", {"filename": "tab\there"}),
    _act(0, "save", {"filename": "x" * 256}),
    _act(0, "save", {"filename": "\u2215slash"}),
    _act(0, "save", {"filename": "caf\u00e9 \u6f22\u5b57.bin"}),     # valid: UTF-8 names are fine
    _act(0, "save", {"filename": 5}),
    _act(0, "save", {"name": "x.bin"}),
    _act(0, "save", [1]),
    _act(0, "save", b"{not json"),
    _act(0, "bogus", {"filename": "x.bin"}),
    _act(0, None, {"filename": "x.bin"}),
    _act("abc", "save", {"filename": "x.bin"}),
    _act("99999999999", "save", {"filename": "x.bin"}),
    _act("%202x", "erase"),                              # stoi(" 2x") = 2
    _act(-1, "erase"),                                   # -1 wraps to the last slot
    ("GET", "/slots", None),
]


def _summary(status: int, headers: dict[str, str], payload: bytes) -> Any:
    d = json.loads(payload)
    if isinstance(d, dict) and "timings" in d:
        t = d.pop("timings")
        if "cache_n" in t:                                 # a completion: what the cache gave it
            d["cache"] = (t["cache_n"], t["prompt_n"])
        else:
            assert set(t) <= {"save_ms", "restore_ms"} and len(t) == 1, t
            d["timing_key"] = next(iter(t))
    if isinstance(d, dict):
        for k in ("generation_settings", "prompt", "id_task", "created", "model", "system_fingerprint", "id"):
            d.pop(k, None)
    if isinstance(d, list):
        d = [{k: v for k, v in s.items() if k not in ("id_task",)} for s in d]
    return status, d


def _run(srv: LlamaServer, save_dir: Path) -> tuple[list[Any], dict[str, bytes]]:
    (save_dir / "corrupt.bin").write_bytes(CORRUPT)
    out = []
    for m, p, b in SEQUENCE:
        out.append(_summary(*raw(srv, m, p, b)))
    files = {f.name: f.read_bytes() for f in sorted(save_dir.iterdir())}
    return out, files


def _args(model: str, d: Path, extra: list[str] | None = None) -> list[str]:
    return ["-m", model, "-c", "1024", "-t", "1", "--slots", "--slot-save-path", str(d), *(extra or [])]


# the default model has a sliding window: without --swa-full a restored state lacks the checkpoints the reuse
# needs, so llama-server recomputes the prompt (cache_n 0); with --swa-full the restored cache is reused
@pytest.mark.parametrize("extra", [["--swa-full"], []], ids=["swa-full", "swa"])
def test_slot_save_restore_erase_as_llama_server(default_model_path: str, tmp_path: Path, extra: list[str]) -> None:
    dr, do = tmp_path / "real", tmp_path / "ours"
    dr.mkdir()
    do.mkdir()
    with LlamaServer(_args(default_model_path, dr, extra)) as real:
        want, want_files = _run(real, dr)
    with ours(_args(default_model_path, do, extra)) as us:
        got, got_files = _run(us, do)
    # not vacuous: the save wrote tokens, the erased slot recomputed, the restored one reused them (--swa-full)
    assert want[1][0] == 200 and want[1][1]["n_saved"] > 60, want[1]
    assert want[4][1]["cache"][0] == 0, want[4]
    if extra:
        assert want[6][1]["cache"][0] > 60, want[6]
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if isinstance(SEQUENCE[i][2], bytes):             # nlohmann's parse-error texts are not reproduced
            assert (g[0], g[1]["error"]["type"]) == (w[0], w[1]["error"]["type"]), (i, SEQUENCE[i])
            continue
        assert g == w, (i, SEQUENCE[i])
    assert got_files.keys() == want_files.keys()
    for name in want_files:
        assert got_files[name] == want_files[name], name


def _deferred(srv: LlamaServer) -> list[Any]:
    # a save of a busy slot waits for it to be released, then saves what it then holds
    out: list[Any] = [None]

    def go() -> None:
        out[0] = _summary(*raw(srv, *_cmpl("Count slowly from one to fifty:", 2, 48, ignore_eos=True)))

    t = threading.Thread(target=go)
    t.start()
    import time

    for _ in range(300):
        s, _, p = raw(srv, "GET", "/slots")
        if json.loads(p)[2]["is_processing"]:
            break
        time.sleep(0.01)
    saved = _summary(*raw(srv, *_act(2, "save", {"filename": "busy.bin"})))
    t.join()
    return [out[0], saved]


def test_save_of_a_busy_slot_waits_as_llama_server(default_model_path: str, tmp_path: Path) -> None:
    dr, do = tmp_path / "real", tmp_path / "ours"
    dr.mkdir()
    do.mkdir()
    with LlamaServer(_args(default_model_path, dr)) as real:
        want = _deferred(real)
    with ours(_args(default_model_path, do)) as us:
        got = _deferred(us)
    assert want[1][1]["n_saved"] > 48, want
    assert got == want
    assert (do / "busy.bin").read_bytes() == (dr / "busy.bin").read_bytes()


def test_slot_actions_refused_without_save_path(default_model_path: str) -> None:
    args = ["-m", default_model_path, "-c", "1024", "-t", "1"]
    cases = [_act(0, "save", {"filename": "x.bin"}), _act(0, "erase"), _act("abc", "bogus")]
    with LlamaServer(args) as real:
        want = [_summary(*raw(real, *c)) for c in cases]
    with ours(args) as us:
        got = [_summary(*raw(us, *c)) for c in cases]
    assert want[0][0] == 501
    assert got == want


def test_save_path_must_be_a_directory(tmp_path: Path) -> None:
    from constrained.errors import FlagError
    from constrained.llama.flags import parse_server_args

    a = parse_server_args(["--slot-save-path", str(tmp_path)])
    assert a.slot_save_path == str(tmp_path) + "/"
    with pytest.raises(FlagError, match="not a directory"):
        parse_server_args(["--slot-save-path", str(tmp_path / "nope")])
