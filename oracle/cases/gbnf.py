"""Hypothesis strategies producing GBNF texts, shared by the parser and printer tests and the sweep script.

``gbnf_grammars()`` mixes valid and invalid pieces (bad escapes, ``{,3}``, limits, undefined names, newlines in
the wrong places); ``valid_gbnf_grammars()`` defines every rule it references and uses valid escapes only, so
that most of its grammars load (left recursion still happens).
"""

from __future__ import annotations

from hypothesis import strategies as st

_NAMES = st.sampled_from(["root", "a", "b", "c-d", "1x", "root"])
_CHARS = st.sampled_from(["a", "é", "\\n", "\\x41", "\\u00E9", "\\q", "\\", '\\"', "-", "]", "^", "\\]", "ß", " "])
_SEPARATORS = st.sampled_from([" ", " ", " ", "\n", "  # c\n ", "\t"])


def _items(depth: int) -> st.SearchStrategy[str]:
    atoms = [
        st.lists(_CHARS, max_size=3).map(lambda cs: '"' + "".join(cs) + '"'),
        st.tuples(st.booleans(), st.lists(_CHARS, max_size=4)).map(lambda t: "[" + "^" * t[0] + "".join(t[1]) + "]"),
        _NAMES, st.just("."), st.sampled_from(["<[5]>", "!<[7]>", "<s>", "<[99999999999]>"]),
    ]
    if depth > 0:
        atoms.append(st.lists(st.lists(st.deferred(lambda: _items(depth - 1)), max_size=3).map(" ".join),
                              min_size=1, max_size=3).map(lambda alts: "(" + " | ".join(alts) + ")"))
    reps = st.sampled_from(["", "", "*", "+", "?", "{2}", "{0,3}", "{1,}", "{ 2 , 4 }", "{0}", "{,3}", "{2001}",
                            "{0,2001}", "{40}", "{0,60}"])
    return st.tuples(st.one_of(atoms), st.lists(reps, max_size=2).map("".join)).map("".join)


@st.composite
def gbnf_grammars(draw) -> str:  # noqa: ANN001
    """Grammar-shaped text, often invalid."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        alts = draw(st.lists(st.lists(_items(2), max_size=4), min_size=1, max_size=3))
        body = " | ".join(draw(_SEPARATORS).join(a) for a in alts)
        sep = draw(st.sampled_from(["", " |\n  ", "\n| "]))
        lines.append(f"{draw(_NAMES)} ::= {body}{sep}")
    return "\n".join(lines)


_DEFINED = ["root", "a", "b", "c-d"]
_VALID_CHARS = st.sampled_from(["a", "b", "é", "\\n", "\\t", "\\x41", "\\u00E9", "\\U0001F600", '\\"', "\\\\",
                                "\\[", "\\]", "\\-", "ß", " ", "0", "z", "\\x00", "\\x7F", "\u3042"])
_VALID_REPS = st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{0,3}", "{1,}", "{ 1 , 2 }", "{0}", "{3,5}",
                               "{0,2001}"])


def _valid_items(depth: int) -> st.SearchStrategy[str]:
    literal = st.lists(_VALID_CHARS, min_size=1, max_size=4).map(lambda cs: '"' + "".join(cs) + '"')
    ranges = st.tuples(_VALID_CHARS, st.sampled_from(["", "-z", "-\\U0010FFFF", "-\\x7F"])).map("".join)
    klass = st.tuples(st.booleans(), st.lists(ranges, min_size=1, max_size=3)).map(
        lambda t: "[" + "^" * t[0] + "".join(t[1]) + "]")
    atoms = [literal, klass, st.sampled_from(_DEFINED), st.just("."),
             st.sampled_from(["<[5]>", "!<[7]>", "<s>", "!</s>"])]
    if depth > 0:
        atoms.append(st.lists(st.lists(st.deferred(lambda: _valid_items(depth - 1)), min_size=1, max_size=3)
                              .map(" ".join), min_size=1, max_size=3).map(lambda alts: "(" + " | ".join(alts) + ")"))
    return st.tuples(st.one_of(atoms), _VALID_REPS).map("".join)


@st.composite
def valid_gbnf_grammars(draw) -> str:  # noqa: ANN001
    """A grammar defining root, a, b and c-d (in a random order), with valid items only."""
    names = draw(st.permutations(_DEFINED))
    lines = []
    for name in names:
        alts = draw(st.lists(st.lists(_valid_items(2), min_size=1, max_size=4), min_size=1, max_size=3))
        for a in alts:
            if draw(st.booleans()):
                a.insert(0, f'"{name[0]}"')  # a terminal first: less left recursion
        if draw(st.integers(0, 5)) == 0:
            alts.append([])  # an empty alternative
        sep = draw(st.sampled_from([" ", "  ", "\t"]))
        bar = draw(st.sampled_from([" | ", " |\n  ", " | # c\n  "]))  # a newline only after "|" or inside ()
        body = bar.join(sep.join(a) if a else '""' for a in alts)
        lines.append(f"{name} ::= {body}")
    return "\n".join(lines)
