"""Shared by tests/llama/test_llama_server_parity.py and scripts/llama_server_parity_sweep.py: the `/completion` requests
sent to the real llama-server and to ``constrained.llama.generate``, and the comparison.

A *series* is a list of request bodies sent in order to one server and to one model loaded with the same flags
(``cache_prompt`` on unless a body says otherwise, so prefix reuse and checkpoint restores are exercised).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_LIBM.logf.restype = ctypes.c_float
_LIBM.logf.argtypes = [ctypes.c_float]

PARA = ("The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden fence, "
        "and the children count the clouds drifting slowly over the green hills. ")

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"]}
COLOUR = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]}
LIST = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}
YESNO = 'root ::= " yes" | " no" | " maybe"'
DIGITS = 'root ::= [0-9] [0-9] [0-9] "."'
WORDS = 'root ::= word (" " word)?\nword ::= [a-z]+'


def long_prompt(n_paragraphs: int) -> str:
    return PARA * n_paragraphs


def logprob(p: float) -> float:
    """llama-server's ``completion_token_output::logarithm``: ``std::log`` of a float (lowest float for 0)."""
    return -3.4028234663852886e38 if p == 0.0 else float(_LIBM.logf(p))


def series(scale: int = 1) -> dict[str, list[list[dict[str, Any]]]]:
    """Request series per flag set name (``scale`` > 1: longer generations, for the sweep)."""
    n = 3 * scale
    g = 24 * scale
    hello = "Hello, my name is"
    story = "Once upon a time, in a small village by the sea,"
    defaults = [
        # free text, greedy and sampled, a series sharing prefixes (cache_prompt on)
        [{"prompt": hello, "n_predict": n, "temperature": 0},
         {"prompt": hello + " Anna and I", "n_predict": n, "temperature": 0.8, "seed": 3},
         {"prompt": hello + " Anna and I like", "n_predict": n, "temperature": 1.5, "seed": 4, "n_probs": 3},
         {"prompt": hello, "n_predict": n, "temperature": 0.7, "seed": 5, "n_probs": 2}],
        # every sampler family
        [{"prompt": story, "n_predict": n, "seed": 7, "top_k": 5, "top_p": 0.8, "min_p": 0.1},
         {"prompt": story, "n_predict": n, "seed": 8, "repeat_penalty": 1.3, "presence_penalty": 0.5,
          "frequency_penalty": 0.4, "repeat_last_n": 16},
         {"prompt": story, "n_predict": n, "seed": 9, "dry_multiplier": 0.8, "dry_allowed_length": 1},
         {"prompt": story, "n_predict": n, "seed": 10, "xtc_probability": 0.9, "xtc_threshold": 0.05},
         {"prompt": story, "n_predict": n, "seed": 11, "dynatemp_range": 0.5, "dynatemp_exponent": 1.5,
          "temperature": 1.0},
         {"prompt": story, "n_predict": n, "seed": 12, "top_n_sigma": 1.5, "temperature": 1.2},
         {"prompt": story, "n_predict": n, "seed": 13, "mirostat": 1, "mirostat_tau": 4.0},
         {"prompt": story, "n_predict": n, "seed": 14, "mirostat": 2, "mirostat_eta": 0.2},
         {"prompt": story, "n_predict": n, "seed": 15, "typical_p": 0.7, "samplers": ["typ_p", "temperature"]},
         {"prompt": story, "n_predict": n, "seed": 16, "samplers": "kpt", "top_k": 3, "temperature": 0.3}],
        # constrained: JSON schema and GBNF grammars
        [{"prompt": "Alice is 31 years old. As JSON: ", "n_predict": g, "json_schema": PERSON, "seed": 21},
         {"prompt": "Favourite colour as JSON: ", "n_predict": g, "json_schema": COLOUR, "seed": 22,
          "temperature": 1.0, "n_probs": 2},
         {"prompt": "Three numbers: ", "n_predict": g, "json_schema": LIST, "seed": 23, "temperature": 0},
         {"prompt": "Q: is the sky blue? A:", "n_predict": 8, "grammar": YESNO, "seed": 24},
         {"prompt": "A number:", "n_predict": 8, "grammar": DIGITS, "seed": 25, "temperature": 1.3},
         {"prompt": "Two words:", "n_predict": 8, "grammar": WORDS, "seed": 26, "temperature": 0.9}],
        # long prompts (about 300 and 1,200 tokens) and a request extending the long one (checkpoint restore)
        [{"prompt": long_prompt(9), "n_predict": n, "temperature": 0},
         {"prompt": long_prompt(9) + "Then", "n_predict": n, "temperature": 0.6, "seed": 31},
         {"prompt": long_prompt(36), "n_predict": n, "temperature": 0.6, "seed": 32, "n_probs": 1},
         {"prompt": long_prompt(36) + "Finally", "n_predict": n, "temperature": 0, "cache_prompt": True}],
    ]
    short = [[{"prompt": hello, "n_predict": n, "temperature": 0},
              {"prompt": hello + " Tom", "n_predict": n, "temperature": 0.9, "seed": 41, "n_probs": 2},
              {"prompt": "Bob is 40. As JSON: ", "n_predict": g, "json_schema": PERSON, "seed": 42},
              {"prompt": long_prompt(9), "n_predict": n, "temperature": 0.5, "seed": 43}]]
    return {"defaults": defaults, "-fa off": short, "--swa-full": short, "--ctx-checkpoints 0": short,
            "-b 512 -ub 128": [[*short[0][:3], {"prompt": long_prompt(20), "n_predict": n, "seed": 44}]],
            "-c 1024": short}


