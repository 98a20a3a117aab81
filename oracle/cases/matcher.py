"""Helpers for the matcher's oracle tests: vocabularies as llama.cpp sees them, grammars, random walks.

``reference_parse`` is a small line-by-line port of ``llama_grammar_parser`` (src/llama-grammar.cpp), used to get
llama.cpp's element vectors in tests independently of the package's own GBNF front end (which the tests also use
where available, comparing the two).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from constrained.grammar.ir import ElementType as T
from constrained.grammar.ir import ParsedGrammar
from constrained.vocab import Vocabulary

MAX_REP = 2000
_WORD = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")


class _P:
    def __init__(self, text: bytes, tokenize=None) -> None:  # noqa: ANN001
        self.s = text + b"\0"
        self.symbols: dict[str, int] = {}
        self.rules: dict[int, list] = {}
        self.tokenize = tokenize

    def c(self, i: int) -> int:
        return self.s[i] if i < len(self.s) else 0

    def symbol(self, name: str) -> int:
        return self.symbols.setdefault(name, len(self.symbols))

    def gen(self, base: str) -> int:
        i = len(self.symbols)
        self.symbols[f"{base}_{i}"] = i
        return i

    def space(self, i: int, nl: bool) -> int:
        while self.c(i) in (32, 9, 35) or (nl and self.c(i) in (13, 10)):
            if self.c(i) == 35:
                while self.c(i) not in (0, 13, 10):
                    i += 1
            else:
                i += 1
        return i

    def name(self, i: int) -> int:
        j = i
        while self.c(j) in _WORD:
            j += 1
        if j == i:
            raise ValueError("expecting name")
        return j

    def int_(self, i: int) -> int:
        j = i
        while 48 <= self.c(j) <= 57:
            j += 1
        if j == i:
            raise ValueError("expecting integer")
        return j

    def hex(self, i: int, n: int) -> tuple[int, int]:
        v, j = 0, i
        while j < i + n and self.c(j):
            ch = chr(self.c(j))
            if ch not in "0123456789abcdefABCDEF":
                break
            v = v * 16 + int(ch, 16)
            j += 1
        if j != i + n:
            raise ValueError("expecting hex chars")
        return v, j

    def char(self, i: int) -> tuple[int, int]:
        c = self.c(i)
        if c == 92:
            e = chr(self.c(i + 1))
            if e in "xuU":
                return self.hex(i + 2, {"x": 2, "u": 4, "U": 8}[e])
            if e in "trn":
                return {"t": 9, "r": 13, "n": 10}[e], i + 2
            if e in '\\"[]-':
                return ord(e), i + 2
            raise ValueError("unknown escape")
        if c:
            n = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[c >> 4]
            v = c & ((1 << (8 - n)) - 1)
            j = i + 1
            while j < i + n and self.c(j):
                v = (v << 6) + (self.c(j) & 0x3F)
                j += 1
            return v, j
        raise ValueError("unexpected end of input")

    def token(self, i: int) -> tuple[int, int]:
        src = i
        i += 1
        if self.c(i) == ord("["):
            j = self.int_(i + 1)
            tid = int(self.s[i + 1:j])
            if self.c(j) != ord("]") or self.c(j + 1) != ord(">"):
                raise ValueError("expecting ]>")
            return tid, j + 2
        while self.c(i) not in (0, ord(">")):
            i += 1
        if self.c(i) != ord(">") or self.tokenize is None:
            raise ValueError("bad token")
        toks = self.tokenize(self.s[src:i + 1], True)
        if len(toks) != 1:
            raise ValueError("invalid token")
        return toks[0], i + 1

    def alternates(self, i: int, name: str, rid: int, nested: bool) -> int:
        rule: list = []
        i = self.sequence(i, name, rule, nested)
        while self.c(i) == ord("|"):
            rule.append((T.ALT, 0))
            i = self.space(i + 1, True)
            i = self.sequence(i, name, rule, nested)
        rule.append((T.END, 0))
        self.rules[rid] = rule
        return i

    def sequence(self, i: int, name: str, rule: list, nested: bool) -> int:  # noqa: C901
        last = len(rule)
        n_prev = 1

        def rep(lo: int, hi: int | None) -> None:
            nonlocal n_prev
            if last == len(rule):
                raise ValueError("expecting preceding item")
            prev = rule[last:]
            total = hi if hi is not None and hi > 0 else (lo if lo > 0 else 1)
            if n_prev * total > MAX_REP:
                raise ValueError("too many rules")
            if lo == 0:
                del rule[last:]
            else:
                for _ in range(1, lo):
                    rule.extend(prev)
            last_rec = 0
            n_opt = 1 if hi is None else hi - lo
            for k in range(n_opt):
                rid = self.gen(name)
                rec = list(prev)
                if k > 0 or hi is None:
                    rec.append((T.RULE_REF, rid if hi is None else last_rec))
                rec += [(T.ALT, 0), (T.END, 0)]
                self.rules[rid] = rec
                last_rec = rid
            if n_opt > 0:
                rule.append((T.RULE_REF, last_rec))
            n_prev *= total

        while self.c(i):
            c = self.c(i)
            if c == ord('"'):
                i += 1
                last, n_prev = len(rule), 1
                while self.c(i) != ord('"'):
                    if not self.c(i):
                        raise ValueError("unexpected end of input")
                    v, i = self.char(i)
                    rule.append((T.CHAR, v))
                i = self.space(i + 1, nested)
            elif c == ord("["):
                i += 1
                start = T.CHAR
                if self.c(i) == ord("^"):
                    i += 1
                    start = T.CHAR_NOT
                last, n_prev = len(rule), 1
                while self.c(i) != ord("]"):
                    if not self.c(i):
                        raise ValueError("unexpected end of input")
                    v, i = self.char(i)
                    rule.append((T.CHAR_ALT if last < len(rule) else start, v))
                    if self.c(i) == ord("-") and self.c(i + 1) != ord("]"):
                        if not self.c(i + 1):
                            raise ValueError("unexpected end of input")
                        v, i = self.char(i + 1)
                        rule.append((T.CHAR_RNG_UPPER, v))
                i = self.space(i + 1, nested)
            elif c in (ord("<"), ord("!")):
                ty = T.TOKEN
                if c == ord("!"):
                    ty = T.TOKEN_NOT
                    i += 1
                tid, i = self.token(i)
                last, n_prev = len(rule), 1
                rule.append((ty, tid))
                i = self.space(i, nested)
            elif c in _WORD:
                j = self.name(i)
                rid = self.symbol(self.s[i:j].decode())
                i = self.space(j, nested)
                last, n_prev = len(rule), 1
                rule.append((T.RULE_REF, rid))
            elif c == ord("("):
                i = self.space(i + 1, True)
                before = len(self.symbols)
                sub = self.gen(name)
                i = self.alternates(i, name, sub, True)
                n_prev = max(1, len(self.symbols) - before)
                last = len(rule)
                rule.append((T.RULE_REF, sub))
                if self.c(i) != ord(")"):
                    raise ValueError("expecting )")
                i = self.space(i + 1, nested)
            elif c == ord("."):
                last, n_prev = len(rule), 1
                rule.append((T.CHAR_ANY, 0))
                i = self.space(i + 1, nested)
            elif c in (ord("*"), ord("+"), ord("?")):
                i = self.space(i + 1, nested)
                rep(*{ord("*"): (0, None), ord("+"): (1, None), ord("?"): (0, 1)}[c])
            elif c == ord("{"):
                i = self.space(i + 1, nested)
                j = self.int_(i)
                lo = int(self.s[i:j])
                i = self.space(j, nested)
                hi: int | None = None
                if self.c(i) == ord("}"):
                    hi = lo
                    i = self.space(i + 1, nested)
                elif self.c(i) == ord(","):
                    i = self.space(i + 1, nested)
                    if 48 <= self.c(i) <= 57:
                        j = self.int_(i)
                        hi = int(self.s[i:j])
                        i = self.space(j, nested)
                    if self.c(i) != ord("}"):
                        raise ValueError("expecting }")
                    i = self.space(i + 1, nested)
                else:
                    raise ValueError("expecting ,")
                if lo > MAX_REP:
                    raise ValueError("too many repetitions")
                if hi is not None and hi > MAX_REP:
                    hi = None
                rep(lo, hi)
            else:
                break
        return i

    def parse(self) -> None:
        i = self.space(0, True)
        while self.c(i):
            j = self.name(i)
            k = self.space(j, False)
            rid = self.symbol(self.s[i:j].decode())
            if self.s[k:k + 3] != b"::=":
                raise ValueError("expecting ::=")
            k = self.alternates(self.space(k + 3, True), self.s[i:j].decode(), rid, False)
            if self.c(k) == 13:
                k += 2 if self.c(k + 1) == 10 else 1
            elif self.c(k) == 10:
                k += 1
            elif self.c(k):
                raise ValueError("expecting newline or end")
            i = self.space(k, True)


def reference_parse(text: str | bytes, root: str = "root", tokenize=None) -> ParsedGrammar:  # noqa: ANN001
    """llama.cpp's element vectors for ``text`` (a port of ``llama_grammar_parser::parse``; no error details)."""
    p = _P(text.encode() if isinstance(text, str) else text, tokenize)
    p.parse()
    n = max(p.rules) + 1 if p.rules else 0
    if any(i not in p.rules for i in range(n)) or len(p.symbols) > n:
        raise ValueError("Undefined rule")
    return ParsedGrammar(tuple(tuple(p.rules[i]) for i in range(n)), dict(p.symbols), p.symbols[root])


