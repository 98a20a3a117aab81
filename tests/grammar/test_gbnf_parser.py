"""The GBNF parser against llama.cpp: its own test files replayed, and llama.cpp itself on tricky grammars.

- every ``verify_parsing`` / ``verify_failure`` case of ``tests/test-grammar-parser.cpp`` (read from the sdist at
  test time): the same symbol table and the same flat element vectors, the same failures;
- the structural checks of ``tests/test-grammar-integration.cpp`` (left recursion, missing root, undefined rule,
  custom root) and its ``test_grammar`` grammars;
- accept/refuse parity with ``llama_sampler_init_grammar`` (NULL or not) on a table of tricky grammars, on
  hypothesis-generated grammars and on random byte strings, with llama.cpp's own error message (read from its
  stderr) as the prefix of ours;
- hostile inputs: limits give a GrammarLimitError quickly, never a hang or RecursionError.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained.errors import GrammarLimitError, GrammarSyntaxError
from constrained.grammar import Grammar
from constrained.grammar.gbnf import GbnfLimits, parse_gbnf
from constrained.grammar.ir import ElementType
from oracle.cases.gbnf import gbnf_grammars, valid_gbnf_grammars
from oracle.cases.gbnf_parity import (
    RAW_STRING,
    check_ir_parity,
    check_parity,
    grammar_parser_cases,
    our_verdict,
)
from oracle.sdist import llama_cpp_source, vocab_gguf

# ---------------------------------------------------------------------------------------------- C++ extraction

FAILURES, PARSINGS = grammar_parser_cases()


def test_cases_were_extracted():
    assert len(FAILURES) == 6
    assert len(PARSINGS) == 17
    assert all(p[1] and p[2] for p in PARSINGS)


@pytest.mark.parametrize("grammar,symbols,elements", PARSINGS, ids=[f"parsing{i}" for i in range(len(PARSINGS))])
def test_verify_parsing(grammar, symbols, elements):
    layout = parse_gbnf(grammar)
    assert layout.symbol_ids == symbols
    assert [e for rule in layout.rules for e in rule] == elements
    g = Grammar.from_gbnf(grammar)
    assert [e for rule in g.parsed().rules for e in rule] == elements


@pytest.mark.parametrize("grammar", FAILURES, ids=[f"failure{i}" for i in range(len(FAILURES))])
def test_verify_failure(grammar):
    with pytest.raises(GrammarSyntaxError):
        parse_gbnf(grammar)


# ---------------------------------------------------------------------------------------------- integration .cpp

def _integration_source() -> str:
    return (llama_cpp_source() / "tests" / "test-grammar-integration.cpp").read_text(encoding="utf-8")


def _function_body(src: str, name: str) -> str:
    start = src.index(f"static void {name}()")
    return src[start: src.index("\n}\n", start)]


def _raw_strings(body: str) -> list[str]:
    return re.findall(RAW_STRING, body, re.S)


def test_integration_structural_checks():
    src = _integration_source()
    checks = 0
    # missing root: parses, but has no root symbol, so it cannot be loaded with root "root"
    (g,) = _raw_strings(_function_body(src, "test_failure_missing_root"))
    layout = parse_gbnf(g)
    assert layout.rules and "root" not in layout.symbol_ids
    with pytest.raises(GrammarSyntaxError, match="grammar does not contain a 'root' symbol"):
        Grammar.from_gbnf(g)
    checks += 1
    # missing reference: the parser itself fails
    (g,) = _raw_strings(_function_body(src, "test_failure_missing_reference"))
    with pytest.raises(GrammarSyntaxError, match="Undefined rule identifier 'numero'"):
        parse_gbnf(g)
    checks += 1
    # left recursion: four grammars llama_grammar_init_impl refuses
    lr = _raw_strings(_function_body(src, "test_failure_left_recursion"))
    assert len(lr) == 4
    for g in lr:
        with pytest.raises(GrammarSyntaxError, match="left recursion detected for nonterminal at index 0"):
            Grammar.from_gbnf(g)
        checks += 1
    # missing start symbol
    (g,) = _raw_strings(_function_body(src, "test_failure_missing_root_symbol"))
    with pytest.raises(GrammarSyntaxError, match="grammar does not contain a 'nonexistent' symbol"):
        Grammar.from_gbnf(g, root="nonexistent")
    checks += 1
    # custom root
    (g,) = _raw_strings(_function_body(src, "test_custom_root_symbol_check"))
    with pytest.raises(GrammarSyntaxError):
        Grammar.from_gbnf(g, root="root")
    assert Grammar.from_gbnf(g, root="foobar").root_id == 0
    checks += 1
    assert checks == 8


def test_integration_grammars_parse():
    src = _integration_source()
    grammars = re.findall(r"test_grammar\(\s*\"[^\"]*\",\s*(?://[^\n]*\s*)*" + RAW_STRING, src, re.S)
    assert len(grammars) == 14
    for g in grammars:
        Grammar.from_gbnf(g)


def test_llama_cpp_grammars_folder_parses():
    folder = llama_cpp_source() / "grammars"
    files = sorted(folder.glob("*.gbnf"))
    assert len(files) == 8
    for path in files:
        g = Grammar.from_gbnf(path.read_text(encoding="utf-8"))
        assert g.root_id == g.symbol_ids["root"]


# ---------------------------------------------------------------------------------------------- messages & limits

@pytest.mark.parametrize("text,message,line,column", [
    ('my_rule ::= "a"', "expecting ::= at '_rule", 1, 3),
    ('root ::= "a"\n| "b"', "expecting name at '| \"b\"'", 2, 1),
    ('root ::= ("a"', "expecting ')' at end of input", 1, 14),
    ('root ::= "a" )', "expecting newline or end at ')'", 1, 14),
    ('root ::= "\\q"', "unknown escape at", 1, 11),
    ('root ::= "\\x4"', "expecting 2 hex chars at", 1, 13),
    ('root ::= "abc', "unexpected end of input", 1, 14),
    ('root ::= *', "expecting preceding item to */+/?/{", 1, 10),
    ('root ::= "a"{,5}', "expecting an int at", 1, 14),
    ('root ::= "a"{1 x}', "expecting ',' at", 1, 16),
    ('root ::= "a"{1, x}', "expecting '}' at", 1, 17),
    ('root ::= ! <[1]>', "expecting '<' at", 1, 11),
    ('root ::= <[x]>', "expecting integer at", 1, 12),
    ('root ::= <[1x]>', "expecting ']' at", 1, 13),
    ('root ::= <[1]x', "expecting '>' at", 1, 14),
    ('root ::= <[4294967296]>', "parsed token id is too big", 1, 12),
    ('root ::= "a"{2001}', "number of repetitions exceeds sane defaults", 1, 13),
    ('root ::= ("a"{0,50}){0,41}', "number of rules that are going to be repeated multiplied", 1, 21),
    ('root ::= x', "Undefined rule identifier 'x'", 1, 10),
    ('root ::= root "a" | "b"', "left recursion detected for nonterminal at index 0", 1, 1),
    ('a ::= "x"\nroot ::= "é" b', "Undefined rule identifier 'b'", 2, 14),
])
def test_error_messages(text, message, line, column):
    with pytest.raises(GrammarSyntaxError) as info:
        Grammar.from_gbnf(text)
    err = info.value
    assert message in err.message
    assert (err.line, err.column) == (line, column)
    assert err.source_line == text.splitlines()[line - 1]
    assert str(err).endswith("\n    " + " " * (column - 1) + "^")


def test_grammar_value_semantics():
    import copy
    import dataclasses
    import pickle

    g = Grammar.from_gbnf('root ::= <s> "a"+ item\nitem ::= [0-9]')
    for other in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g), dataclasses.replace(g)):
        assert other == g and hash(other) == hash(g) and str(other) == str(g)
    noted = dataclasses.replace(g, unenforced=("pattern ignored",))
    assert noted.unenforced == ("pattern ignored",) and noted.rules == g.rules and noted != g
    assert g.with_root("item").root_id == g.symbol_ids["item"]
    assert g.rule_names == ("root", "root_1", "item")
    assert "rules=3" in repr(g)
    with pytest.raises(GrammarSyntaxError, match="does not contain a 'nope' symbol"):
        g.with_root("nope")
    data = b'root ::= "\xffabc"'  # invalid UTF-8 is read as llama.cpp reads it (0xFF takes 3 more bytes)
    assert Grammar.from_gbnf(data).source.encode("utf-8", "surrogateescape") == data


def test_missing_root_and_empty_grammar():
    with pytest.raises(GrammarSyntaxError, match="grammar does not contain a 'root' symbol"):
        Grammar.from_gbnf('start ::= "a"')
    for text in ("", "  # just a comment\n\n"):
        with pytest.raises(GrammarSyntaxError, match="failed to parse grammar"):
            Grammar.from_gbnf(text)


def test_never_ending_grammars_are_refused():
    with pytest.raises(GrammarLimitError, match="minimum 3 is greater than its maximum 1"):
        Grammar.from_gbnf('root ::= "a"{3,1}')
    with pytest.raises(GrammarLimitError, match="expands it forever"):
        Grammar.from_gbnf('root ::= e root "x" | "b"\ne ::= ()')
    # the same left recursion in tail position terminates in llama.cpp (its seen-set), so it is accepted
    Grammar.from_gbnf('root ::= e root | "b"\ne ::= ()')


def test_hostile_inputs_hit_limits_fast():
    cases = {
        "deep parens": "root ::= " + "(" * 100_000 + '"a"' + ")" * 100_000,
        "deep parens unclosed": "root ::= " + "(" * 100_000,
        "huge literal repeated": 'root ::= "' + "a" * 20_000 + '"{2000}',
        "many helpers": "root ::= " + " ".join('"a"{0,2000}' for _ in range(200)),
        "long text": "root ::= " + '"a" ' * 3_000_000,
    }
    for _name, text in cases.items():
        with pytest.raises(GrammarLimitError):
            Grammar.from_gbnf(text)
    # just under the nesting limit works
    depth = GbnfLimits().max_nesting
    Grammar.from_gbnf("root ::= " + "(" * depth + '"a"' + ")" * depth)
    small = GbnfLimits(max_symbols=10, max_elements=100)
    with pytest.raises(GrammarLimitError):
        Grammar.from_gbnf('root ::= "a"{0,20}', limits=small)
    with pytest.raises(GrammarLimitError):
        Grammar.from_gbnf('root ::= "abcdefghij"{20}', limits=small)


def test_long_valid_grammar_is_fast():
    rules = "\n".join(f'r{i} ::= "x{i}" [a-z]* (r{i + 1} | "end")?' for i in range(2000))
    text = "root ::= r0\n" + rules + '\nr2000 ::= "z"'
    assert len(Grammar.from_gbnf(text).rules) > 2000
    # a long chain of rules that are empty only through the next one: the analyses stay linear
    n = 20_000
    chain = 'root ::= r0 "x"\n' + "\n".join(f"r{i} ::= r{i + 1}" for i in range(n)) + f'\nr{n} ::= "" | "y"'
    assert Grammar.from_gbnf(chain).rules


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data):
    try:
        g = Grammar.from_gbnf(data)
    except GrammarSyntaxError as err:  # GrammarLimitError included
        assert err.message
    else:
        assert g.rules


_GBNF_ALPHABET = st.sampled_from(list('root ::= "a"|()[]^-\\x{},*+?.<>!#\n\r\t 0123456789abcé_') + ["\\x41", "\\u00e9"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_GBNF_ALPHABET, max_size=60).map("".join))
def test_gbnf_like_text_never_crashes(text):
    try:
        Grammar.from_gbnf("root ::= " + text)
    except GrammarSyntaxError as err:
        assert err.message


# ---------------------------------------------------------------------------------------------- llama.cpp oracle

llama_oracle = pytest.importorskip("oracle.llama", reason="llama-cpp-python is not installed")

ORACLE_VOCAB = "llama-spm"


@pytest.fixture(scope="module")
def oracle():
    from llama_cpp import Llama

    from constrained.vocab import Vocabulary

    path = vocab_gguf(ORACLE_VOCAB)
    vm = llama_oracle.vocab_model(path)
    vocab = Vocabulary.from_llama(Llama(str(path), vocab_only=True, verbose=False))
    return vm, vocab


TRICKY = [
    'root ::= "a"', 'root ::= "a"\n| "b"', 'root ::= "a" |\n "b"', 'root ::=\n "a"', 'root ::=\nfoo ::= "a"',
    'root ::= ( "a"\n| "b" )', 'root ::= "a"{0}*', 'root ::= ""*', 'root ::= []', 'root ::= [^]', 'root ::= []*',
    'root ::= [a-]', 'root ::= [-a]', 'root ::= [a-b-c]', 'root ::= "\\x41\\u0042\\U00000043"', 'root ::= "\\x4"',
    'root ::= "\\q"', 'root ::= [\\^]', 'root ::= "a"{ 1 , 2 }', 'root ::= ("a"{ 1\n , 2 })', 'root ::= "a"{1\n}',
    'root ::= a\na ::= "x"\na ::= "y"', 'root ::= "a" # c\n# c2', '   \n# only comments', 'root ::= <[12]>',
    'root ::= !<[12]>*', 'root ::= ! <[12]>', 'root ::= <[4294967296]>', 'root ::= <[4294967295]>',
    'root ::= <s>', 'root ::= !</s>+ <s>', 'root ::= <abc>', 'root ::= <[1 2]>', 'root ::= <unclosed',
    'root ::= "a"{0,2001}', 'root ::= "a"{2001,2002}', 'root ::= ("a"{0,50}){0,40}',
    'root ::= (a b c){0,500}\na ::= "a"\nb ::= "b"\nc ::= "c"', 'root ::= (a b c){0,501}\na ::= "a"\nb ::= "b"\nc ::= "c"',
    'root ::= root "a" | "b"', 'root ::= e root | "b"\ne ::= ""', 'root ::= x\nx ::= x', 'r00t ::= "a"',
    '1 ::= "a"\nroot ::= 1', 'root ::= - \n- ::= "a"', 'root ::= "a"  ) ', 'root::="a"', 'root ::= "a"root',
    'root ::= "a"\nrootx ::= ', 'root ::= ()', 'root ::= (\n)', 'root ::= "a" . "b"', 'root ::= a_b',
    'root ::= "a"{99999999999999999999999}', 'root ::= "a"{0,99999999999999999999999}',
    'root ::= "a"{0,18446744073709551615}', 'root ::= "a"{0,18446744073709551616}', 'root ::= "é"[à-ÿ]',
    'root ::= "a" |\t| "b"', 'root ::= "a"\n\t\nroot ::= "b"', 'root ::= "a"{2}{2}', 'root ::= "a"{2000}{1}',
    'root ::= "a"{2000}{2}', 'root ::= "a"??', 'root ::= x\nx ::= "a" | ', 'root ::= [a-z\n]\n',
    'root ::= "a"\r\nb ::= "b"\rc ::= root', 'root ::= "a" b\nb ::= c d\nd ::= "d"', 'root ::= b\nb ::= "b"\nroot ::= c',
    'root ::= e root\ne ::= ()', 'root ::= x y\nx ::= ()\ny ::= root | "z"', 'root ::= ("a" | ) root | "b"',
    'root ::= "a" {2} "b"{ 0 , }', 'root ::= "a"{ 2 ,', 'root ::= [\\]\\[\\-\\\\]', 'root ::= "\\"', 'root ::= [\\',
    'root ::= [a-', 'root ::= "a"{3}{0,1}*', 'root ::= .{0}', 'root ::= .{0}?', 'root ::= "\\U0010FFFF\\UFFFFFFFF"',
    'root ::= "a"#comment\n  #more\n', 'root ::=# c\n "a"', 'root ::= ( # c\n "a" # d\n )', 'root ::= "a"\n\n\n',
    'root ::= x\nx ::= "a" x? "b"', 'root ::= [^\\x00-\\x7F]+', "root ::= [\u3041-\u309f]", 'root ::= "a" "b" "c"*',
    b'root ::= "\xff"', b'root ::= "\xffabc"', b'root ::= [\xffabc-\xe0bc]', b'root ::= "\xc3"', b'root ::= [\xe0"]"', b'root ::= "a"\x00garbage', b'root ::= "\x80\xbf"',
]


def test_tricky_grammars_match_llama(oracle):
    compared = sum(check_parity(oracle, text) for text in TRICKY)
    assert compared >= len(TRICKY) - 2


def test_text_token_references_match_llama(oracle):
    vm, vocab = oracle
    for text in ['root ::= <s> "a" </s>', 'root ::= !<s>', 'root ::= <abc>', 'root ::= "x" | <unk>']:
        check_parity(oracle, text)
    g = Grammar.from_gbnf('root ::= <s> !</s>*')  # without a vocabulary: checked for syntax only
    with pytest.raises(GrammarSyntaxError, match="no vocab to parse token at '<s>'"):
        g.parsed()
    parsed = g.parsed(vocab)
    assert parsed.rules[0][0] == (int(ElementType.TOKEN), 1)
    assert g.parsed(vocab) is parsed
    with pytest.raises(GrammarSyntaxError, match="invalid token '<abc>'") as info:
        Grammar.from_gbnf('root ::= "a" <abc>').parsed(vocab)
    assert (info.value.line, info.value.column) == (1, 14)


def test_json_schema_test_grammars_match_llama(oracle):
    """The 78 expected grammars of test-json-schema-to-grammar.cpp, and llama.cpp's grammars/ folder."""
    from oracle.cases.json_schema import upstream_cases

    texts = [c.expected for c in upstream_cases() if c.success]
    texts += [p.read_text(encoding="utf-8") for p in sorted((llama_cpp_source() / "grammars").glob("*.gbnf"))]
    assert len(texts) == 78 + 8
    for text in texts:
        assert check_parity(oracle, text)
        assert our_verdict(oracle[1], text)[0]


