"""The compiled mask walk (``constrained.grammar._walk``) against the Python walk, and the build check.

The llama.cpp parity tests (test_matcher_parity.py, test_hardening.py, test_matcher_props.py, ...) run the default
path, which is the compiled walk where it is built. Here both walks run on the same grammars, states and tables
(the vocabulary's and the small tables of uncertain remainders) under every threshold setting (loop shortcut and
trie ranges off, on at any size, mixed), and must give the same accepted rows, the same pops (rows and depths, in
order), the same wholesale row sets and the same work counters; the compiled helpers (class summaries over the
inverted ASCII index, the loop shortcut's table parts, packing by id) must equal their numpy versions.
``test_walk_kernel_is_built`` fails when the extension is missing, unless ``CONSTRAINED_PURE_PYTHON=1`` asks for
the Python walk on purpose.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import numpy as np
import pytest

from constrained import Grammar
from constrained.errors import GrammarLimitError
from constrained.grammar import charclass as C
from constrained.grammar import limits
from constrained.grammar import mask as M
from constrained.grammar import packing as P
from constrained.grammar import stacks as S
from constrained.grammar import walk_python as W
from constrained.grammar.matcher import CompiledGrammar, compile_grammar
from constrained.json_schema import json_schema_to_gbnf
from oracle.cases.matcher import oracle_vocab, parity_grammars, parity_walk, parse_gbnf, pick_token

needs_kernel = pytest.mark.skipif(S._walk_ext is None, reason="the Python walk was asked for "
                                  "(CONSTRAINED_PURE_PYTHON=1)" if S.PURE else "not built")

AMBIGUOUS = 'root ::= s\ns ::= " " s "b" | " " s "c" | "d"'
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {
    "type": "string", "pattern": "^[a-z]+$"}}, "n": {"type": "integer", "minimum": 0}}, "required": ["name"]}
EXTRA = {
    "ambiguous": AMBIGUOUS,
    "schema": json_schema_to_gbnf(SCHEMA),
    "loops": 'root ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ["bn] )* "\\"" ( [^a]* "." | [a-zé]+ [é€]* )',
    "nonascii": 'root ::= ( [\\u0100-\\uffff] | [^a-z\\u00e0-\\u00ff] )* "!" | [\\u00e0-\\u00ff]{1,3} [0-1]*',
    # bounded repetitions (GrammarRules.chain): a bounded string, a chain into a loop, non-ASCII and nested ones
    "chains": 'root ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ["n] ){0,12} "\\"" ( [a-z]{2,} | [é€😀]{0,5} "." | '
              '( [0-9]{1,3} "," ){0,4} )',
    "bounded": json_schema_to_gbnf({"type": "object", "properties": {"a": {"type": "string", "maxLength": 20},
                                    "b": {"type": "string", "minLength": 3, "maxLength": 8}}}),
}
THRESHOLDS = [None, (0, 0), (0, 512), (10**9, 0), (256, 10**9)]


def test_walk_kernel_is_built() -> None:
    if S.PURE:
        pytest.skip("CONSTRAINED_PURE_PYTHON=1: the Python walk was asked for")
    assert S._walk_ext is not None, (
        f"constrained.grammar._walk is not importable ({S.IMPORT_ERROR}); `pip install -e .` builds it (a C++17 "
        "compiler is needed); set CONSTRAINED_PURE_PYTHON=1 to run the Python walk on purpose")


@contextlib.contextmanager
def _thresholds(th: tuple[int, int] | None) -> Iterator[None]:
    old = W.LOOP_MIN_ROWS, W.RANGE_MIN_ROWS, M.KERNEL_RANGE_MIN_ROWS, W.RANGE_MAX_STACKS
    W.RANGE_MAX_STACKS = M.KERNEL_RANGE_MAX_STACKS     # the Python walk takes the compiled walk's settings
    if th is None:                                  # the defaults, the compiled walk's ranges included
        W.RANGE_MIN_ROWS = M.KERNEL_RANGE_MIN_ROWS
    else:
        W.LOOP_MIN_ROWS, W.RANGE_MIN_ROWS = th
        M.KERNEL_RANGE_MIN_ROWS = th[1]
    try:
        yield
    finally:
        W.LOOP_MIN_ROWS, W.RANGE_MIN_ROWS, M.KERNEL_RANGE_MIN_ROWS, W.RANGE_MAX_STACKS = old


def _run(f, g, t, stacks, pops: bool, seed: np.ndarray | None = None):  # noqa: ANN001, ANN202
    w = limits.WorkBudget(10**12)
    p: list | None = [] if pops else None
    s: list | None = [] if pops else None
    acc = f(g, t, stacks, pops=p, work=w, sure=s, seed=seed)
    return acc, p, s, (w.rows, w.visits, w.looped, w.left)


def _assert_same(a, b, what: str) -> None:  # noqa: ANN001
    assert np.array_equal(a[0], b[0]), f"accepted rows differ: {what}"
    assert a[3] == b[3], f"work counters differ (rows, visits, looped, left): {a[3]} vs {b[3]}: {what}"
    if a[1] is not None:
        assert [d for _, d in a[1]] == [d for _, d in b[1]], what
        assert all(np.array_equal(x, y) for (x, _), (y, _) in zip(a[1], b[1], strict=True)), f"pops differ: {what}"
        assert len(a[2]) == len(b[2]) and all(x is y for x, y in zip(a[2], b[2], strict=True)), f"wholesale sets differ: {what}"


@functools.cache
def _grammars(vocab_name: str) -> dict[str, str]:
    vm, vocab = oracle_vocab(vocab_name)
    return {**parity_grammars(vocab), **EXTRA}


def _cases(cg: CompiledGrammar, rng: np.random.Generator, steps: int) -> Iterator[tuple]:
    """(table, stacks, pops?, seed) walks along a random walk: each state's stacks, each stack's suffix walk from
    the sentinel, and the walk of its uncertain remainders through the rest of the stack."""
    g, vt = cg.rules, cg.index.table
    m = cg.matcher()
    for _ in range(steps):
        stacks = m.stacks
        if m.partial_utf8[1] > 0:
            yield cg.index.partial_table(*m.partial_utf8), stacks, False, None
        else:
            yield vt, stacks, False, None
            yield vt, stacks, False, np.arange(vt.n) % 7 == 0
            for s in stacks[:12]:
                if not s or g.types[s[-1]] in (S.TOKEN, S.TOKEN_NOT):
                    continue
                below, suffix = g.split(s)
                yield vt, g.advance((g.bottom, *suffix)), True, None
                li = M.local_info(g, vt, suffix, limits.WorkBudget(10**12))
                if li.keys is not None:
                    yield li.keys, g.advance(below), False, None
        try:
            mask = m.mask()
            tok = pick_token(rng, mask, cg.vocab) if mask.any() else None
            if tok is None or not m.accept_token(tok):
                return
        except GrammarLimitError:
            return


@needs_kernel
@pytest.mark.parametrize("vocab_name", ["llama-spm", "gpt-2", "gemma-4"])
def test_walk_kernel_equals_walk_py(vocab_name: str) -> None:
    vm, vocab = oracle_vocab(vocab_name)
    # the Python walk is the slow side: short walks, and each grammar under the defaults plus two of the other
    # threshold settings in turn (every setting meets a third of the grammars or more on each vocabulary)
    steps = {"llama-spm": 6, "gpt-2": 4, "gemma-4": 3}[vocab_name]
    compared = 0
    for k, (name, text) in enumerate(sorted(_grammars(vocab_name).items())):
        cg = compile_grammar(Grammar.from_gbnf(text), vocab)
        g = cg.rules
        others = THRESHOLDS[1:] if vocab_name != "gemma-4" else THRESHOLDS[1:3]
        for th in [THRESHOLDS[0], *(others[(k + j) % len(others)] for j in range(min(2, len(others))))]:
            with _thresholds(th):
                for t, stacks, pops, seed in _cases(cg, np.random.default_rng(k), steps):
                    if len(stacks) > 4096:
                        continue
                    what = f"{vocab_name}/{name}, thresholds {th}, {len(stacks)} stacks over {t.n} rows"
                    _assert_same(_run(W.walk_py, g, t, stacks, pops, seed), _run(M.walk_kernel, g, t, stacks, pops,
                                                                                   seed), what)
                    compared += 1
    assert compared > 200


@needs_kernel
def test_walk_kernel_limit_error_as_walk_py() -> None:
    vm, vocab = oracle_vocab("llama-spm")
    cg = compile_grammar(Grammar.from_gbnf(AMBIGUOUS), vocab)
    raised = 0
    for th in THRESHOLDS:
        for limit in (10, 5_000, 50_000, 500_000):
            errs = []
            for f in (W.walk_py, M.walk_kernel):
                w = limits.WorkBudget(limit)
                try:
                    with _thresholds(th):
                        f(cg.rules, cg.index.table, cg.initial_stacks, work=w)
                    errs.append(("done", w.left, w.rows, w.visits))
                except GrammarLimitError as e:
                    assert "max_mask_work" in str(e)
                    errs.append(("limit", w.spent_total, w.rows, w.visits))
            assert errs[0] == errs[1], (th, limit)
            raised += errs[0][0] == "limit"
    assert raised >= 10


@needs_kernel
def test_walk_kernel_refuses_malformed_stacks() -> None:
    vm, vocab = oracle_vocab("llama-spm")
    cg = compile_grammar(Grammar.from_gbnf('root ::= "a"'), vocab)
    with pytest.raises(TypeError):
        M.walk_kernel(cg.rules, cg.index.table, ([0],))
    with pytest.raises(TypeError):
        M.walk_kernel(cg.rules, cg.index.table, [(0,)])


@contextlib.contextmanager
def _helpers(on: bool) -> Iterator[None]:
    old = P.COMPILED_HELPERS
    P.COMPILED_HELPERS = on
    try:
        yield
    finally:
        P.COMPILED_HELPERS = old


@needs_kernel
@pytest.mark.parametrize("vocab_name", ["gemma-4", "qwen2"])
def test_compiled_helpers_equal_numpy(vocab_name: str) -> None:
    """Class summaries (inverted ASCII index and summary scan), the loop shortcut's parts and packing by id."""
    vm, vocab = oracle_vocab(vocab_name)
    text = ('root ::= [^"\\\\\\x7F\\x00-\\x1F]* | [a-z]* "x" | [^a]* "y" | [a-zé]* "z" | [^a-zé]* "b" | '
            '[\\u0100-\\uffff]* "c" | . | [\\x00-\\x7f]* "d" | [0-9\\u4e00-\\u9fff]* "e"')
    cg = compile_grammar(Grammar.from_gbnf(text), vocab)
    g, t = cg.rules, cg.index.table
    tops = {s[-1] for s in cg.initial_stacks if s}
    assert len(tops) >= 9
    for p in sorted(tops):
        out = []
        for on in (True, False):
            with _helpers(on):
                t.__dict__.pop("_all_in", None)
                t.__dict__.pop("_loop_parts", None)
                inside = C._all_in(g, p, t)
                clean, (outside, bits), pending, rest = C._loop_parts(g, p, t)
                out.append((inside, clean, outside, bits, pending, rest))
        for x, y in zip(*out, strict=True):
            assert np.array_equal(x, y), (vocab_name, g.ranges(p))
    rng = np.random.default_rng(0)
    # scattered (up to n/16 rows: 0.05, 0.0625 at the line; 0.07 past it, counted on), gathered, scattered onto
    # ones; and a run of rows (the rows past a walk's cut-off all set)
    for density in (0.0, 0.0005, 0.01, 0.05, 0.0625, 0.07, 0.3, 0.99, 0.9995, 1.0, "run"):
        if density == "run":
            acc = np.zeros(t.n, dtype=bool)
            acc[t.n // 3: t.n // 3 + t.n // 20] = True
            density = 0.05
        else:
            acc = rng.random(t.n) < density
        with _helpers(True):
            a = P.pack_by_id(t, acc)
            ids = rng.choice(t.n, size=int(density * 1000), replace=False)
            b = P.pack_ids(ids, t.n)
        assert np.array_equal(a, np.packbits(P.by_id(t, acc)))
        ref = np.zeros(t.n, dtype=bool)
        ref[ids] = True
        assert np.array_equal(b, np.packbits(ref))



@needs_kernel
@pytest.mark.parametrize("vocab_name", ["gemma-4", "llama-spm"])
def test_compiled_first_rows_and_closure_digest_equal_python(vocab_name: str) -> None:
    """``first_rows`` (every class of every parity grammar, on the vocabulary's table and on small remainder
    tables) and ``closure_bytes`` (every rule alone, and with its neighbour) equal their Python references."""
    from constrained.grammar import stacks as S

    vm, vocab = oracle_vocab(vocab_name)
    n_classes = n_rules = 0
    for name, text in _grammars(vocab_name).items():
        cg = compile_grammar(Grammar.from_gbnf(text), vocab)
        g, t = cg.rules, cg.index.table
        small = M.local_info(g, t, g.split(cg.initial_stacks[0])[1], limits.WorkBudget(10**12)).keys \
            if cg.initial_stacks and cg.initial_stacks[0] else None
        for p in range(len(g.types)):
            if p in g.classes:
                positive, items, _ = g.classes[p]
                for tab in (t, small) if small is not None else (t,):
                    assert np.array_equal(C._first_rows(g, p, tab), C._first_rows_py(positive, items, tab)), \
                        (name, p, items)
                n_classes += 1
        nr = len(g.rule_start)
        for r in range(nr):
            for rules in {(r,), tuple(dict.fromkeys((r, (r + 1) % nr)))}:
                assert S._walk_ext.closure_bytes(g.types, g.values, g.rule_start, g.bottom, rules,
                                                 S.CANON_MAX_ELEMENTS, S.RULE_REF) == g._closure_bytes_py(rules), \
                    (name, rules)
                n_rules += 1
        old = S.COMPILED_DIGEST
        try:
            S.COMPILED_DIGEST = False
            py = g._closure_digest((0,))
        finally:
            S.COMPILED_DIGEST = old
        assert g._closure_digest((0,)) == py
    assert n_classes > 100 and n_rules > 100

@needs_kernel
def test_masks_equal_the_python_walk_of_the_state() -> None:
    """Whole masks along a walk: the default (compiled) path with its caches against the Python walk of the state
    itself (no per-position caches: llama.cpp's candidate rejection over every stack)."""
    vm, vocab = oracle_vocab("gemma-4")
    cg = compile_grammar(Grammar.from_gbnf(json_schema_to_gbnf(SCHEMA)), vocab)
    g, t, idx = cg.rules, cg.index.table, cg.index
    m = cg.matcher()
    rng = np.random.default_rng(3)
    for _ in range(16):
        a = m.mask()
        if m.partial_utf8[1] > 0:
            pt = idx.partial_table(*m.partial_utf8)
            b = np.zeros(cg.n_vocab, dtype=bool)
            b[pt.ids[W.walk_py(g, pt, m.stacks)]] = True
        else:
            b = P.by_id(t, W.walk_py(g, t, m.stacks))
        b[idx.eog_ids] = m.can_end()
        assert np.array_equal(a, b)
        tok = pick_token(rng, a, vocab)
        if tok is None or not m.accept_token(tok):
            break


@pytest.mark.parametrize("vocab_name", ["llama-spm", "gemma-4"])
def test_masks_equal_llama_cpp_on_loop_and_bounded_grammars(vocab_name: str) -> None:
    """The grammars of the loop and chain shortcuts (string bodies, bounded repetitions, non-ASCII classes), on the
    default path, against llama.cpp's grammar sampler along random walks (masks, allows, refusals)."""
    vm, vocab = oracle_vocab(vocab_name)
    steps = 14 if vocab_name == "llama-spm" else 8
    total = 0
    for k, name in enumerate(("schema", "loops", "nonascii", "chains", "bounded")):
        text = EXTRA[name]
        total += parity_walk(vm, vocab, text, parse_gbnf(text, vocab=vocab), np.random.default_rng(50 + k), steps)
    assert total >= 5 * 4


@pytest.mark.parametrize("vocab_name", ["gemma-4", "llama-spm"])
def test_fill_bits_equal_the_mask(vocab_name: str) -> None:
    """``CompiledGrammar.fill_bits_for`` (the packed row built from the packed unions, without a bool mask) equals
    ``np.packbits(mask_for(...), bitorder="little")`` in every state of random walks, with and without the state
    cache, with the compiled and the numpy bit setting; bytes past the row are left alone."""
    vm, vocab = oracle_vocab(vocab_name)
    rng = np.random.default_rng(3)
    checked = 0
    for name, text in _grammars(vocab_name).items():
        cg = compile_grammar(Grammar.from_gbnf(text), vocab)
        nb = (cg.n_vocab + 7) // 8
        m = cg.matcher()
        for _ in range(12):
            try:
                ref = np.packbits(cg.mask_for(m.stacks, m.partial_utf8, state_cache=False), bitorder="little")
                for on in (True, False):
                    with _helpers(on):
                        for cache in (False, True):
                            out = np.full(nb + 3, 0xA5, dtype=np.uint8)
                            cg.fill_bits_for(m.stacks, m.partial_utf8, out, state_cache=cache)
                            assert np.array_equal(out[:nb], ref), (name, on, cache)
                            assert (out[nb:] == 0xA5).all()
                checked += 1
                mask = m.mask()
                tok = pick_token(rng, mask, cg.vocab) if mask.any() else None
                if tok is None or not m.accept_token(tok):
                    break
            except GrammarLimitError:
                break
    assert checked > 50
    with pytest.raises(TypeError):
        cg.fill_bits_for(cg.initial_stacks, (0, 0), np.zeros(4, dtype=np.uint8))


def _advance_both(g, stack: tuple) -> tuple[object, object, bool]:  # noqa: ANN001
    """(Python reference, compiled default path, whether the compiled code answered itself) for one stack."""
    def run(f) -> object:  # noqa: ANN001
        try:
            return ("stacks", f(stack))
        except Exception as e:  # noqa: BLE001 - the exception type and message must be the same
            return (type(e).__name__, str(e))

    py = run(g.advance_py)
    c = run(g.advance_compiled)
    own = c != ("stacks", None)
    g._advance_memo.clear()
    assert run(g.advance) == py         # the default (memoised) path
    return py, c if own else py, own


def _hostile_grammars() -> dict[str, tuple[str, bytes]]:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_grammar_hostile.py"
    spec = importlib.util.spec_from_file_location("bench_grammar_hostile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {name: (gbnf, doc) for name, (gbnf, doc, _) in mod._workloads().items()}


@needs_kernel
def test_compiled_advance_equals_python() -> None:
    """``_walk.advance`` (GrammarRules.advance's default path) gives the stacks of ``advance_py`` in the same order,
    or the same exception: every single position of every parity, extra and hostile grammar (END/ALT/range
    elements at the top included), every prefix of every stack met teacher-forcing the hostile documents and
    along the code points of the parity grammars' states, deep nesting, out-of-range positions (left to the
    Python loop), and the ``max_stacks`` limit at several sizes."""
    from constrained.grammar import stacks as S
    from constrained.grammar.stacks import GrammarRules

    vm, vocab = oracle_vocab("llama-spm")
    texts = {**_grammars("llama-spm")}
    docs = {}
    for name, (gbnf, doc) in _hostile_grammars().items():
        texts[f"hostile-{name}"] = gbnf
        docs[f"hostile-{name}"] = doc
    deep = "root ::= " + "".join(f'"(" ( r{i} | "x" ) ")"\nr{i} ::= ' for i in range(150)) + '"y" | "z" root'
    texts["deep"] = deep
    rng = np.random.default_rng(16)
    n = own_n = errors = 0
    for name, text in texts.items():
        g = GrammarRules(parse_gbnf(text, vocab=vocab))
        cases: dict[tuple, None] = {}
        for p in range(len(g.types)):
            cases[(p,)] = None
            cases[(g.bottom, p)] = None
        stacks = g.initial_stacks()
        doc = docs.get(name)
        cps = list(doc.decode()) if doc else []
        for i in range(min(len(cps), 300) if doc else 40):
            for s in stacks:
                for k in range(len(s) + 1):
                    cases[s[:k]] = None
                if s and s[-1] in g.classes:
                    cases[g.after_char(s)] = None
            if not stacks:
                break
            if doc:
                cp = ord(cps[i])
            else:
                tops = [s for s in stacks if s and s[-1] in g.classes]
                if not tops:
                    break
                ranges = g.ranges(tops[rng.integers(len(tops))][-1])
                if not ranges:
                    break
                lo, hi = ranges[int(rng.integers(len(ranges)))]
                cp = int(rng.integers(lo, min(hi, lo + 50) + 1))
            try:
                stacks = g.accept_char(stacks, cp)
            except S.GrammarLimitError:
                break
        for bad in ((-1,), (len(g.types),), (len(g.types) + 7, 0), (2**40,), (0, -3)):
            cases[bad] = None
        for stack in cases:
            py, c, own = _advance_both(g, stack)
            assert py == c, (name, stack, py, c)
            n += 1
            own_n += own
            errors += py[0] != "stacks"
    print(f"{n} stacks, {own_n} answered by the compiled code, {errors} errors")
    assert n > 20_000 and own_n > 0.95 * n and errors > 500, (n, own_n, errors)

    # the max_stacks limit: the same error at the same point, and the same stacks just under it
    raised = 0
    for text in (AMBIGUOUS, texts["hostile-chat"], deep):
        g = GrammarRules(parse_gbnf(text, vocab=vocab))
        for limit in (1, 2, 3, 5, 8, 13, 100):
            g.max_stacks = limit
            for p in range(len(g.types)):
                py, c, own = _advance_both(g, (g.bottom, p))
                assert py == c and (own or p == len(g.types) - 1), (limit, p, py, c)
                raised += py[0] == "GrammarLimitError"
    assert raised > 100
