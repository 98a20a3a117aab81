#!/usr/bin/env python
"""Mask latency distribution and peak memory, ours vs llama.cpp's grammar sampler in the same run, on the benchmark's
JSON schemas and on hostile grammars: an ``enum`` of 2,000 strings, an object with 1,000 required properties and the
ambiguous ``s ::= " " s "b" | " " s "c" | "d"``.

Each workload runs in its own process (so its peak RSS is its own, vocabulary included) on a freshly compiled
grammar: a document is teacher-forced token by token; at each step we time (thread CPU time, interleaved) our first
mask of the state (*first pass*, ``GrammarMatcher.mask()``: a bool array over the vocabulary; whatever per-position
walks it needs are computed then), our mask again without the per-state cache (*fresh state*: the per-position caches
warm) in two forms: the bool mask (``mask_for(..., state_cache=False)``, a new 262,144-byte array) and the packed row
(*fresh fill*, ``fill_bits_for(..., state_cache=False)`` into a preallocated 32 KB row, the int32 bitmask format:
the form xgrammar's column is measured in), then llama.cpp's mask, and, where xgrammar is installed (``.venv-vllm``),
xgrammar's ``fill_next_token_bitmask`` (its compile time apart: it precomputes there). The two fresh forms alternate
which goes first from step to step (the first of them meets the caches as llama.cpp's walk of the previous step left
them). Our masks (and rows) are compared with llama.cpp's for equality. A second table times the fresh state
*warm*: the same states once more after the run, ours (both forms) and xgrammar's fill at the same step with nothing
else between (llama.cpp's 40-60 ms walk over the vocabulary leaves every cache cold for whatever call follows it). No ``precompute()``; *compile* is
``compile_grammar`` (its compile step prepares the table parts of the grammar's wide character classes, ~0.6 ms each,
shared by the vocabulary's later grammars). Peak RSS is the worker's, llama.cpp's grammar included.
The set-up's objects are frozen out of Python's cyclic collector (``gc.freeze()``) before the steps, as a server
does after loading: a generation-2 collection over that heap costs 20-110 ms wherever it lands.

    GGML_NO_BACKTRACE=1 nice .venv-vllm/bin/python benchmarks/bench_grammar_hostile.py --vocab gemma-4
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

AMBIGUOUS = 'root ::= s\ns ::= " " s "b" | " " s "c" | "d"'
_SCHEMAS: dict[str, object] = {}      # the JSON schema behind each workload (for xgrammar's own conversion)


def _workloads() -> dict[str, tuple[str, bytes, int]]:
    """name -> (GBNF, document, steps)."""
    import numpy as np

    from constrained.json_schema import json_schema_to_gbnf

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grammar import SCHEMAS, _doc

    rng = np.random.default_rng(0)
    out = {}
    for name, schema in SCHEMAS.items():
        out[name] = (json_schema_to_gbnf(schema), json.dumps(_doc(name, rng), ensure_ascii=False).encode(), 400)
        _SCHEMAS[name] = schema
    _SCHEMAS["enum2000"] = {"enum": [f"v{i}" for i in range(2000)]}
    out["enum2000"] = (json_schema_to_gbnf(_SCHEMAS["enum2000"]), b'"v1234"', 400)
    n = 1000
    props = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)},
             "required": [f"p{i}" for i in range(n)]}
    _SCHEMAS["props1000"] = props
    out["props1000"] = (json_schema_to_gbnf(props), ("{" + ", ".join(f'"p{i}": {i}' for i in range(n)) + "}").encode(),
                        120)
    out["ambiguous"] = (AMBIGUOUS, b"      d" + b"bc" * 3, 400)
    return out


def _xgrammar(vocab, gbnf: str, schema: object):  # noqa: ANN001, ANN202
    """xgrammar's compiled grammar and how it was built (its own JSON-schema conversion where it refuses
    llama.cpp's GBNF), or None where xgrammar is not installed."""
    try:
        import xgrammar as xgr
    except ImportError:
        return None
    info = xgr.TokenizerInfo(list(vocab.pieces), xgr.VocabType.RAW, vocab_size=len(vocab),
                             stop_token_ids=sorted(vocab.eog_ids))
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    t = time.thread_time()
    try:
        xg, how = compiler.compile_grammar(gbnf), "GBNF"
    except Exception:  # noqa: BLE001 - xgrammar refuses some of llama.cpp's GBNF
        if schema is None:
            return None
        xg, how = compiler.compile_json_schema(json.dumps(schema)), "its schema conversion"
    return xgr, xg, how, time.thread_time() - t