def test_custom_roots_match_llama(oracle):
    text = 'start ::= "a" other\nother ::= "b"'
    for root in ("start", "other", "root", "missing"):
        check_parity(oracle, text, root)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gbnf_grammars())
def test_generated_grammars_match_llama(oracle, text):
    check_parity(oracle, text)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_gbnf_grammars())
def test_generated_valid_grammars_match_llama(oracle, text):
    check_parity(oracle, text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=80).map(lambda b: b"root ::= " + b))
def test_random_bytes_match_llama(oracle, data):
    check_parity(oracle, data)


_HANG_SCRIPT = """
import os, sys
os.environ["GGML_NO_BACKTRACE"] = "1"
from oracle.llama import L, vocab_model
from oracle.sdist import vocab_gguf
vm = vocab_model(vocab_gguf("llama-spm"))
print("loaded", flush=True)
smpl = L.llama_sampler_init_grammar(vm.vocab, sys.argv[1].encode(), b"root")
print("returned", bool(smpl))
"""


@pytest.mark.parametrize("text", ['root ::= "a"{3,1}', 'root ::= e root "x" | "b"\ne ::= ()'])
def test_refused_never_ending_grammars_do_not_end_in_llama(text):
    """What we refuse as never-ending, llama.cpp indeed does not finish loading (killed 2 s into the call)."""
    import subprocess
    import sys
    from pathlib import Path

    with pytest.raises(GrammarLimitError):
        Grammar.from_gbnf(text)
    root = Path(__file__).resolve().parents[2]
    with subprocess.Popen([sys.executable, "-c", _HANG_SCRIPT, text], cwd=root, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as proc:
        assert proc.stdout.readline().strip() == "loaded"
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        else:
            pytest.fail(f"llama.cpp finished: {proc.stdout.read()}")


# ---------------------------------------------------------------------------------------------- IR parity

def test_ir_matches_llama_parser(oracle):
    from oracle.cases.json_schema import upstream_cases

    texts = [p[0] for p in PARSINGS] + FAILURES + TRICKY + [c.expected for c in upstream_cases() if c.success]
    texts += [p.read_text(encoding="utf-8") for p in sorted((llama_cpp_source() / "grammars").glob("*.gbnf"))]
    from constrained.grammars import load, names

    texts += [load(n) for n in names()]
    compared = sum(check_ir_parity(t) for t in texts)
    assert compared >= len(texts) - 10
    vocab_texts = ['root ::= <s> !</s>* "x" <unk>?', 'root ::= <abc>', 'root ::= !<s>{2} | <[3]>']
    assert all(check_ir_parity(t, oracle) for t in vocab_texts)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_gbnf_grammars())
def test_generated_ir_matches_llama_parser(oracle, text):
    check_ir_parity(text, oracle)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gbnf_grammars())
def test_generated_invalid_ir_matches_llama_parser(oracle, text):
    check_ir_parity(text, oracle)
