"""llama-server request fields -> :class:`sampler.Params`, as ``server_schema::eval_llama_cmpl_schema`` reads them.

JSON values are converted as nlohmann::json converts them (booleans count as numbers, floats truncate to ints,
wrong types raise ``[json.exception.type_error.302] ...``), every error is wrapped as ``Field '<name>': <what>``,
and fields are evaluated in the schema's order so the first error reported is llama-server's.

Example:
    >>> from sampler.params import Params
    >>> try:
    ...     Params.from_request({"adaptive_decay": 1.5})
    ... except ValueError as e:
    ...     print(e)
    Field 'adaptive_decay': Value must be between 0.000000 <= value <= 0.990000, but got 1.500000
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any

from .cconv import FLT_MAX, INT32_MAX, _round_f32, f32, samplers_from_chars, samplers_from_names, strtol

INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1


class _JsonTypeError(Exception):
    pass


def json_type_name(v: Any) -> str:
    """nlohmann::json's ``type_name()`` of a parsed JSON value, as llama-server's type errors name it.

    >>> json_type_name(None), json_type_name(True), json_type_name(1.5), json_type_name([1])
    ('null', 'boolean', 'number', 'array')
    """
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "discarded"


def _type_error(what: str, v: Any) -> _JsonTypeError:
    return _JsonTypeError(f"[json.exception.type_error.302] type must be {what}, but is {json_type_name(v)}")


def _wrap(x: int, bits: int, signed: bool) -> int:
    x &= (1 << bits) - 1
    if signed and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def _as_number(v: Any) -> int | float:
    """The JSON number nlohmann holds (int64 / uint64 / double)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        if -(2**63) <= v <= 2**64 - 1:
            return v
        return float(v)
    if isinstance(v, float):
        return v
    raise _type_error("number", v)


def get_int(v: Any, bits: int = 32, signed: bool = True) -> int:
    """``get<intN_t>()`` / ``get<uintN_t>()``: static_cast semantics on x86-64."""
    x = _as_number(v)
    if isinstance(x, float):
        if signed:
            if math.isnan(x) or not -(2.0**31) - 1 < x < 2.0**31:
                return -(2**31)
            return int(x)
        # double -> uint32 goes through a 64-bit truncation
        if math.isnan(x) or not -(2.0**63) <= x < 2.0**63:
            return 0
        return _wrap(int(x), bits, False)
    return _wrap(x, bits, signed)


def get_float(v: Any) -> float:
    """``get<float>()``: the JSON number rounded to float32."""
    x = _as_number(v)
    if isinstance(x, int):
        return _round_f32(Fraction(x))
    return f32(x)


def get_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _type_error("boolean", v)
    return v


def _fmt(kind: str, x: float | int) -> str:
    """``std::to_string`` of an int or a float."""
    return str(int(x)) if kind != "float" else f"{x:f}"


def _present(d: dict[str, Any], n: str) -> bool:
    return n in d and d[n] is not None


