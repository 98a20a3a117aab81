"""The GBNF parser beside llama.cpp's (``tests/grammar/test_gbnf_parser.py``, ``tests/grammar/test_gbnf_printer.py``
and ``scripts/gbnf_parity_sweep.py``).

- ``grammar_parser_cases()``: the ``verify_failure`` / ``verify_parsing`` cases of llama.cpp's
  ``tests/test-grammar-parser.cpp``, read from the sdist;
- ``llama_verdict`` / ``check_parity``: ``llama_sampler_init_grammar`` (NULL or not, its error message read from
  stderr and its log) against ``Grammar.from_gbnf``;
- ``check_ir_parity``: ``parse_gbnf`` against ``llama_grammar_parser::parse`` itself (C++ shim): symbol table and
  rule vectors.

The verdict helpers need llama-cpp-python (imported on first use).

Example:
    >>> failures, parsings = grammar_parser_cases()           # doctest: +SKIP
    >>> len(parsings)                                         # doctest: +SKIP
    17
"""

from __future__ import annotations

import functools
import os
import re
import tempfile

from constrained.errors import GrammarLimitError, GrammarSyntaxError
from constrained.grammar import Grammar
from constrained.grammar.gbnf import parse_gbnf
from constrained.grammar.ir import TEXT_TOKEN, TEXT_TOKEN_NOT, ElementType
from oracle.sdist import llama_cpp_source

RAW_STRING = r'R"""\((.*?)\)"""'


def _c_char(lit: str) -> int:
    body = lit[1:-1]
    escapes = {"\\n": 10, "\\t": 9, "\\r": 13, "\\0": 0, "\\\\": 92, "\\'": 39, '\\"': 34}
    return escapes[body] if body.startswith("\\") else ord(body)


@functools.cache
def grammar_parser_cases() -> tuple[list[str], list[tuple[str, dict[str, int], list[tuple[int, int]]]]]:
    """verify_failure grammars and verify_parsing (grammar, symbol_ids, concatenated elements) of llama.cpp's
    ``tests/test-grammar-parser.cpp``, read from the sdist (once per process)."""
    src = (llama_cpp_source() / "tests" / "test-grammar-parser.cpp").read_text(encoding="utf-8")
    main = src[src.index("int main()"):]
    calls = list(re.finditer(r"verify_(parsing|failure)\(\s*" + RAW_STRING, main, re.S))
    failures, parsings = [], []
    for i, m in enumerate(calls):
        grammar = m.group(2)
        if m.group(1) == "failure":
            failures.append(grammar)
            continue
        tail = main[m.end(): calls[i + 1].start() if i + 1 < len(calls) else len(main)]
        symbols = {name: int(v) for name, v in re.findall(r'\{"([^"]+)",\s*(\d+)\}', tail)}
        elements = []
        for kind, value in re.findall(r"\{LLAMA_GRETYPE_(\w+),\s*([^}]*)\}", tail):
            value = re.sub(r"/\*.*?\*/", "", value).strip()
            v = _c_char(value) if value.startswith("'") else int(value)
            elements.append((int(ElementType[kind]), v))
        parsings.append((grammar, symbols, elements))
    return failures, parsings


_LOG: list[str] = []


def _capture_log(level, text, user_data):  # noqa: ANN001
    _LOG.append(text.decode("utf-8", "replace"))


@functools.cache
def _capture_callback():  # noqa: ANN202
    from oracle import llama as llama_oracle

    return llama_oracle.L.llama_log_callback(_capture_log)  # cached: kept alive while llama.cpp may call it


def llama_verdict(vm, text: bytes, root: str = "root") -> tuple[bool, str]:
    """(llama_sampler_init_grammar != NULL, its error: the parser's message from stderr, else the message it
    logs from llama_grammar_init_impl, or "")."""
    from oracle import llama as llama_oracle

    L = llama_oracle.L
    _LOG.clear()
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        L.llama_log_set(_capture_callback(), None)
        try:
            smpl = L.llama_sampler_init_grammar(vm.vocab, text, root.encode())
        finally:
            L.llama_log_set(llama_oracle._silent_log, None)
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        out = err.read().decode("utf-8", "replace")
    if smpl:
        L.llama_sampler_free(smpl)
    m = re.search(r"parse: error parsing grammar: (.*)", out)
    if m:
        return bool(smpl), m.group(1)
    logged = [line.strip() for line in "".join(_LOG).splitlines()
              if "left recursion" in line or "does not contain" in line]
    return bool(smpl), (logged[0] if logged else "")


def our_verdict(vocab, text: bytes | str, root: str = "root") -> tuple[bool, GrammarSyntaxError | None]:  # noqa: ANN001
    """(``Grammar.from_gbnf`` loads, its GrammarSyntaxError or None)."""
    try:
        Grammar.from_gbnf(text, root, vocab=vocab)
    except GrammarSyntaxError as err:
        return False, err
    return True, None


def llama_would_not_finish(err: GrammarSyntaxError | None) -> bool:
    """Our refusal of a grammar on which llama.cpp's parser or sampler would never finish."""
    return isinstance(err, GrammarLimitError) and ("forever" in err.message or "never finish" in err.message)


def check_parity(oracle, text: str | bytes, root: str = "root", *, messages: bool = True) -> bool:  # noqa: ANN001
    """``Grammar.from_gbnf`` against ``llama_sampler_init_grammar`` with ``oracle`` = (vocab model, Vocabulary):
    the same verdict and llama.cpp's message as the prefix of ours. False where no comparison is made."""
    vm, vocab = oracle
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    ours, err = our_verdict(vocab, data, root)
    if llama_would_not_finish(err) or data[:1] in (b"", b"\0"):
        return False  # llama.cpp would hang; an empty string makes a sampler without any grammar
    theirs, message = llama_verdict(vm, data, root)
    assert ours == theirs, (text, err)
    if messages and message:
        if "left recursion" in message:  # the same rule index
            assert err is not None and message in err.message, (text, message, err.message)
        else:
            head = message.split(" at ")[0]
            assert err is not None and err.message.startswith(head), (text, message, err.message)
    return True


def check_ir_parity(text: str | bytes, oracle=None) -> bool:  # noqa: ANN001
    """Our parse_gbnf against llama_grammar_parser::parse itself (C++ shim): same success, and on success the
    same symbol table and the same rule vectors. With ``oracle`` (vocab model, Vocabulary) ``<text>`` token
    references are resolved on both sides. Returns False where no comparison is made (llama.cpp would hang)."""
    from constrained.grammar.grammar import _resolver
    from oracle.gbnf import llama_parse

    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    resolve = _resolver(oracle[1]) if oracle is not None else None
    try:
        layout = parse_gbnf(data, resolve_token=resolve)
    except GrammarLimitError as err:
        if llama_would_not_finish(err):
            return False
        raise
    except GrammarSyntaxError:
        layout = None
    if layout is not None and layout.token_texts and resolve is None:
        layout = None  # llama.cpp without a vocabulary: "no vocab to parse token"
    ok, symbols, rules = llama_parse(data, oracle[0].vocab if oracle is not None else None)
    assert ok == (layout is not None), text
    if ok:
        assert layout.symbol_ids == symbols, text
        ids = layout.resolved or ()
        tok, tok_not = int(ElementType.TOKEN), int(ElementType.TOKEN_NOT)
        resolved = tuple(tuple((tok, ids[v]) if k == TEXT_TOKEN else (tok_not, ids[v]) if k == TEXT_TOKEN_NOT
                               else (k, v) for k, v in rule) for rule in layout.rules)
        assert resolved == rules, text
    return True
