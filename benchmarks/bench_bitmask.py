#!/usr/bin/env python
"""Batch bitmask fill: ours (``fill_next_token_bitmasks``) vs xgrammar's ``fill_next_token_bitmask``, same run.

For the JSON schemas of bench_grammar.py (converted to GBNF by llama-server's rules), valid documents are tokenized
and every prefix is a grammar state. A round picks ``batch`` states at random, puts one matcher in each (ours and
xgrammar's, teacher-forced through the same tokens) and times filling the whole int32 bitmask: ours on one thread
(fill from the per-state mask and packed-row caches, as a serving engine sees them once a schema has been used),
ours without the per-state cache (the mask walked again, then packed), xgrammar row by row, and xgrammar's
``BatchGrammarMatcher`` (its C++ thread pool). xgrammar compiles the same GBNF text (its EBNF is GBNF-derived); its
masks follow its own semantics, so only the times are compared. Per-row times: median and p99 over rounds.

Run in the scale venv (xgrammar is there):

    .venv-vllm/bin/python benchmarks/bench_bitmask.py [--vocab qwen2 gemma-4] [--batches 1 16 64 256]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def _bench_grammar():
    spec = importlib.util.spec_from_file_location("bench_grammar", ROOT / "benchmarks" / "bench_grammar.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ms(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q))


def main() -> int:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", nargs="+", default=["qwen2", "gemma-4"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 16, 64, 256])
    ap.add_argument("--docs", type=int, default=3, help="documents per schema")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per batch size (default: ~2000 rows, 5..60)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch
    import xgrammar as xgr

    from constrained.grammar import Grammar
    from constrained.grammar.bitmask import allocate_token_bitmask, fill_next_token_bitmasks, pack_mask
    from constrained.grammar.matcher import compile_grammar
    from constrained.grammar.tokenindex import vocab_index
    from constrained.json_schema import json_schema_to_gbnf
    from oracle.cases.matcher import oracle_vocab

    bg = _bench_grammar()
    load = os.getloadavg()
    from importlib.metadata import version

    print(f"xgrammar {version('xgrammar')}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs")
    rng = np.random.default_rng(a.seed)
    summary = []
    for vname in a.vocab:
        vm, vocab = oracle_vocab(vname)
        vocab_index(vocab)
        n = len(vocab)
        width = n
        info = xgr.TokenizerInfo(list(vocab.pieces), xgr.VocabType.RAW, vocab_size=width,
                                 stop_token_ids=sorted(vocab.eog_ids))
        compiler = xgr.GrammarCompiler(info, max_threads=1)
        states = []       # (ours compiled, xgrammar compiled, token prefix)
        for name, schema in bg.SCHEMAS.items():
            gbnf = json_schema_to_gbnf(schema)
            cg = compile_grammar(Grammar.from_gbnf(gbnf), vocab)
            try:
                xg = compiler.compile_grammar(gbnf)
                how = "same GBNF"
            except Exception as err:  # noqa: BLE001 - xgrammar refuses some of llama.cpp's GBNF
                xg = compiler.compile_json_schema(json.dumps(schema))
                why = str(err).strip().splitlines()[0][:90] if str(err).strip() else type(err).__name__
                how = f"xgrammar's own JSON schema conversion (it refuses llama.cpp's GBNF: {why})"
            print(f"{vname}: schema {name}: xgrammar compiled {how}")
            for _ in range(a.docs):
                text = json.dumps(bg._doc(name, rng), ensure_ascii=False).encode()
                toks = vm.tokenize(text, False)
                m = cg.matcher()
                xm = xgr.GrammarMatcher(xg)
                ok = all(m.accept_token(t) for t in toks)
                xok = all(xm.accept_token(t) for t in toks)
                if not (ok and xok):
                    continue
                states += [(cg, xg, toks[:k]) for k in range(len(toks) + 1)]
        print(f"{vname}: {n} tokens, {len(states)} teacher-forced states")
        # warm our caches once over every state (a schema already in use)
        warm = allocate_token_bitmask(1, width)
        for cg, _, pre in states:
            m = cg.matcher()
            for t in pre:
                m.accept_token(t)
            fill_next_token_bitmasks([m], warm)
        xbatch = xgr.BatchGrammarMatcher(max_threads=max(1, (os.cpu_count() or 2)))
        for b in a.batches:
            rounds = a.rounds or int(min(60, max(5, 2000 // b)))
            ours, nocache, xrow, xpar = [], [], [], []
            for _ in range(rounds):
                pick = [states[i] for i in rng.integers(0, len(states), b)]
                ms, xs = [], []
                for cg, xg, pre in pick:
                    m = cg.matcher()
                    xm = xgr.GrammarMatcher(xg)
                    for t in pre:
                        m.accept_token(t)
                        xm.accept_token(t)
                    ms.append(m)
                    xs.append(xm)
                bm = allocate_token_bitmask(b, width, torch=True)
                t0 = time.perf_counter()
                fill_next_token_bitmasks(ms, bm, vocab_size=width)
                ours.append((time.perf_counter() - t0) / b)
                t0 = time.perf_counter()
                for i, m in enumerate(ms):
                    bm[i].copy_(torch.from_numpy(pack_mask(
                        m.compiled.mask_for(m.stacks, m.partial_utf8, state_cache=False), width)))
                nocache.append((time.perf_counter() - t0) / b)
                xb = xgr.allocate_token_bitmask(b, width)
                t0 = time.perf_counter()
                for i, xm in enumerate(xs):
                    xm.fill_next_token_bitmask(xb, i)
                xrow.append((time.perf_counter() - t0) / b)
                t0 = time.perf_counter()
                xbatch.batch_fill_next_token_bitmask(xs, xb)
                xpar.append((time.perf_counter() - t0) / b)
            row = (vname, b, rounds, _ms(ours, 50), _ms(ours, 99), _ms(nocache, 50), _ms(nocache, 99),
                   _ms(xrow, 50), _ms(xrow, 99), _ms(xpar, 50), _ms(xpar, 99))
            summary.append(row)
            print(f"  batch {b:3d} ({rounds} rounds): per row ours {row[3]:.4f} ms (p99 {row[4]:.4f}), no state "
                  f"cache {row[5]:.3f} (p99 {row[6]:.3f}); xgrammar {row[7]:.4f} (p99 {row[8]:.4f}), batched "
                  f"{row[9]:.4f} (p99 {row[10]:.4f}); ours/xgrammar {row[3] / row[7]:.2f}x", flush=True)
    print(f"\n{'vocab':8} {'batch':>5} | {'ours med':>8} {'p99':>7} | {'no-cache':>8} {'p99':>7} | {'xgr med':>8} "
          f"{'p99':>7} | {'xgr batch':>9} {'p99':>7} | {'ours/xgr':>8}   (ms per row)")
    for v, b, _r, om, o99, nm, n99, xm_, x99, pm, p99 in summary:
        print(f"{v:8} {b:5d} | {om:8.4f} {o99:7.4f} | {nm:8.3f} {n99:7.3f} | {xm_:8.4f} {x99:7.4f} | {pm:9.4f} "
              f"{p99:7.4f} | {om / xm_:7.2f}x")
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
