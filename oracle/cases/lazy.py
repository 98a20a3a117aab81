"""Shared pieces of the lazy-grammar tests: random ECMAScript trigger patterns and texts."""

from __future__ import annotations

import random

ATOMS = ["a", "b", "x", "<", ">", "\\|", "\\[", "\\]", "\\{", "\\}", ".", "\\d", "\\D", "\\s", "\\S", "\\w", "\\W",
         "[ab]", "[^a]", "[a-c]", "[\\s\\S]", "[^\\n]", "\\n", "\\t", "\\x41", "\\u0062", "\\-", "\\e", "é",
         "[[:alpha:]]", "[[:space:]x]", "[\\x80-\\xbf]", "[^]", "[]", "}", "]", "\\/", "\\\\", "[-a]", "[a-]",
         "\\0", "[\\b]", "_"]
BAD = ["(", ")", "[", "a{2,1}", "\\", "(?<=a)", "[z-a]", "[a-\\xff]", "{", "*", "(?i)", "[\\d-z]", "\\x4",
       "\\1", "a{,3}", "[[:foo:]]", "^*", "\\b+", "(?=a)?"]


def random_pattern(rng: random.Random, depth: int = 0) -> str:
    """A random pattern over the constructs the translation supports (and, rarely, refused ones)."""
    out = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.55 or depth > 2:
            s = rng.choice(ATOMS)
        elif r < 0.7:
            s = "(" + random_pattern(rng, depth + 1) + ")"
        elif r < 0.78:
            s = "(?:" + random_pattern(rng, depth + 1) + ")"
        elif r < 0.83:
            s = "(?" + rng.choice("=!") + random_pattern(rng, depth + 1) + ")"
            out.append(s)
            continue
        elif r < 0.88:
            s = random_pattern(rng, depth + 1) + "|" + random_pattern(rng, depth + 1)
            s = "(?:" + s + ")" if rng.random() < 0.7 else s
        elif r < 0.92:
            out.append(rng.choice(["^", "$", "\\b", "\\B"]))
            continue
        elif r < 0.94:
            out.append(rng.choice(BAD))
            continue
        else:
            s = rng.choice(ATOMS)
        if rng.random() < 0.35:
            s += rng.choice(["*", "+", "?", "{2}", "{1,3}", "{0,}", "{0}", "*?", "+?", "??", "{1,2}?", "**"])
        out.append(s)
    return "".join(out)


def random_text(rng: random.Random, n: int | None = None) -> bytes:
    alphabet = [b"a", b"b", b"x", b"<", b">", b"|", b"[", b"]", b"{", b"}", b" ", b"\n", b"\r", b"\t", b"1", b"A",
                "é".encode(), b"\x80", b"\xff", b"_", b"-", b"\x00", b"/", b"\\", b"e", b"\x08"]
    n = rng.randint(0, 12) if n is None else n
    return b"".join(rng.choice(alphabet) for _ in range(n))
