"""Long fuzz run of the grammar engine: GBNF text (mutants of the bundled grammars and random fragments), matcher
call sequences and JSON documents under schemas, in a worker process with a memory cap and a per-case time limit.

Counts: inputs (each grammar text, each matcher call, each document), clean errors, wrong exception types,
crashes (the worker died), hangs (a case past the time limit), mask mismatches against the port of llama.cpp's
``llama_grammar_reject_candidates``. Any failing case is printed with its seed, so it can be replayed.

    nice -n 10 .venv/bin/python scripts/fuzz_grammar.py --seconds 900 --mem-gb 3 --case-seconds 10

``--vocab NAME`` (one of the oracle's vocab-only GGUFs, oracle/sdist.py, e.g. ``llama-spm`` or ``gemma-4``) runs the call sequences
over a real vocabulary instead, where the compiled walk's shortcuts and helpers take over (loop and chain shortcuts,
trie ranges, the wide classes prepared at compile, packing by id, the seeded direct walk, ``fill_bits_for``): each
mask is then compared with the Python reference walk of the state (``mask.walk_py`` over a fresh copy of the table,
numpy helpers, no per-position caches), and each packed row with the mask. Every mask check also compares the
compiled stack expansion (``GrammarRules.advance``) with its Python reference on the state's stacks.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import resource
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FRAGMENTS = ['"a"', '"ab"', "[a-z]", "[^\\n]", ".", "x", "root", "(", ")", "|", "*", "+", "?", "{2}", "{0,3}",
             "{1,}", " ", "\n", "::=", "<[5]>", "!<[7]>", '"\\u00e9"', "[\\x00-\\x7F]", '"\\""', "#c\n", '""',
             "[é-ü]", '"\\U0001F600"', "{2001}", "x ::= ", "y", "y ::= x y | \"q\"", "((", "))"]


class _Timeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ANN001, ANN202
    raise _Timeout()


def _mutate(rng: random.Random, text: str) -> str:
    s = list(text)
    for _ in range(rng.randint(1, 4)):
        k = rng.random()
        i = rng.randrange(len(s) + 1)
        if k < 0.3 and s:
            del s[min(i, len(s) - 1)]
        elif k < 0.6:
            s.insert(i, rng.choice(FRAGMENTS))
        elif k < 0.8 and s:
            s[min(i, len(s) - 1)] = chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 0x3000)]))
        else:
            j = rng.randrange(len(s) + 1)
            s[i:j] = []
    return "".join(s)


def _random_grammar(rng: random.Random) -> str:
    rules = []
    for name in ["root"] + ["x", "y"][: rng.randint(0, 2)]:
        alts = [" ".join(rng.choice(FRAGMENTS[:12] + ['"q"', "[0-9]+", "x", "y"]) for _ in range(rng.randint(1, 4)))
                for _ in range(rng.randint(1, 3))]
        rules.append(f"{name} ::= " + " | ".join(alts))
    return "\n".join(rules)


def _schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["string", "integer", "number", "boolean", "null", "object", "array", "enum", "pattern", "anyOf"]
    k = rng.choice(kinds if depth < 3 else kinds[:5] + ["enum", "pattern"])
    if k == "object":
        props = {f"p{i}": _schema(rng, depth + 1) for i in range(rng.randint(0, 3))}
        return {"type": "object", "properties": props, "required": [p for p in props if rng.random() < 0.5],
                "additionalProperties": rng.random() < 0.5}
    if k == "array":
        return {"type": "array", "items": _schema(rng, depth + 1), "maxItems": rng.randint(0, 4)}
    if k == "enum":
        return {"enum": [rng.choice(["a", 1, None, True, "é", [1]]) for _ in range(rng.randint(1, 4))]}
    if k == "pattern":
        return {"type": "string", "pattern": rng.choice(["^(a+)+$", "^[a-z]{2,5}$", "^(a|a)*$", "a.c", "^\\d+$",
                                                          "^((a*)*)*b$", "^(a?){100}$", "^[^\"]*$"])}
    if k == "anyOf":
        return {"anyOf": [_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    return {"type": k}


def _doc(rng: random.Random, depth: int = 0) -> object:
    k = rng.random()
    if depth > 2 or k < 0.5:
        return rng.choice(["a" * rng.randint(0, 40) + rng.choice(["", "!", "b"]), 1, -2.5, None, True, "é", "",
                           10**30])
    if k < 0.75:
        return [_doc(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["p0", "p1", "p2", "aaa", "x"]): _doc(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _python_reference(vocab):  # noqa: ANN001, ANN202
    """The mask of a matcher's state by the Python walk (numpy helpers, a fresh copy of the table: no cache the
    compiled code filled is read), with ``mask_for``'s end-of-generation rule."""
    import copy

    import numpy as np

    from constrained.grammar import packing, walk_python
    from constrained.grammar.tokenindex import vocab_index

    idx = vocab_index(vocab)

    def fresh(t):  # noqa: ANN001, ANN202
        t2 = copy.copy(t)
        t2.__dict__ = {k: v for k, v in t.__dict__.items() if k in ("ids", "start", "length", "flat", "rem", "val",
                                                                   "perm", "order0", "cp0", "longer", "inv", "lex",
                                                                   "_cols", "_summary", "_ascii_rows")}
        return t2

    def reference(m):  # noqa: ANN001, ANN202
        cg = m.compiled
        g = cg.rules
        old = packing.COMPILED_HELPERS
        packing.COMPILED_HELPERS = False
        try:
            if m.partial_utf8[1] > 0:
                pt = fresh(idx.partial_table(*m.partial_utf8))
                b = np.zeros(cg.n_vocab, dtype=bool)
                b[pt.ids[walk_python.walk_py(g, pt, m.stacks)]] = True
            else:
                t = fresh(idx.table)
                b = packing.by_id(t, walk_python.walk_py(g, t, m.stacks))
        finally:
            packing.COMPILED_HELPERS = old
        b[idx.eog_ids] = m.can_end()
        return b

    return reference