def parse_gbnf(text: str, root: str = "root", vocab: Vocabulary | None = None) -> ParsedGrammar:
    """The package's parser if present (``Grammar.from_gbnf``), else the reference port."""
    try:
        from constrained.grammar import Grammar
    except ImportError:
        return reference_parse(text, root, vocab.tokenize if vocab is not None and vocab.tokenizer else None)
    g = Grammar.from_gbnf(text, root)
    return g.parsed(vocab) if vocab is not None else g.parsed(None)


@functools.cache
def oracle_vocab(name: str) -> tuple[object, Vocabulary]:
    """``(VocabModel, Vocabulary)`` for a vocab GGUF, the Vocabulary read through llama.cpp itself."""
    from oracle.llama import vocab_model
    from oracle.sdist import vocab_gguf

    vm = vocab_model(vocab_gguf(name))
    pieces = [vm.piece(i) for i in range(vm.n_vocab)]
    eog = [i for i in range(vm.n_vocab) if vm.is_eog(i)]
    return vm, Vocabulary(pieces, eog, tokenizer=lambda b, ps: vm.tokenize(b, ps), name=name)


def grammar_files() -> dict[str, str]:
    """llama.cpp's ``grammars/*.gbnf`` by stem."""
    from oracle.sdist import llama_cpp_source

    d = Path(llama_cpp_source()) / "grammars"
    return {p.stem: p.read_text() for p in sorted(d.glob("*.gbnf"))}