def _run(vocab_name: str, name: str, q) -> None:  # noqa: ANN001
    import numpy as np

    from constrained import Grammar
    from constrained.grammar.matcher import compile_grammar
    from oracle.cases.matcher import oracle_vocab
    from oracle.llama import CGrammar

    vm, vocab = oracle_vocab(vocab_name)
    from constrained.grammar.tokenindex import vocab_index

    vocab_index(vocab)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    gbnf, doc, steps = _workloads()[name]
    clock = time.thread_time       # CPU time of this thread: survives a loaded machine better than wall time
    t = clock()
    cg = compile_grammar(Grammar.from_gbnf(gbnf), vocab)
    t_compile = clock() - t
    t = clock()
    c = CGrammar(vm, gbnf)
    t_compile_c = clock() - t
    peer = _xgrammar(vocab, gbnf, _SCHEMAS.get(name))
    xm = bitmask = None
    if peer is not None:
        xgr, xg, how, t_compile_x = peer
        xm = xgr.GrammarMatcher(xg)
        bitmask = xgr.allocate_token_bitmask(1, len(vocab))
    m = cg.matcher()
    row = np.zeros((len(vocab) + 7) // 8, dtype=np.uint8)     # our packed row, allocated once as xgrammar's bitmask
    by_piece = {p: i for i, p in enumerate(vocab.pieces) if p and not vocab.eog_ids.__contains__(i)}
    longest = max(map(len, by_piece))
    first, fresh, ffill, llama, xfill = [], [], [], [], []
    states, toks = [], []
    at, equal = 0, True
    # the set-up's objects (vocabulary, llama.cpp's and xgrammar's grammars, the piece table) out of the cyclic
    # collector's way, as a server does once its model is loaded: otherwise a generation-2 collection over this
    # heap (20-110 ms measured) lands in whichever step happens to allocate then
    gc.collect()
    gc.freeze()
    for step in range(steps):
        t0 = clock()
        mask = m.mask()
        t1 = clock()
        for which in (0, 1) if step % 2 else (1, 0):
            ta = clock()
            if which:
                cg.fill_bits_for(m.stacks, m.partial_utf8, row, state_cache=False)
                ffill.append(clock() - ta)
            else:
                cg.mask_for(m.stacks, m.partial_utf8, state_cache=False)
                fresh.append(clock() - ta)
        t2 = clock()
        cm = c.mask()
        t3 = clock()
        if xm is not None:
            xm.fill_next_token_bitmask(bitmask)
            xfill.append(clock() - t3)
        equal &= bool(np.array_equal(mask, cm))
        equal &= bool(np.array_equal(np.unpackbits(row, count=len(mask), bitorder="little").view(bool), cm))
        first.append(t1 - t0)
        llama.append(t3 - t2)
        states.append((m.stacks, m.partial_utf8))
        if at >= len(doc):
            break
        tok = next((by_piece[doc[at:at + j]] for j in range(min(longest, len(doc) - at), 0, -1)
                    if doc[at:at + j] in by_piece and mask[by_piece[doc[at:at + j]]]), None)
        if tok is None:
            break
        m.accept_token(tok)
        toks.append(tok)
        c.accept(tok)
        if xm is not None and not xm.accept_token(tok):
            xm = None             # its own conversion parted from llama.cpp's grammar here: its series stops
        at += len(vocab.pieces[tok])
    c.free()
    # the fresh state again over the same states, away from llama.cpp's walk (40-60 ms over the whole vocabulary,
    # which leaves every cache cold for the call after it): ours and xgrammar's fill at the same step, alternating
    # which goes first, nothing else between
    wfresh, wfill, wxfill = [], [], []
    xw = xgr.GrammarMatcher(xg) if peer is not None else None
    for step, (st, pu) in enumerate(states):
        for which in (0, 1, 2) if step % 2 else (2, 1, 0):
            ta = clock()
            if which == 0:
                cg.mask_for(st, pu, state_cache=False)
                wfresh.append(clock() - ta)
            elif which == 1:
                cg.fill_bits_for(st, pu, row, state_cache=False)
                wfill.append(clock() - ta)
            elif xw is not None:
                xw.fill_next_token_bitmask(bitmask)
                wxfill.append(clock() - ta)
        if xw is not None and (step >= len(toks) or not xw.accept_token(toks[step]) or len(wxfill) >= len(xfill)):
            xw = None             # its series stops where the first pass's did
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    q.put({"name": name, "steps": len(first), "equal": equal, "first": first, "fresh": fresh, "ffill": ffill,
           "llama": llama,
           "compile": t_compile, "compile_c": t_compile_c, "rss_mb": peak / 1024, "base_mb": base_rss / 1024,
           "wfresh": wfresh, "wfill": wfill, "wxfill": wxfill,
           "xfill": xfill, "xhow": peer[2] if peer else None, "compile_x": peer[3] if peer else None})


def _construction(vocab_name: str, q) -> None:  # noqa: ANN001
    """Parse + matcher vs ``llama_grammar_init_impl`` on two grammars near the element limit (thread CPU time)."""
    from constrained import Grammar
    from constrained.json_schema import json_schema_to_gbnf
    from oracle.cases.matcher import oracle_vocab
    from oracle.llama import CGrammar

    vm, vocab = oracle_vocab(vocab_name)
    from constrained.grammar.tokenindex import vocab_index

    vocab_index(vocab)
    texts = {"201 x maxLength 1000": json_schema_to_gbnf({"type": "object", "properties": {
                 f"p{i}": {"type": "string", "maxLength": 1000} for i in range(201)}}),
             "4M-element literal": 'root ::= "' + "x" * 1999 + '"{2000}'}
    out: dict[str, tuple[float, float]] = {}
    for name, text in texts.items():
        t = time.thread_time()
        Grammar.from_gbnf(text).matcher(vocab)
        ours = time.thread_time() - t
        t = time.thread_time()
        c = CGrammar(vm, text)
        theirs = time.thread_time() - t
        c.free()
        out[name] = (ours, theirs)
    q.put(out)


def _stats(xs: list[float]) -> tuple[float, float, float]:
    import numpy as np

    a = np.asarray(xs) * 1e3
    return float(np.median(a)), float(np.percentile(a, 99)), float(a.max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="gemma-4")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--construction", action="store_true",
                    help="only time matcher construction of two grammars near the element limit vs llama.cpp")
    args = ap.parse_args()
    if args.construction:
        q = mp.get_context("spawn").Queue()
        p = mp.get_context("spawn").Process(target=_construction, args=(args.vocab, q))
        p.start()
        for name, (ours, theirs) in q.get(timeout=600).items():
            print(f"construction {name}: ours {ours:.2f} s, llama.cpp {theirs:.3f} s ({ours / theirs:.1f}x)")
        p.join()
        print(f"thread CPU time; load average {os.getloadavg()[0]:.2f}")
        return 0
    names = args.only or list(_workloads())
    ctx = mp.get_context("spawn")
    print(f"vocabulary {args.vocab}; load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'workload':10} {'steps':>5} {'eq':>3} | {'first-pass ms med / p99 / max @step':>36} | "
          f"{'fresh-state ms med / p99 / max':>30} | {'fresh fill ms med / max':>23} | "
          f"{'llama.cpp ms med / p99 / max':>29} | {'ratio':>6} | "
          f"{'compile ms':>10} {'llama':>6} | {'peak MB':>7} {'vocab':>6} | {'xgrammar fill ms med / p99 / max':>32}"
          f" {'compile':>8}")
    bad = 0
    warm = []
    for name in names:
        q = ctx.Queue()
        p = ctx.Process(target=_run, args=(args.vocab, name, q))
        p.start()
        r = q.get()
        p.join()
        f, s, ff, ll = _stats(r["first"]), _stats(r["fresh"]), _stats(r["ffill"]), _stats(r["llama"])
        bad += not r["equal"]
        xg = "not installed"
        if r["xhow"] is not None and r["xfill"]:
            x = _stats(r["xfill"])
            xg = (f"{x[0]:8.3f} / {x[1]:7.3f} / {x[2]:7.3f} {r['compile_x'] * 1e3:8.0f} ({r['xhow']}, "
                  f"{len(r['xfill'])} steps)")
        print(f"{name:10} {r['steps']:5d} {'yes' if r['equal'] else 'NO':>3} | "
              f"{f[0]:8.3f} / {f[1]:8.2f} / {f[2]:8.2f} @{max(range(len(r['first'])), key=r['first'].__getitem__):4d} | "
              f"{s[0]:8.3f} / {s[1]:8.3f} / {s[2]:8.2f} | "
              f"{ff[0]:11.4f} / {ff[2]:9.3f} | "
              f"{ll[0]:8.2f} / {ll[1]:7.1f} / {ll[2]:7.1f} | {sum(r['llama']) / sum(r['first']):5.1f}x | "
              f"{r['compile'] * 1e3:10.1f} {r['compile_c'] * 1e3:6.1f} | {r['rss_mb']:7.0f} {r['base_mb']:6.0f} | {xg}",
              flush=True)
        warm.append((name, r))
    print(f"\n{'workload':10} | {'warm fresh-state ms med / p99 / max':>35} | {'warm fresh fill ms med / p99 / max':>34} | "
          f"{'xgrammar warm fill ms med / p99 / max':>37}")
    for name, r in warm:
        s, ff = _stats(r["wfresh"]), _stats(r["wfill"])
        xg = "not installed"
        if r["wxfill"]:
            x = _stats(r["wxfill"])
            xg = f"{x[0]:10.4f} / {x[1]:8.4f} / {x[2]:8.3f} ({len(r['wxfill'])} steps)"
        print(f"{name:10} | {s[0]:13.4f} / {s[1]:8.4f} / {s[2]:8.3f} | {ff[0]:12.4f} / {ff[1]:8.4f} / {ff[2]:8.3f} | {xg}")
    print(f"thread CPU time; warm = the same states again after the run, nothing but ours and xgrammar's fill between "
          f"(alternating order); fresh state = bool mask, fresh fill = packed row (both without the state cache); "
          f"ratio = llama.cpp's total mask time / our total first-pass mask time; load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
