"""Lazy grammars in whole generations: ``constrained.llama.generate`` with a ``LazyGrammar`` against the real
llama-server's ``/completion`` with ``grammar_lazy`` and ``grammar_triggers`` (WORD, PATTERN with a capture group,
PATTERN_FULL, and a one-token WORD that becomes a TOKEN trigger), on the default model: the same token ids and text for every request, except where llama-server throws
(then we redrew).

The triggers are common words, so the models cross them; after the trigger the grammar constrains the text, with
llama-server's rejection-and-redraw.
"""

from __future__ import annotations

import pytest

from constrained.grammar.lazy_grammar import lazy_grammar
from constrained.llama import load_model, smollm2_model_path, vocabulary_of
from constrained.vocab.gguf_meta import sampling_metadata
from oracle.cases.llama_server_parity import compare
from oracle.llama_server import LlamaServer, completion
from sampler import Params

GBNF = 'root ::= " the" [a-z]* (" " [a-z]{1,8}){1,4} "."'
GBNF_GROUP = 'root ::= "the" (" " [a-z]{1,8}){1,4} "."'
PROMPTS = ["Once upon a time, in a small village by the sea,", "I went to the market and bought"]
# (grammar, server triggers, our patterns); None: the token " the" (a one-token WORD, which llama-server turns into a
# TOKEN trigger once it is a preserved token)
TRIGGERS = [
    (GBNF, [{"type": 1, "value": " the"}], None),
    (GBNF_GROUP, [{"type": 2, "value": r"\s(the)\b"}], [r"\s(the)\b"]),
    (GBNF, [{"type": 3, "value": r"[\s\S]*?( the)[\s\S]*"}], [r"^[\s\S]*?( the)[\s\S]*$"]),
]


@pytest.fixture(scope="module", params=["gemma3-270m"])
def both(request, default_model_path):
    path = default_model_path if request.param == "gemma3-270m" else smollm2_model_path()
    llm = load_model(path)
    base = Params.from_gguf(sampling_metadata(path))
    with LlamaServer(["-m", path], one_thread=False) as srv:
        yield srv, llm, base
    llm.close()


def test_lazy_generations_match_llama_server(both) -> None:
    srv, llm, base = both
    from constrained.llama import generate

    n = 0
    bad = []
    triggered = 0
    threw = 0
    for i, prompt in enumerate(PROMPTS):
        for j, (gbnf, server_triggers, patterns) in enumerate(TRIGGERS):
            body = {"prompt": prompt, "n_predict": 16, "seed": 100 + 10 * i + j, "temperature": 0.8 + 0.2 * j,
                    "grammar": gbnf, "grammar_lazy": True, "grammar_triggers": server_triggers}
            vocab = vocabulary_of(llm)
            if patterns is None:
                body["preserved_tokens"] = [" the"]
                (tok,) = vocab.tokenize(b" the")
                lg = lazy_grammar(gbnf, trigger_tokens=[tok])
            else:
                lg = lazy_grammar(gbnf, patterns)
            p = Params.from_request(body, vocab, base=base)
            g = generate(llm, prompt, grammar=lg, params=p, n_predict=16)
            n += 1
            try:
                r = completion(srv, body)
            except RuntimeError as e:
                # llama.cpp threw on a token whose replay the grammar rejects (HTTP 500, every slot aborted); we
                # refused that token and redrew instead
                assert "Unexpected empty grammar stack" in str(e)
                assert any(g.redrawn), (body, g.text)
                threw += 1
                continue
            triggered += " the" in g.text
            d = compare(r, g)
            if d:
                bad.append((body, d))
    assert not bad, f"{len(bad)} of {n} differ: {bad[:2]}"
    assert n == 6 and triggered >= 1 and threw < n