@functools.cache
def _structural(pieces: tuple[bytes, ...]) -> np.ndarray:
    """ASCII tokens of at most 3 bytes with no letters or digits (closers, separators): the bias to ending."""
    return np.array([0 < len(p) <= 3 and not any(c in _ALNUM or c >= 0x80 for c in p) for p in pieces], dtype=bool)


_ALNUM = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def pick_token(rng: np.random.Generator, mask: np.ndarray, vocab: Vocabulary, p_end: float = 0.3,
               p_struct: float = 0.5) -> int:
    """A random allowed token, biased toward ending: an allowed end-of-generation token with probability
    ``p_end``, else a short punctuation token with probability ``p_struct``, else any allowed token."""
    eogs = [e for e in sorted(vocab.eog_ids) if mask[e]]
    if eogs and rng.random() < p_end:
        return int(rng.choice(eogs))
    if rng.random() < p_struct:
        s = np.flatnonzero(mask & _structural(vocab.pieces))
        if len(s):
            return int(rng.choice(s))
    return int(rng.choice(np.flatnonzero(mask)))


# ---- reading llama.cpp's C++ tests ------------------------------------------------------------------------------

_ESC = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"', "'": b"'", "0": b"\0", "?": b"?"}


def _cpp_tokens(src: str, i: int):  # noqa: ANN202, C901
    """C++ tokens from ``src[i:]``: ('str', bytes) | ('int', n) | ('id', name) | ('op', ch)."""
    n = len(src)
    while i < n:
        c = src[i]
        if c.isspace():
            i += 1
        elif src.startswith("//", i):
            i = src.index("\n", i)
        elif src.startswith('R"', i):
            j = src.index("(", i)
            delim = src[i + 2:j]
            end = src.index(")" + delim + '"', j)
            yield "str", src[j + 1:end].encode()
            i = end + len(delim) + 2
        elif c == '"':
            out = bytearray()
            i += 1
            while src[i] != '"':
                if src[i] == "\\":
                    e = src[i + 1]
                    if e == "x":
                        j = i + 2
                        while j < n and src[j] in "0123456789abcdefABCDEF":
                            j += 1
                        out.append(int(src[i + 2:j], 16))
                        i = j
                    elif e in "uU":
                        k = 4 if e == "u" else 8
                        out += chr(int(src[i + 2:i + 2 + k], 16)).encode()
                        i += 2 + k
                    else:
                        out += _ESC[e]
                        i += 2
                else:
                    out += src[i].encode()
                    i += 1
            yield "str", bytes(out)
            i += 1
        elif c.isdigit():
            j = i
            while src[j].isdigit():
                j += 1
            yield "int", int(src[i:j])
            i = j
        elif c.isalpha() or c == "_":
            j = i
            while src[j].isalnum() or src[j] == "_":
                j += 1
            yield "id", src[i:j]
            i = j
        else:
            yield "op", c
            i += 1