FLAG_SETS = {"defaults": [], "-fa off": ["-fa", "off"], "--swa-full": ["--swa-full"],
             "--ctx-checkpoints 0": ["--ctx-checkpoints", "0"], "-b 512 -ub 128": ["-b", "512", "-ub", "128"],
             "-c 1024": ["-c", "1024"]}


def compare(srv: dict[str, Any], ours: Any) -> list[str]:
    """Differences between llama-server's answer and a :class:`constrained.llama.Generation` (empty = identical).

    A trailing end-of-generation token of llama-server's after a completed grammar is ignored (llama-server draws
    one more token once the grammar can only end; we stop there)."""
    out = []
    st = list(srv["tokens"])
    if ours.stop_reason == "grammar" and len(st) == len(ours.tokens) + 1:
        st = st[:-1]
    if st != ours.tokens:
        k = next((i for i, (a, b) in enumerate(zip(st, ours.tokens, strict=False)) if a != b), min(len(st), len(ours.tokens)))
        out.append(f"tokens differ from index {k}: server {srv['tokens']} ours {ours.tokens}")
    if srv["content"] != ours.text:
        out.append(f"content: server {srv['content']!r} ours {ours.text!r}")
    if srv["probs"]:
        for i, ((tid, _lp, top), mine) in enumerate(zip(srv["probs"], ours.probs, strict=False)):
            theirs = [(t, p) for t, p in top]
            mine_l = [(q.token, logprob(q.prob)) for q in mine]
            if theirs != mine_l or tid != ours.tokens[i]:
                out.append(f"probs at {i}: server {theirs} ours {mine_l}")
                break
    if srv["cached"] != ours.n_cached:
        out.append(f"cached prompt tokens: server {srv['cached']} ours {ours.n_cached}")
    return out


def run_series(srv: Any, llm: Any, base: Any, bodies: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[str]]]:
    """Send each body to the server and to ``generate``; per body the differences."""
    from constrained.llama import generate, vocabulary_of
    from oracle.llama_server import completion
    from sampler import Params

    res = []
    for body in bodies:
        r = completion(srv, body)
        p = Params.from_request(body, vocabulary_of(llm), base=base)
        g = generate(llm, body["prompt"], grammar=body.get("grammar"), schema=body.get("json_schema"), params=p,
                     n_predict=body["n_predict"], cache_prompt=body.get("cache_prompt", True))
        res.append((body, compare(r, g)))
    return res
