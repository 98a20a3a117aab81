"""The bundled grammars (``constrained.grammars``): they load by name, llama.cpp loads them, and llama.cpp's grammar
sampler accepts each example document (token by token, then end-of-generation) and rejects each counter-example;
our matcher gives the same verdicts."""

from __future__ import annotations

import pytest
from constrained.grammars import load, names

from constrained.grammar import Grammar
from oracle.sdist import vocab_gguf

EXAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "json": (
        ['{"a": [1, 2.5e3, -0.1, true, false, null], "b": {"c": "d\\n\\u00e9\\"", "": []}}', "[]", '"x"',
         "  42  ", '{\n  "k": "v"\n}', "-0.5E-7"],
        ["{a: 1}", "[1, 2,]", "01", '"unterminated', '{"a" 1}', "tru", "[1] [2]", '"tab\there"'],
    ),
    "json_array": (
        ['[1, "two", {"three": 3}, [4.0]]', "[ ]", ' ["nested", [[]]] '],
        ['{"a": 1}', "[1 2]", "1", "[", '["a",]'],
    ),
    "list": (
        ["- apples\n- pears and plums\n", "- one item only\n", "- caf\u00e9 \u2014 ok\n"],
        ["apples\n", "- \n", "-apples\n", "- no newline", "- two\rlines\n"],
    ),
    "arithmetic": (
        ["1 + 2 * (3 - 4.5) / -6", "42", "(((1)))", "-(2+3)*4"],
        ["1 +", "(1", "1 ++ 2", "a", "1  + 2", "3.", ""],
    ),
    "c_like": (
        ["int add(int a, int b) { return a + b; }\n"
         "int main() {\n  int x = add(1, 2);\n  while (x > 0) { x = x - 1; }\n"
         "  if (x == 0) { print(x); } else if (x < 0) { return -1; }\n  return 0;\n}\n",
         "void f() {}", "char *name_of(long id) { char *s; return s; }"],
        ["int main() { x = ; }", "main() {}", "int f() { return 1 }", "int f() { if x { } }", ""],
    ),
    "chess": (
        ["1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. O-O Nf6 5. Re1 b5 6. Bb3 d6 7. c3 O-O 8. h3 Nb8 9. d4 Nbd7 1/2-1/2",
         "1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7#", "12. exd8=Q+ Kxd8", "1. d4"],
        ["1. e9", "1. Zf3", "e4 e5", "1.e4", "1. e4 e5 2. Nf3 Nc6 3-0"],
    ),
    "english": (
        ["The quick brown fox jumps over the lazy dog. I think, therefore I am!",
         "Is it well-known that we're 42 today?", "Hello there."],
        ["the lowercase start.", "No ending punctuation", "Hello world .", "Hello.", "Two  spaces here."],
    ),
}


def test_names_and_loading():
    assert names() == sorted(EXAMPLES)
    for name in names():
        text = load(name)
        assert text.startswith("#")
        g = Grammar.from_name(name)
        assert g == Grammar.bundled(name) == Grammar.from_gbnf(text)
        assert "root" in g.symbol_ids
    with pytest.raises(KeyError, match="no bundled grammar 'nope'"):
        load("nope")


llama_oracle = pytest.importorskip("oracle.llama", reason="llama-cpp-python is not installed")


def _llama_accepts(vm, gbnf: str, document: str) -> bool:
    """Feed the document's gpt-2 tokens through llama.cpp's grammar sampler; then it must allow EOS."""
    with llama_oracle.CGrammar(vm, gbnf) as g:
        for tok in vm.tokenize(document.encode(), False):
            if not g.allows(tok):
                return False
            g.accept(tok)
        eos = next(t for t in range(vm.n_vocab) if vm.is_eog(t))
        return g.allows(eos)


@pytest.fixture(scope="module")
def gpt2():
    from constrained.vocab import Vocabulary

    path = vocab_gguf("gpt-2")
    return llama_oracle.vocab_model(path), Vocabulary.from_gguf(path)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_against_llama_and_ours(gpt2, name):
    vm, vocab = gpt2
    text = load(name)
    grammar = Grammar.from_gbnf(text)
    good, bad = EXAMPLES[name]
    for document, expected in [(d, True) for d in good] + [(d, False) for d in bad]:
        assert _llama_accepts(vm, text, document) is expected, (name, document)
        m = grammar.matcher(vocab)
        ours = m.accept_bytes(document.encode()) and m.can_end()
        assert ours is expected, (name, document)