def _token_bytes(tid: int) -> bytes:
    return b"\xff" + tid.to_bytes(4, "big")


def cpp_calls(src: str, fname: str) -> list[list]:
    """The arguments of every call ``fname(...)`` in ``src`` (not its definition): strings as bytes (literals and
    ``token(n)`` concatenated, ``token(n)`` encoded as test-grammar-integration's 0xFF marker), ``{...}`` as lists."""
    out = []
    pos = 0
    while True:
        k = src.find(fname + "(", pos)
        if k < 0:
            return out
        pos = k + 1
        line_start = src.rfind("\n", 0, k) + 1
        if "static" in src[line_start:k] or src[k - 1].isalnum() or src[k - 1] == "_":
            continue
        out.append(_parse_args(_cpp_tokens(src, k + len(fname) + 1)))


def integration_pieces(data: bytes) -> list[tuple[int, bytes]]:
    """test-grammar-integration's ``parse_tokens``: (token id, piece) per code point or 0xFF-encoded token."""
    out = []
    i = 0
    while i < len(data):
        if data[i] == 0xFF:
            tid = int.from_bytes(data[i + 1:i + 5], "big")
            out.append((tid, b"<[%d]>" % tid))
            i += 5
            continue
        b = data[i]
        n = 1 if b < 0x80 else 2 if b >> 5 == 6 else 3 if b >> 4 == 14 else 4 if b >> 3 == 30 else 0
        chunk = data[i:i + n] if n else b""
        try:
            if not n or len(chunk) < n:
                raise UnicodeDecodeError("utf-8", chunk, 0, 1, "bad")
            out.append((0, chunk.decode("utf-8").encode()))
            i += n
        except UnicodeDecodeError:
            out.append((0, "\ufffd".encode()))
            i += 1
    return out