# (field names, kind, min, max, hard, Params attribute or None for validation-only fields), in schema order
_LOWEST = -FLT_MAX
_FIELDS: list[tuple[tuple[str, ...], str, float, float, bool, str | None]] = [
    (("sse_ping_interval",), "int", -1, INT32_MAX, True, None),
    (("n_predict", "max_completion_tokens", "max_tokens"), "int", -1, INT32_MAX, True, None),
    (("n_indent",), "int", 0, INT32_MAX, True, None),
    (("n_keep",), "int", -1, INT32_MAX, True, None),
    (("n_discard",), "int", 0, INT32_MAX, True, None),
    (("n_cache_reuse",), "int", 0, INT32_MAX, True, None),
    (("t_max_predict_ms",), "int64", -1, INT64_MAX, True, None),
    (("top_k",), "int", 0, INT32_MAX, False, "top_k"),
    (("top_p",), "float", 0.0, 1.0, False, "top_p"),
    (("min_p",), "float", 0.0, 1.0, False, "min_p"),
    (("top_n_sigma",), "float", _LOWEST, FLT_MAX, False, "top_n_sigma"),
    (("xtc_probability",), "float", 0.0, 1.0, False, "xtc_probability"),
    (("xtc_threshold",), "float", 0.0, 1.0, False, "xtc_threshold"),
    (("typical_p",), "float", _LOWEST, FLT_MAX, False, "typ_p"),
    (("temperature",), "float", 0.0, math.inf, False, "temp"),
    (("dynatemp_range",), "float", _LOWEST, FLT_MAX, False, "dynatemp_range"),
    (("dynatemp_exponent",), "float", _LOWEST, FLT_MAX, False, "dynatemp_exponent"),
    (("repeat_last_n",), "int", 0, INT32_MAX, True, "penalty_last_n"),
    (("repeat_penalty",), "float", _LOWEST, FLT_MAX, False, "penalty_repeat"),
    (("frequency_penalty",), "float", _LOWEST, FLT_MAX, False, "penalty_freq"),
    (("presence_penalty",), "float", _LOWEST, FLT_MAX, False, "penalty_present"),
    (("dry_multiplier",), "float", _LOWEST, FLT_MAX, False, "dry_multiplier"),
    (("dry_base",), "dry_base", 0, 0, False, "dry_base"),
    (("dry_allowed_length",), "int", 0, INT32_MAX, True, "dry_allowed_length"),
    (("dry_penalty_last_n",), "int", 0, INT32_MAX, True, "dry_penalty_last_n"),
    (("mirostat",), "int", 0, 2, False, "mirostat"),
    (("mirostat_tau",), "float", _LOWEST, FLT_MAX, False, "mirostat_tau"),
    (("mirostat_eta",), "float", _LOWEST, FLT_MAX, False, "mirostat_eta"),
    (("adaptive_target",), "float", _LOWEST, 1.0, False, "adaptive_target"),
    (("adaptive_decay",), "float", 0.0, f32(0.99), True, "adaptive_decay"),
    (("seed",), "uint32", 0, UINT32_MAX, False, "seed"),
    (("n_probs", "logprobs"), "int", -(2**31), INT32_MAX, False, "n_probs"),
    (("min_keep",), "int", 0, INT32_MAX, True, "min_keep"),
    (("dry_sequence_breakers",), "breakers", 0, 0, False, "dry_sequence_breakers"),
    (("logit_bias",), "logit_bias", 0, 0, False, "logit_bias"),
    (("ignore_eos",), "ignore_eos", 0, 0, False, "ignore_eos"),
    (("samplers",), "samplers", 0, 0, False, "samplers"),
]


def _tokenize(vocab: Any, text: str) -> list[int]:
    if vocab is None:
        raise ValueError("logit_bias with a string token needs a vocabulary (pass vocab=...)")
    return list(vocab.tokenize(text, parse_special=False))


def _logit_bias(v: Any, vocab: Any) -> tuple[tuple[int, float], ...]:
    # as the "logit_bias" handler of make_llama_cmpl_schema
    n_vocab = len(vocab) if vocab is not None else None
    out: list[tuple[int, float]] = []

    def bias_of(b: Any) -> float | None:
        if isinstance(b, bool):
            return -math.inf if not b else None
        if isinstance(b, (int, float)):
            return get_float(b)
        return None

    def in_range(t: int) -> bool:
        return t >= 0 and (n_vocab is None or t < n_vocab)

    if isinstance(v, list):
        for el in v:
            if not isinstance(el, list) or len(el) != 2:
                continue
            b = bias_of(el[1])
            if b is None:
                continue
            k = el[0]
            if isinstance(k, int) and not isinstance(k, bool):
                t = get_int(k)
                if in_range(t):
                    out.append((t, b))
            elif isinstance(k, str):
                out.extend((t, b) for t in _tokenize(vocab, k))
    elif isinstance(v, dict):
        for key, val in v.items():
            b = bias_of(val)
            if b is None:
                continue
            t, end = strtol(key)
            whole = end == len(key)
            if whole:
                t = _wrap(t, 32, True)
                if in_range(t):
                    out.append((t, b))
            else:
                out.extend((tt, b) for tt in _tokenize(vocab, key))
    return tuple(out)


