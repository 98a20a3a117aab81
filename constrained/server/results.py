"""The JSON llama-server sends for a completion, key for key (server-task.cpp ``to_json_*``).

Each function takes the engine's :class:`~.engine.Final` / :class:`~.engine.Partial` and returns a dict whose
insertion order is llama-server's; :func:`~.jsonout.dumps` writes it.

Example:
    >>> usage_json(5, 2, 0)
    {'completion_tokens': 5, 'prompt_tokens': 2, 'total_tokens': 7, 'prompt_tokens_details': {'cached_tokens': 0}}
"""

from __future__ import annotations

import secrets
import string
from typing import Any

from sampler.probs import logprob

from .sampling import _valid_utf8_len
from .slots import Final, Partial, TokenOut

__all__ = ["chat_final", "chat_partial", "chat_stream_final", "completion_final", "completion_partial",
           "gen_id", "oai_cmpl_final", "oai_cmpl_partial", "probs_json", "usage_json"]

_ALNUM = string.digits + string.ascii_uppercase + string.ascii_lowercase


def gen_id(prefix: str = "chatcmpl-") -> str:
    """``gen_chatcmplid``: the prefix and 32 random ``[0-9A-Za-z]``."""
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(32))


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _cut(b: bytes) -> str:
    return b[: _valid_utf8_len(b)].decode("utf-8", "replace")


def probs_json(outs: list[TokenOut], post: bool) -> list[dict[str, Any]]:
    """``completion_token_output::probs_vector_to_json``."""
    key, tkey = ("prob", "top_probs") if post else ("logprob", "top_logprobs")
    res = []
    for o in outs:
        top = [{"id": t, "token": _cut(piece), "bytes": list(piece), key: (q if post else logprob(q))}
               for t, piece, q in o.probs]
        res.append({"id": o.tok, "token": _cut(o.text), "bytes": list(o.text),
                    key: (o.prob if post else logprob(o.prob)), tkey: top})
    return res


def usage_json(n_decoded: int, n_prompt: int, n_cached: int) -> dict[str, Any]:
    return {"completion_tokens": n_decoded, "prompt_tokens": n_prompt, "total_tokens": n_decoded + n_prompt,
            "prompt_tokens_details": {"cached_tokens": n_cached}}


def _nested(fields: list[str], obj: dict[str, Any]) -> dict[str, Any]:
    # json_get_nested_values: "a/b" is looked up through nested objects and returned under the key "a/b"
    out: dict[str, Any] = {}
    for path in fields:
        cur: Any = obj
        ok = True
        for part in path.split("/"):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                ok = False
                break
        if ok:
            out[path] = cur
    return out


def completion_final(f: Final, model: str, settings: dict[str, Any], *, apply_fields: bool = True) -> dict[str, Any]:
    """``to_json_non_oaicompat`` (``/completion``)."""
    p = f.task.params
    res: dict[str, Any] = {
        "index": f.task.index, "content": _text(f.content), "tokens": f.tokens, "id_slot": f.id_slot,
        "stop": True, "model": model, "tokens_predicted": f.n_decoded, "tokens_evaluated": f.n_prompt,
        "generation_settings": settings, "prompt": f.prompt_text, "has_new_line": f.has_new_line,
        "truncated": f.truncated, "stop_type": f.stop, "stopping_word": f.stopping_word,
        "tokens_cached": f.n_tokens_cached, "timings": f.timings,
    }
    if not p.stream and f.probs and p.sampling.n_probs > 0:
        res["completion_probabilities"] = probs_json(f.probs, p.post_sampling_probs)
    if apply_fields and p.response_fields:
        return _nested(p.response_fields, res)
    return res


def completion_partial(e: Partial) -> dict[str, Any]:
    """``server_task_result_cmpl_partial::to_json_non_oaicompat``."""
    assert e.out is not None
    res: dict[str, Any] = {"index": e.task.index, "content": _text(e.out.text), "tokens": [e.out.tok],
                           "stop": False, "id_slot": -1, "tokens_predicted": e.n_decoded,
                           "tokens_evaluated": e.n_prompt}
    if e.timings is not None:
        res["timings"] = e.timings
    if e.progress is not None:
        res["prompt_progress"] = e.progress
    if e.out.probs:
        res["completion_probabilities"] = probs_json([e.out], e.task.params.post_sampling_probs)
    return res


def _finish_reason(f: Final, tool_calls: bool = False) -> str:
    if f.stop in ("word", "eos"):
        return "tool_calls" if tool_calls else "stop"
    return "length"


def oai_cmpl_final(f: Final, model: str, cmpl_id: str, fingerprint: str, created: int,
                   verbose: dict[str, Any] | None = None) -> dict[str, Any]:
    """``to_json_oaicompat`` (``/v1/completions``)."""
    p = f.task.params
    lp = None
    if not p.stream and f.probs and p.sampling.n_probs > 0:
        lp = {"content": probs_json(f.probs, p.post_sampling_probs)}
    res: dict[str, Any] = {
        "choices": [{"text": _text(f.content), "index": f.task.index, "logprobs": lp,
                     "finish_reason": _finish_reason(f)}],
        "created": created, "model": model, "system_fingerprint": fingerprint, "object": "text_completion",
        "usage": usage_json(f.n_decoded, f.n_prompt, f.n_cached_prompt), "id": cmpl_id,
    }
    if verbose is not None:
        res["__verbose"] = verbose
    res["timings"] = f.timings
    return res