def _parse_args(toks) -> list:  # noqa: ANN001, C901
    peek: list = []

    def nxt():  # noqa: ANN202
        return peek.pop() if peek else next(toks)

    def value():  # noqa: ANN202
        t = nxt()
        if t == ("op", "{"):
            items = []
            while True:
                t = nxt()
                if t == ("op", "}"):
                    return items
                peek.append(t)
                items.append(value())
                t = nxt()
                if t == ("op", "}"):
                    return items
        peek.append(t)
        acc = b""
        while True:
            t = nxt()
            if t[0] == "str":
                acc += t[1]
            elif t == ("id", "token"):
                nxt()
                acc += _token_bytes(nxt()[1])
                nxt()
            elif t != ("op", "+"):
                peek.append(t)
                return acc

    args = []
    while True:
        args.append(value())
        if nxt() == ("op", ")"):
            return args


# ---- mask parity walks against llama.cpp's grammar sampler -------------------------------------------------------

JSON_SCHEMAS = {
    "person": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                                 "tags": {"type": "array", "items": {"type": "string"}}},
               "required": ["name"]},
    "orders": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0}, "price": {"type": "number"},
        "status": {"enum": ["new", "paid", "shipped"]}, "note": {"type": ["string", "null"]}},
        "required": ["id", "status"]}, "maxItems": 4},
}


def parity_grammars(vocab: Vocabulary) -> dict[str, str]:
    """GBNF texts the parity walks use: llama.cpp's grammars/, two JSON schemas, one with token references."""
    out = dict(grammar_files())
    try:
        from constrained.json_schema import json_schema_to_gbnf
    except ImportError:  # pragma: no cover
        json_schema_to_gbnf = None
    if json_schema_to_gbnf is not None:
        for name, schema in JSON_SCHEMAS.items():
            out[f"schema-{name}"] = json_schema_to_gbnf(schema)
    t = vocab.tokenize(b" the") or [0]
    u = vocab.tokenize(b",") or [1]
    out["tokens"] = (f"root ::= [a-z]{{1,5}} <[{t[-1]}]> ( [0-9] | !<[{u[0]}]> ){{0,3}} \"!\"?\n")
    out["any"] = 'root ::= ( . [a-z]? ){1,6} ( "!" | [^a-z\\x00-\\x1f] . )\n'   # CHAR_ANY, negated classes
    # a class followed by a loop on the same class (x x*: the walk's shortcut), ASCII, negated, non-ASCII (rows
    # with a pending UTF-8 sequence) and any-character, with exits that start a different class or overlap none
    out["plus-loops"] = ('root ::= [a-z]+ ( "@" [a-z]+ "." [a-z]{2,3} )? | [^ "\\x00-\\x1f]+ ( " " [^ ]+ )? '
                         '| [0-9]+ ( "." [0-9]+ )? | [à-ÿ]+ [a-z]* | "<" .+\n')
    # special tokens referenced by their text (matched by id; an end-of-generation one never matches)
    specials = [x for x in (b"<|im_start|>", b"<start_of_turn>", b"<|turn>", b"<s>", b"<|begin_of_text|>",
                            b"<|im_end|>", b"<end_of_turn>", b"<turn|>", b"</s>", b"<|endoftext|>", b"<eos>")
                if len(vocab.tokenize(x, parse_special=True)) == 1]
    opening = [x for x in specials if not vocab.is_eog(vocab.tokenize(x, parse_special=True)[0])]
    closing = [x for x in specials if vocab.is_eog(vocab.tokenize(x, parse_special=True)[0])]
    if opening:
        end = f" | {closing[0].decode()}" if closing else ""
        out["specials"] = (f"root ::= {opening[0].decode()} [a-z ]{{1,8}} ( \".\"{end} | "
                           f"{opening[-1].decode()} ) [a-z]*\n")
    return out