def _eval_field(kind: str, lo: float, hi: float, hard: bool, v: Any, base: Any, cur: dict[str, Any],
                vocab: Any) -> Any:
    if kind in ("int", "int64", "uint32", "float"):
        if kind == "float":
            x: Any = get_float(v)
        elif kind == "int64":
            x = get_int(v, 64, True)
        else:
            x = get_int(v, 32, kind == "int")
        if not hard:
            return max(lo, min(hi, x))
        if x < lo or x > hi:
            k = "float" if kind == "float" else "int"
            raise ValueError(f"Value must be between {_fmt(k, lo)} <= value <= {_fmt(k, hi)}, but got {_fmt(k, x)}")
        return x
    if kind == "dry_base":
        x = get_float(v)
        return base.dry_base if x < 1.0 else x
    if kind == "breakers":
        ok = isinstance(v, list) and all(isinstance(s, str) for s in v)
        br = tuple(v) if ok else ()
        if not br:
            raise ValueError("Error: dry_sequence_breakers must be a non-empty array of strings")
        return br
    if kind == "logit_bias":
        return _logit_bias(v, vocab)
    if kind == "ignore_eos":
        return get_bool(v)
    if kind == "samplers":
        if isinstance(v, list):
            for s in v:
                if not isinstance(s, str):
                    raise _type_error("string", s)
            return samplers_from_names(v)
        if isinstance(v, str):
            return samplers_from_chars(v)
        return cur["samplers"]
    raise AssertionError(kind)


def _chat_to_llama(body: dict[str, Any]) -> dict[str, Any]:
    # the "logprobs" part of oaicompat_chat_params_parse, then the copy of the remaining fields
    out: dict[str, Any] = {}
    lp = body.get("logprobs")
    if isinstance(lp, bool) and lp:
        tl = body.get("top_logprobs")
        try:
            out["n_probs"] = get_int(tl) if tl is not None else 20
        except _JsonTypeError:
            out["n_probs"] = 20
    elif body.get("top_logprobs") is not None:
        raise ValueError("top_logprobs requires logprobs to be set to true")
    for k, v in body.items():
        if k not in out or k == "n_predict":
            out[k] = v
    return out


def eval_request(cls: type, body: dict[str, Any], vocab: Any, base: Any, chat: bool | None) -> Any:
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    if chat is None:
        chat = "messages" in body
    data = _chat_to_llama(body) if chat else body
    cur: dict[str, Any] = {}
    for names, kind, lo, hi, hard, attr in _FIELDS:
        for n in names:
            if _present(data, n):
                try:
                    val = _eval_field(kind, lo, hi, hard, data[n], base, {"samplers": base.samplers}, vocab)
                except (_JsonTypeError, ValueError) as e:
                    raise ValueError(f"Field '{n}': {e}") from None
                if attr is not None:
                    cur[attr] = val
                break
    return replace(base, **cur)


# Ollama's option names that map onto llama.cpp sampling parameters, and the ones accepted but not sampling-related
_OLLAMA_MAP = {
    "seed": "seed", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "typical_p": "typ_p",
    "repeat_last_n": "penalty_last_n", "temperature": "temp", "repeat_penalty": "penalty_repeat",
    "presence_penalty": "penalty_present", "frequency_penalty": "penalty_freq", "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta",
}
_OLLAMA_OTHER = {"num_keep", "num_predict", "stop", "num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap",
                 "num_thread", "penalize_newline", "tfs_z", "low_vram", "f16_kv", "vocab_only", "use_mlock",
                 "logits_all", "numa"}


def eval_ollama(cls: type, options: dict[str, Any], base: Any) -> Any:
    if not isinstance(options, dict):
        raise ValueError("Ollama options must be a JSON object")
    unknown = sorted(k for k in options if k not in _OLLAMA_MAP and k not in _OLLAMA_OTHER)
    if unknown:
        raise ValueError(f"unknown Ollama option(s): {', '.join(unknown)}")
    cur: dict[str, Any] = {}
    for k, attr in _OLLAMA_MAP.items():
        if k in options and options[k] is not None:
            v = options[k]
            try:
                if attr == "seed":
                    cur[attr] = get_int(v, 32, False)
                elif isinstance(getattr(base, attr), int):
                    cur[attr] = get_int(v)
                else:
                    cur[attr] = get_float(v)
            except _JsonTypeError as e:
                raise ValueError(f"option {k!r}: {e}") from None
    return replace(base, **cur)


__all__ = ["eval_request", "json_type_name", "eval_ollama", "get_int", "get_float", "get_bool"]