def oai_cmpl_partial(e: Partial, model: str, cmpl_id: str, fingerprint: str, created: int) -> dict[str, Any]:
    assert e.out is not None
    lp = {"content": probs_json([e.out], e.task.params.post_sampling_probs)} if e.out.probs else None
    res: dict[str, Any] = {
        "choices": [{"text": _text(e.out.text), "index": e.task.index, "logprobs": lp, "finish_reason": None}],
        "created": created, "model": model, "system_fingerprint": fingerprint, "object": "text_completion",
        "id": cmpl_id,
    }
    if e.task.params.verbose:                 # extra fields for debugging: the partial's own /completion JSON
        res["__verbose"] = completion_partial(e)
    if e.timings is not None:
        res["timings"] = e.timings
    if e.progress is not None:
        res["prompt_progress"] = e.progress
    return res


def _chunk(choices: list[Any], created: int, cmpl_id: str, model: str, fingerprint: str) -> dict[str, Any]:
    return {"choices": choices, "created": created, "id": cmpl_id, "model": model,
            "system_fingerprint": fingerprint, "object": "chat.completion.chunk"}


def chat_final(f: Final, message: dict[str, Any], model: str, cmpl_id: str, fingerprint: str, created: int,
               verbose: dict[str, Any] | None = None) -> dict[str, Any]:
    """``to_json_oaicompat_chat`` (non-stream). A parsed message with nothing in it (no content, reasoning or tool
    calls: a reply cut by ``max_tokens`` inside a tool marker, say ``<tool``, or only whitespace the parser skips)
    is answered with the generated text as its content, as llama-server does (server-task.cpp:415-422)."""
    p = f.task.params
    if not (message.get("content") or message.get("reasoning_content") or message.get("tool_calls")):
        message = {**message, "content": f.content.decode("utf-8", "replace")}
    choice: dict[str, Any] = {"finish_reason": _finish_reason(f, bool(message.get("tool_calls"))),
                              "index": f.task.index, "message": message}
    if not p.stream and f.probs and p.sampling.n_probs > 0:
        choice["logprobs"] = {"content": probs_json(f.probs, p.post_sampling_probs)}
    res: dict[str, Any] = {
        "choices": [choice], "created": created, "model": model, "system_fingerprint": fingerprint,
        "object": "chat.completion", "usage": usage_json(f.n_decoded, f.n_prompt, f.n_cached_prompt), "id": cmpl_id,
    }
    if verbose is not None:
        res["__verbose"] = verbose
    res["timings"] = f.timings
    return res


def chat_partial(e: Partial, diffs: list[dict[str, Any]], model: str, cmpl_id: str, fingerprint: str,
                 created: int) -> list[dict[str, Any]]:
    """``to_json_oaicompat_chat`` of a partial result: the role chunk at the first token, one chunk per diff;
    logprobs and timings on the last."""
    idx = e.task.index
    deltas = []
    if e.n_decoded == 1 or e.progress is not None:     # the initial role chunk, and every progress event's
        deltas.append(_chunk([{"finish_reason": None, "index": idx,
                               "delta": {"role": "assistant", "content": None}}], created, cmpl_id, model,
                             fingerprint))
    for d in diffs:
        deltas.append(_chunk([{"finish_reason": None, "index": idx, "delta": d}], created, cmpl_id, model,
                             fingerprint))
    if deltas:
        last = deltas[-1]
        if e.out is not None and e.out.probs:
            last["choices"][0]["logprobs"] = {"content": probs_json([e.out], e.task.params.post_sampling_probs)}
        if e.timings is not None:
            last["timings"] = e.timings
        if e.progress is not None:
            last["prompt_progress"] = e.progress
    return deltas


def chat_stream_final(f: Final, diffs: list[dict[str, Any]], tool_calls: bool, model: str, cmpl_id: str,
                      fingerprint: str, created: int, verbose: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``to_json_oaicompat_chat_stream``: remaining diffs, the finish chunk, the usage chunk (``include_usage``)."""
    idx = f.task.index
    out = [_chunk([{"finish_reason": None, "index": idx, "delta": d}], created, cmpl_id, model, fingerprint)
           for d in diffs]
    out.append(_chunk([{"finish_reason": _finish_reason(f, tool_calls), "index": idx, "delta": {}}], created,
                      cmpl_id, model, fingerprint))
    if f.task.params.include_usage:
        u = _chunk([], created, cmpl_id, model, fingerprint)
        u["usage"] = usage_json(f.n_decoded, f.n_prompt, f.n_cached_prompt)
        out.append(u)
    out[-1]["timings"] = f.timings
    if verbose is not None:
        out[0]["__verbose"] = verbose
    return out
