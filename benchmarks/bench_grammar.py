#!/usr/bin/env python
"""Grammar mask speed: our matcher vs llama.cpp's grammar sampler, teacher-forcing valid JSON documents.

For a few JSON schemas (converted to GBNF by ``constrained.json_schema``), random valid documents are tokenized with
the vocabulary and fed token by token to our matcher and to ``llama_sampler_init_grammar`` in the same process.
At every step (thread CPU time, ours and llama.cpp's interleaved): the full-vocabulary mask time of each (masks
compared for equality), and our ``allows(token)`` time
for the forced token on a matcher that never builds masks (so no mask cache helps it). Vocabulary preprocessing,
grammar parse + compile and the optional eager precomputation are timed apart. xgrammar / llguidance are not
driven (the script says whether they are installed).

    GGML_NO_BACKTRACE=1 .venv/bin/python benchmarks/bench_grammar.py --vocab gemma-4 --docs 6
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import string
import sys
import time
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SCHEMAS = {
    "person": {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "age"]},
    "orders": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "price": {"type": "number"},
        "status": {"enum": ["new", "paid", "shipped"]}, "note": {"type": ["string", "null"]}},
        "required": ["id", "price", "status", "note"]}},
    "catalog": {"type": "object", "properties": {
        "store": {"type": "string"},
        "open": {"type": "boolean"},
        "products": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "title": {"type": "string"},
            "dims": {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}},
                     "required": ["w", "h"]},
            "stock": {"type": "integer"}},
            "required": ["sku", "title", "dims", "stock"]}}},
        "required": ["store", "open", "products"]},
    # realistic shapes beside the three above (12 in all, as the peer benchmark): nested and optional objects,
    # arrays of objects, enums, patterns, formats, bounded numbers and lengths
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "country": {"enum": ["DE", "FR", "JP", "US"]},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "geo": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"]}},
        "required": ["street", "city", "country"]},
    "users": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1}, "name": {"type": "string", "maxLength": 40},
        "active": {"type": "boolean"}, "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.org$"}},
        "required": ["id", "name", "active"], "additionalProperties": False}, "minItems": 1, "maxItems": 4},
    "event": {"type": "object", "properties": {
        "title": {"type": "string"}, "day": {"type": "string", "format": "date"},
        "start": {"type": "string", "format": "time"},
        "attendees": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "online": {"type": "boolean"}},
        "required": ["title", "day"], "additionalProperties": False},
    "review": {"type": "object", "properties": {
        "rating": {"type": "integer", "minimum": 1, "maximum": 5},
        "text": {"type": "string", "minLength": 1, "maxLength": 120},
        "labels": {"type": "array", "items": {"enum": ["fast", "cheap", "broken", "great"]}, "uniqueItems": True}},
        "required": ["rating", "text"]},
    "invoice": {"type": "object", "properties": {
        "number": {"type": "string", "pattern": "^INV-[0-9]{4}$"},
        "currency": {"enum": ["EUR", "USD", "JPY"]},
        "lines": {"type": "array", "items": {"type": "object", "properties": {
            "item": {"type": "string"}, "qty": {"type": "integer", "minimum": 1, "maximum": 999},
            "price": {"type": "number", "minimum": 0}}, "required": ["item", "qty", "price"]}},
        "paid": {"type": "boolean"}},
        "required": ["number", "currency", "lines"]},
    "sensor": {"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
        "unit": {"enum": ["C", "F", "K"]},
        "readings": {"type": "array", "items": {"type": "number"}, "minItems": 1},
        "at": {"type": "string", "format": "date-time"}},
        "required": ["id", "unit", "readings"]},
    "config": {"type": "object", "properties": {
        "name": {"type": "string"}, "debug": {"type": "boolean"},
        "level": {"enum": ["low", "mid", "high"]},
        "limits": {"type": "object", "properties": {
            "cpu": {"type": "integer", "minimum": 1, "maximum": 64}, "ram": {"type": "integer", "minimum": 0}},
            "additionalProperties": False},
        "paths": {"type": "array", "items": {"type": "string"}}},
        "required": ["name"], "additionalProperties": False},
    "tree": {"type": "object", "properties": {
        "label": {"type": "string"},
        "children": {"type": "array", "items": {"type": "object", "properties": {
            "label": {"type": "string"}, "leaf": {"type": "boolean"},
            "weight": {"type": ["number", "null"]}}, "required": ["label", "leaf"]}}},
        "required": ["label", "children"]},
    "chat": {"type": "object", "properties": {
        "role": {"enum": ["system", "user", "assistant"]}, "content": {"type": "string"},
        "tool_calls": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "arguments": {"type": "object"}}, "required": ["name", "arguments"]}}},
        "required": ["role", "content"]},
}

WORDS = ["alpha", "Beta", "café", "naïve", "東京", "данные", "résumé", "x", "hello world", "tab\tsep", "quote\"d",
         "emoji 🙂", "path/to", "50%", "a\\b", "Ünïcödé", "line\nbreak", "ok"]


def _text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(1, 5))).tolist())


def _doc(name: str, rng: np.random.Generator) -> object:
    if name == "person":
        d = {"name": _text(rng), "age": int(rng.integers(0, 120))}
        if rng.random() < 0.7:
            d["email"] = "".join(rng.choice(list(string.ascii_lowercase), 8)) + "@example.org"
        if rng.random() < 0.7:
            d["tags"] = [_text(rng) for _ in range(int(rng.integers(0, 4)))]
        return d
    if name == "orders":
        return [{"id": int(rng.integers(1, 10**6)), "price": round(float(rng.random() * 1000), 2),
                 "status": str(rng.choice(["new", "paid", "shipped"])),
                 "note": None if rng.random() < 0.4 else _text(rng)} for _ in range(int(rng.integers(1, 4)))]
    if name in _DOCS:
        return _DOCS[name](rng)
    return {"store": _text(rng), "open": bool(rng.random() < 0.5),
            "products": [{"sku": f"SKU-{int(rng.integers(1000, 9999))}", "title": _text(rng),
                          "dims": {"w": round(float(rng.random() * 50), 1), "h": int(rng.integers(1, 90))},
                          "stock": int(rng.integers(0, 500))} for _ in range(int(rng.integers(1, 4)))]}


def _num(rng: np.random.Generator, lo: float, hi: float) -> float:
    return round(float(lo + rng.random() * (hi - lo)), int(rng.integers(0, 4)))


def _some(rng: np.random.Generator, d: dict, p: float = 0.6) -> dict:
    """``d`` with each optional item kept with probability ``p`` (keys starting with '?')."""
    return {k.lstrip("?"): v for k, v in d.items() if not k.startswith("?") or rng.random() < p}


_DOCS = {
    "address": lambda rng: _some(rng, {
        "street": f"{int(rng.integers(1, 200))} {_text(rng)}", "city": _text(rng),
        "country": str(rng.choice(["DE", "FR", "JP", "US"])), "?zip": f"{int(rng.integers(0, 10**5)):05d}",
        "?geo": {"lat": _num(rng, -90, 90), "lon": _num(rng, -180, 180)}}),
    "users": lambda rng: [_some(rng, {
        "id": int(rng.integers(1, 10**5)), "name": _text(rng)[:40], "active": bool(rng.random() < 0.5),
        "?email": "".join(rng.choice(list(string.ascii_lowercase), 6)) + "@example.org"})
        for _ in range(int(rng.integers(1, 5)))],
    "event": lambda rng: _some(rng, {
        "title": _text(rng), "day": f"2026-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}",
        "?start": f"{int(rng.integers(0, 24)):02d}:{int(rng.integers(0, 60)):02d}:00Z",
        "?attendees": [_text(rng) for _ in range(int(rng.integers(0, 4)))], "?online": bool(rng.random() < 0.5)}),
    "review": lambda rng: _some(rng, {
        "rating": int(rng.integers(1, 6)), "text": _text(rng)[:120] or "ok",
        "?labels": sorted(set(rng.choice(["fast", "cheap", "broken", "great"], int(rng.integers(0, 3))).tolist()))}),
    "invoice": lambda rng: _some(rng, {
        "number": f"INV-{int(rng.integers(0, 10**4)):04d}", "currency": str(rng.choice(["EUR", "USD", "JPY"])),
        "lines": [{"item": _text(rng), "qty": int(rng.integers(1, 1000)), "price": _num(rng, 0, 500)}
                  for _ in range(int(rng.integers(1, 4)))], "?paid": bool(rng.random() < 0.5)}),
    "sensor": lambda rng: _some(rng, {
        "id": "".join(rng.choice(list(string.ascii_uppercase), 2)) + f"-{int(rng.integers(0, 1000)):03d}",
        "unit": str(rng.choice(["C", "F", "K"])), "readings": [_num(rng, -40, 120) for _ in range(int(rng.integers(1, 6)))],
        "?at": f"2026-12-{int(rng.integers(1, 29)):02d}T{int(rng.integers(0, 24)):02d}:{int(rng.integers(0, 60)):02d}:00Z"}),
    "config": lambda rng: _some(rng, {
        "name": _text(rng), "?debug": bool(rng.random() < 0.5), "?level": str(rng.choice(["low", "mid", "high"])),
        "?limits": _some(rng, {"?cpu": int(rng.integers(1, 65)), "?ram": int(rng.integers(0, 10**6))}),
        "?paths": [f"/srv/{_text(rng)}" for _ in range(int(rng.integers(0, 3)))]}),
    "tree": lambda rng: {"label": _text(rng), "children": [_some(rng, {
        "label": _text(rng), "leaf": bool(rng.random() < 0.5), "?weight": None if rng.random() < 0.3 else _num(rng, 0, 10)})
        for _ in range(int(rng.integers(0, 4)))]},
    "chat": lambda rng: _some(rng, {
        "role": str(rng.choice(["system", "user", "assistant"])), "content": _text(rng),
        "?tool_calls": [{"name": "get_" + str(rng.choice(["weather", "time"])),
                         "arguments": {"city": _text(rng), "days": int(rng.integers(1, 8))}}
                        for _ in range(int(rng.integers(1, 3)))]}, 0.4),
}


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else float("nan")


def main() -> int:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="gemma-4")
    ap.add_argument("--docs", type=int, default=5, help="documents per schema")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precompute", action="store_true", help="fill the per-position caches at compile time")
    args = ap.parse_args()

    from constrained.grammar import Grammar
    from constrained.grammar.matcher import CompiledGrammar, compile_grammar
    from constrained.grammar.tokenindex import vocab_index
    from constrained.json_schema import json_schema_to_gbnf
    from oracle.cases.matcher import oracle_vocab
    from oracle.llama import CGrammar

    for lib in ("xgrammar", "llguidance"):
        print(f"{lib}: {'installed (not driven by this script)' if importlib.util.find_spec(lib) else 'not installed'}")
    t = time.perf_counter()
    vm, vocab = oracle_vocab(args.vocab)
    t_load = time.perf_counter() - t
    t = time.perf_counter()
    vocab_index(vocab)
    t_index = time.perf_counter() - t
    print(f"vocabulary {args.vocab}: {len(vocab)} tokens; read through llama.cpp {t_load:.2f} s, "
          f"matcher preprocessing (decode + index, once per vocabulary) {t_index:.2f} s")
    rng = np.random.default_rng(args.seed)
    gc.collect()
    gc.freeze()      # the vocabulary out of the cyclic collector's way, as a server does after loading
    clock = time.thread_time      # per-step timings in thread CPU time (a loaded machine inflates wall time)
    rows = []
    all_ours, all_llama, all_allows, all_allows_c, all_nocache = [], [], [], [], []
    all_accept, all_accept_c = [], []
    for name, schema in SCHEMAS.items():
        gbnf = json_schema_to_gbnf(schema)
        t = time.perf_counter()
        grammar = Grammar.from_gbnf(gbnf)
        t_parse = time.perf_counter() - t
        t = time.perf_counter()
        cg = compile_grammar(grammar, vocab)
        t_compile = time.perf_counter() - t
        t_pre = float("nan")
        if args.precompute:
            t = time.perf_counter()
            cg.precompute()
            t_pre = time.perf_counter() - t
        ours, llama, docs, nocache, accept, accept_c = [], [], [], [], [], []
        for _ in range(args.docs):
            text = json.dumps(_doc(name, rng), ensure_ascii=False).encode()
            probe = cg.matcher()
            if not (probe.accept_bytes(text) and probe.can_end()):
                print(f"  ({name}: document rejected by the grammar, skipped: {text[:60]!r})")
                continue
            docs.append(vm.tokenize(text, False) + [min(vocab.eog_ids)])
        for toks in docs:                       # full masks, ours and llama.cpp's, compared at every step
            m = cg.matcher()
            with CGrammar(vm, gbnf) as c:
                for tok in toks:
                    t0 = clock()
                    mm = m.mask()
                    t1 = clock()
                    cm = c.mask()
                    t2 = clock()
                    if not np.array_equal(mm, cm) or not mm[tok]:
                        print(f"MASK MISMATCH in {name} at token {tok}")
                        return 1
                    t3 = clock()
                    cg.mask_for(m.stacks, m.partial_utf8, state_cache=False)
                    nocache.append(clock() - t3)
                    ours.append(t1 - t0)
                    llama.append(t2 - t1)
                    t4 = clock()
                    m.accept_token(tok)
                    t5 = clock()
                    c.accept(tok)
                    accept.append(t5 - t4)
                    accept_c.append(clock() - t5)
        # allows(token) for the forced token: ours on a grammar that never built a mask (exact stack walk,
        # no cache), and llama.cpp's one-candidate apply, in a separate pass
        fresh = CompiledGrammar(grammar.parsed(vocab), vocab)
        allows, allows_c = [], []
        for toks in docs:
            a = fresh.matcher()
            with CGrammar(vm, gbnf) as c:
                for tok in toks:
                    t0 = clock()
                    ok = a.allows(tok)
                    t1 = clock()
                    okc = c.allows(tok)
                    t2 = clock()
                    assert ok and okc
                    allows.append(t1 - t0)
                    allows_c.append(t2 - t1)
                    a.accept_token(tok)
                    c.accept(tok)
        all_nocache += nocache
        all_accept += accept
        all_accept_c += accept_c
        all_ours += ours
        all_llama += llama
        all_allows += allows
        all_allows_c += allows_c
        rows.append((name, len(ours), t_parse, t_compile, t_pre, ours, llama, allows, allows_c, len(cg._local)))
    print(f"\n{'schema':9} {'steps':>5} {'parse':>6} {'compile':>7} {'precomp':>7} | {'ours med':>8} {'p90':>6} "
          f"{'p99':>6} {'max':>6} | {'llama med':>9} {'p99':>6} | {'ratio of':>8} {'ratio of':>8} | "
          f"{'allows':>7} {'p99':>6} {'llama':>6}")
    print(f"{'':9} {'':5} {'ms':>6} {'ms':>7} {'ms':>7} | {'ms':>8} {'ms':>6} {'ms':>6} {'ms':>6} | {'ms':>9} "
          f"{'ms':>6} | {'medians':>8} {'means':>8} | {'med us':>7} {'us':>6} {'med us':>6}")
    for name, steps, tp, tc, tpre, o, lla, al, alc, _nloc in rows:
        print(f"{name:9} {steps:5d} {tp * 1e3:6.1f} {tc * 1e3:7.2f} {tpre * 1e3:7.1f} | {_pct(o, 50):8.3f} "
              f"{_pct(o, 90):6.2f} {_pct(o, 99):6.2f} {max(o) * 1e3:6.1f} | {_pct(lla, 50):9.2f} {_pct(lla, 99):6.1f} | "
              f"{_pct(lla, 50) / _pct(o, 50):7.0f}x {np.mean(lla) / np.mean(o):7.1f}x | "
              f"{_pct(al, 50) * 1e3:7.1f} {_pct(al, 99) * 1e3:6.0f} {_pct(alc, 50) * 1e3:6.1f}")
    print(f"\nALL {len(all_ours)} steps: full mask ours median {_pct(all_ours, 50):.3f} ms, p90 {_pct(all_ours, 90):.2f} ms,"
          f" p99 {_pct(all_ours, 99):.2f} ms, max {max(all_ours) * 1e3:.1f} ms (cache fills included); llama.cpp median "
          f"{_pct(all_llama, 50):.2f} ms, p99 {_pct(all_llama, 99):.2f} ms; ratio of medians "
          f"{_pct(all_llama, 50) / _pct(all_ours, 50):.0f}x, of means {np.mean(all_llama) / np.mean(all_ours):.1f}x; "
          f"allows median {_pct(all_allows, 50) * 1e3:.1f} us (llama.cpp {_pct(all_allows_c, 50) * 1e3:.1f} us), "
          f"p99 {_pct(all_allows, 99) * 1e3:.0f} us")
    print(f"Without the per-state mask cache (per-suffix caches warm): median {_pct(all_nocache, 50):.2f} ms, "
          f"p90 {_pct(all_nocache, 90):.2f} ms, p99 {_pct(all_nocache, 99):.2f} ms; ratio of medians "
          f"{_pct(all_llama, 50) / _pct(all_nocache, 50):.0f}x")
    print(f"accept_token median {_pct(all_accept, 50) * 1e3:.1f} us, p99 {_pct(all_accept, 99) * 1e3:.0f} us "
          f"(llama.cpp's llama_sampler_accept median {_pct(all_accept_c, 50) * 1e3:.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