def _advance_differs(g, stacks) -> bool:  # noqa: ANN001
    """Whether the compiled ``GrammarRules.advance`` (where built) and ``advance_py`` differ on the stacks after one
    code point of the state's class-topped stacks and on their prefixes (stacks or the same exception)."""
    def run(f, s):  # noqa: ANN001, ANN202
        try:
            return f(s)
        except Exception as e:  # noqa: BLE001 - the exception must be the same
            return (type(e).__name__, str(e))

    for st in stacks[:16]:
        cases = [st[:k] for k in range(len(st) + 1)]
        if st and st[-1] in g.classes:
            cases.append(g.after_char(st))
        for c in cases:
            got = run(g.advance_compiled, c)
            if got is not None and got != run(g.advance_py, c):
                return True
    return False


def _worker(conn, mem_gb: float, case_seconds: float, vocab_name: str | None = None) -> None:  # noqa: ANN001, C901
    resource.setrlimit(resource.RLIMIT_AS, (int(mem_gb * (1 << 30)),) * 2)
    signal.signal(signal.SIGALRM, _alarm)
    import numpy as np
    from constrained.grammars import load, names

    from constrained import Grammar, validate
    from constrained.errors import ConstrainedError
    from oracle.cases.fuzz_vocab import VOCAB, N, reference_mask

    if vocab_name:
        from oracle.cases.matcher import oracle_vocab

        VOCAB = oracle_vocab(vocab_name)[1]  # noqa: N806
        N = len(VOCAB)  # noqa: N806
        reference_mask = _python_reference(VOCAB)
    row = np.zeros((N + 7) // 8 + 1, dtype=np.uint8)

    bundled = [load(n) for n in names()]
    while True:
        job = conn.recv()
        if job is None:
            return
        start, count = job
        tally = {"inputs": 0, "ok": 0, "clean": 0, "wrong_type": 0, "mismatch": 0, "hang": 0, "cases": 0}
        bad: list = []
        for seed in range(start, start + count):
            rng = random.Random(seed)
            signal.setitimer(signal.ITIMER_REAL, case_seconds)
            try:
                kind = seed % 4
                if kind == 3:                                        # a document under a schema
                    tally["inputs"] += 1
                    try:
                        out = validate(_doc(rng), _schema(rng))
                        assert isinstance(out, list)
                        tally["ok"] += 1
                    except ConstrainedError:
                        tally["clean"] += 1
                    continue
                text = _mutate(rng, rng.choice(bundled)) if kind < 2 else _random_grammar(rng)
                tally["inputs"] += 1
                try:
                    m = Grammar.from_gbnf(text if rng.random() < 0.7 else text.encode("utf-8", "surrogatepass"))
                    m = m.matcher(VOCAB)
                except ConstrainedError:
                    tally["clean"] += 1
                    continue
                tally["ok"] += 1
                for _ in range(rng.randint(1, 8)):                    # a call sequence with mask checks
                    tally["inputs"] += 1
                    op = rng.random()
                    try:
                        if op < 0.45:
                            mask = m.mask()
                            if not np.array_equal(mask, reference_mask(m)):
                                tally["mismatch"] += 1
                                bad.append(("mismatch", seed, text[:200]))
                                break
                            if _advance_differs(m.compiled.rules, m.stacks):
                                tally["mismatch"] += 1
                                bad.append(("advance mismatch", seed, text[:200]))
                                break
                            m.compiled.fill_bits_for(m.stacks, m.partial_utf8, row, state_cache=rng.random() < 0.5)
                            if not np.array_equal(row[:-1], np.packbits(mask, bitorder="little")):
                                tally["mismatch"] += 1
                                bad.append(("packed row mismatch", seed, text[:200]))
                                break
                            allowed = np.flatnonzero(mask)
                            if len(allowed) and rng.random() < 0.8:
                                m.accept_token(int(rng.choice(list(allowed))))
                        elif op < 0.6:
                            m.accept_token(rng.randrange(N))
                        elif op < 0.7:
                            m.accept_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 3))))
                        elif op < 0.8:
                            m.rollback(rng.randint(0, m.num_accepted))
                        elif op < 0.85:
                            m = m.fork()
                        elif op < 0.9:
                            m.reset()
                        else:
                            try:
                                m.accept_token(rng.choice([2.5, "1", -1, N + 3, None]))
                                tally["wrong_type"] += 1
                                bad.append(("bad id accepted", seed, text[:200]))
                            except ConstrainedError:
                                pass
                    except ConstrainedError:
                        tally["clean"] += 1
            except _Timeout:
                tally["hang"] += 1
                bad.append(("hang", seed, ""))
            except MemoryError:
                tally["wrong_type"] += 1
                bad.append(("MemoryError", seed, ""))
            except Exception as e:  # noqa: BLE001 - that is what is counted
                tally["wrong_type"] += 1
                bad.append((f"{type(e).__name__}: {e}"[:200], seed, ""))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                tally["cases"] += 1
        conn.send((tally, bad))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--mem-gb", type=float, default=3.0)
    ap.add_argument("--case-seconds", type=float, default=10.0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--vocab", default=None, help="a real vocabulary (the oracle's GGUFs, oracle/sdist.py): compiled vs Python walk")
    args = ap.parse_args()
    total = {"inputs": 0, "ok": 0, "clean": 0, "wrong_type": 0, "mismatch": 0, "hang": 0, "cases": 0, "crash": 0}
    failures: list = []
    seed = args.start
    t0 = time.time()
    ctx = mp.get_context("spawn")
    while time.time() - t0 < args.seconds:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, args.mem_gb, args.case_seconds, args.vocab), daemon=True)
        proc.start()
        try:
            while time.time() - t0 < args.seconds:
                parent.send((seed, args.batch))
                if not parent.poll(args.case_seconds * args.batch + 60):
                    raise EOFError("silent worker")
                tally, bad = parent.recv()
                for k, v in tally.items():
                    total[k] += v
                failures += bad
                seed += args.batch
            parent.send(None)
        except (EOFError, OSError, BrokenPipeError):
            total["crash"] += 1
            failures.append(("worker died", seed, ""))
            seed += args.batch       # skip the batch (its seeds are printed for replay)
        finally:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
    total["seconds"] = round(time.time() - t0, 1)
    total["last_seed"] = seed
    print(json.dumps(total))
    for f in failures[:50]:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