def _partial_set(vocab: Vocabulary) -> np.ndarray:
    from constrained.grammar.tokenindex import vocab_index

    t = vocab_index(vocab).table
    out = np.zeros(t.n, dtype=bool)
    out[t.ids] = t.rem > 0      # table rows are ordered by length; index by token id
    return out


def pick_walk_token(rng: np.random.Generator, mask: np.ndarray, vocab: Vocabulary) -> int:
    """Like :func:`pick_token`, also preferring tokens that leave a UTF-8 sequence incomplete now and then."""
    if rng.random() < 0.3:
        s = np.flatnonzero(mask & _partial_set(vocab))
        if len(s):
            return int(rng.choice(s))
    return pick_token(rng, mask, vocab, p_end=0.08)


def parity_walk(vm, vocab: Vocabulary, gbnf: str, parsed: ParsedGrammar, rng: np.random.Generator,  # noqa: ANN001, C901
                steps: int, probes: int = 24) -> int:
    """Random walks under ``gbnf`` with our matcher and llama.cpp's grammar sampler side by side.

    At every step: the full masks are equal, ``allows`` agrees with llama.cpp's one-candidate check on random,
    allowed and rejected tokens, a rejected token is refused without a state change, and now and then
    ``rollback``/``fork`` are exercised. Returns the number of compared step-masks.
    """
    from constrained.grammar.matcher import compile_grammar
    from oracle.llama import CGrammar

    cg = compile_grammar(parsed, vocab)
    m = cg.matcher()
    c = CGrammar(vm, gbnf)
    n = vm.n_vocab
    compared = 0
    try:
        for step in range(steps):
            ours = m.mask()
            theirs = c.mask()
            compared += 1
            if not np.array_equal(ours, theirs):
                bad = np.flatnonzero(ours != theirs)[:8]
                raise AssertionError(f"step {step}: masks differ at {[(int(i), vm.piece(int(i)), bool(ours[i])) for i in bad]}"
                                     f" (stacks {m.stacks}, partial {m.partial_utf8})")
            allowed = np.flatnonzero(theirs)
            rejected = np.flatnonzero(~theirs)
            probe = list(rng.integers(0, n, probes))
            if len(allowed):
                probe += list(rng.choice(allowed, min(probes // 2, len(allowed))))
            if len(rejected):
                probe += list(rng.choice(rejected, min(probes // 2, len(rejected))))
            for t in probe:
                t = int(t)
                a, b = m.allows(t), c.allows(t)
                if a != b or a != theirs[t]:
                    raise AssertionError(f"step {step}: allows({t} {vm.piece(t)!r}) ours {a} llama {b} mask {theirs[t]}")
            if len(rejected):
                t = int(rng.choice(rejected))
                before = (m.stacks, m.partial_utf8, m.num_accepted)
                if m.accept_token(t) or (m.stacks, m.partial_utf8, m.num_accepted) != before:
                    raise AssertionError(f"step {step}: rejected token {t} {vm.piece(t)!r} was accepted")
            if not len(allowed):
                break
            tok = pick_walk_token(rng, theirs, vocab)
            if rng.random() < 0.1:                       # rollback restores the mask
                assert m.accept_token(tok)
                m.rollback(1)
                assert np.array_equal(m.mask(), theirs)
            if rng.random() < 0.05:                      # a fork goes its own way
                f = m.fork()
                f.accept_token(tok)
                assert np.array_equal(m.mask(), theirs)
            if not m.accept_token(tok):
                raise AssertionError(f"step {step}: allowed token {tok} {vm.piece(tok)!r} refused by accept_token")
            c.accept(tok)
            if vocab.is_eog(tok):
                assert m.is_terminated()
                m.reset()
                c.free()
                c = CGrammar(vm, gbnf)
    finally:
        c.free()
    return compared
