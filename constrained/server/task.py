"""A completion request's parameters, read as llama-server's ``server_schema::eval_llama_cmpl_schema`` reads them.

The sampling fields go through :meth:`sampler.Params.from_request` (the same clamps, hard limits and messages);
this module adds the task fields around them (``stream``, ``n_predict``, ``n``, ``stop``, ``json_schema`` /
``grammar``, ``response_fields``...) and :meth:`TaskParams.to_json`, the ``generation_settings`` object
(``task_params::to_json``, server-task.cpp:30-146) with its keys in llama-server's order.

Example:
    >>> t = TaskParams.from_body({"n_predict": 8, "stop": "x", "seed": 3}, n_parallel=1)
    >>> t.n_predict, t.stop, t.sampling.seed
    (8, ['x'], 3)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sampler import Params
from sampler.request import get_bool, get_int, json_type_name

from ..json_schema import convert_json_schema, server_json_schema

__all__ = ["TaskParams", "prompt_inputs"]

INT32_MAX = 2**31 - 1


class _FieldError(ValueError):
    pass


def _has(d: dict[str, Any], n: str) -> bool:      # has_value: null counts as absent
    return n in d and d[n] is not None


def _field(name: str, fn: Any) -> Any:
    """handle_with_catch: any failure becomes ``Field '<name>': <what>``."""
    try:
        return fn()
    except _FieldError:
        raise
    except Exception as e:  # noqa: BLE001 - nlohmann's type errors and the handlers' failures alike
        raise _FieldError(f"Field '{name}': {e}") from None


def _int32(v: Any, default: int) -> int:
    """``json_value<int>``: nlohmann's ``get<int>`` (a ``static_cast`` of any number or boolean: the low 32 bits,
    a float truncated first); null or another type gives the default."""
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return default
        v = int(v)
    if not isinstance(v, int):
        return default
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _bool(d: dict[str, Any], n: str, default: bool) -> bool:
    if not _has(d, n):
        return default
    return _field(n, lambda: get_bool(d[n]))


def _hard_int(d: dict[str, Any], names: tuple[str, ...], default: int, lo: int, hi: int) -> int:
    for n in names:
        if _has(d, n):
            def ev(n: str = n) -> int:
                v = get_int(d[n], 64 if hi > INT32_MAX else 32)
                if v < lo or v > hi:
                    raise ValueError(f"Value must be between {lo} <= value <= {hi}, but got {v}")
                return v
            return _field(n, ev)
    return default


def _json_value_str(d: dict[str, Any], n: str, default: str = "") -> str:
    v = d.get(n)
    return v if isinstance(v, str) else default


@dataclass
class TaskParams:
    """The fields of ``task_params`` the server uses (defaults are llama-server's with the command line's base)."""

    sampling: Params = field(default_factory=Params)
    verbose: bool = False
    timings_per_token: bool = False
    stream: bool = False
    include_usage: bool = False
    cache_prompt: bool = True
    return_tokens: bool = False
    return_progress: bool = False
    n_predict: int = -1
    n_indent: int = 0
    n_keep: int = 0
    n_discard: int = 0
    n_cmpl: int = 1
    t_max_predict_ms: int = -1
    response_fields: list[str] = field(default_factory=list)
    post_sampling_probs: bool = False
    backend_sampling: bool = False
    stop: list[str] = field(default_factory=list)
    grammar: str = ""
    grammar_type: str = ""              # "" | "output_format" | "user" | "tool_calls"
    json_schema: Any = None             # the schema converted, when the grammar came from one
    grammar_lazy: bool = False
    grammar_triggers: list[Any] = field(default_factory=list)
    preserved_tokens: list[int] = field(default_factory=list)
    chat_format: str = "Content-only"
    reasoning_format: str = "deepseek"
    generation_prompt: str = ""
    parse_tool_calls: bool = False
    id_slot: int = -1
    sse_ping_interval: int = 30
    reasoning_control: bool = False               # the budget sampler armed for /v1/chat/completions/control
    reasoning_budget_tokens: int = -1             # -1: unlimited
    reasoning_budget_start: list[int] = field(default_factory=list)        # the thinking start tag's tokens
    reasoning_budget_end: list[list[int]] = field(default_factory=list)    # the end tags' tokens
    reasoning_budget_forced: list[int] = field(default_factory=list)       # the message's, then the first end tag's
    extra: dict[str, Any] = field(default_factory=dict)   # endpoint-specific values (chat parser inputs...)

    @classmethod
    def from_body(cls, data: dict[str, Any], *, n_parallel: int, vocab: Any = None, base: Params | None = None,
                  base_n_predict: int = -1, base_n_keep: int = 0, antiprompt: list[str] | None = None, chat: bool = False,
                  sse_ping_interval: int = 30, verbose: bool = False,
                  base_reasoning_budget: int = -1) -> TaskParams:
        """Read ``data`` (a ``/completion`` body, or the body a chat request becomes) field by field.

        Raises:
            ValueError: llama-server's message (``Field 'n': Value must be between 1 <= value <= 2, but got 3``).
        """
        t = cls()
        t.n_predict = base_n_predict
        t.sse_ping_interval = sse_ping_interval
        t.stop = list(antiprompt or [])
        t.verbose = _bool(data, "verbose", verbose)        # the base: params_base.verbosity > 9 (-v, -lv 10)
        t.timings_per_token = _bool(data, "timings_per_token", False)
        t.stream = _bool(data, "stream", False)
        so = data.get("stream_options")
        if isinstance(so, dict):
            t.include_usage = _bool(so, "include_usage", False)
        t.cache_prompt = _bool(data, "cache_prompt", True)
        t.return_tokens = _bool(data, "return_tokens", False)
        t.return_progress = _bool(data, "return_progress", False)
        # the sampling fields, with the numeric task fields' hard limits (sse_ping_interval .. t_max_predict_ms)
        t.sampling = Params.from_request(data, vocab, base, chat=chat)
        t.sse_ping_interval = _hard_int(data, ("sse_ping_interval",), sse_ping_interval, -1, INT32_MAX)
        t.n_predict = _hard_int(data, ("n_predict", "max_completion_tokens", "max_tokens"), t.n_predict, -1,
                                INT32_MAX)
        t.n_indent = _hard_int(data, ("n_indent",), 0, 0, INT32_MAX)
        t.n_keep = _hard_int(data, ("n_keep",), base_n_keep, -1, INT32_MAX)
        t.n_discard = _hard_int(data, ("n_discard",), 0, 0, INT32_MAX)
        t.n_cmpl = _hard_int(data, ("n_cmpl", "n"), 1, 1, n_parallel)
        t.t_max_predict_ms = _hard_int(data, ("t_max_predict_ms",), -1, -1, 2**63 - 1)
        rf = data.get("response_fields")
        t.response_fields = [x for x in rf if isinstance(x, str)] if isinstance(rf, list) else []
        t.backend_sampling = _bool(data, "backend_sampling", False)
        t.post_sampling_probs = _bool(data, "post_sampling_probs", False)
        if _has(data, "json_schema") or _has(data, "grammar"):
            name = "json_schema" if _has(data, "json_schema") else "grammar"
            _field(name, lambda: _grammar_field(t, data))
        t.grammar_lazy = _bool(data, "grammar_lazy", False)
        if _has(data, "reasoning_format"):
            t.reasoning_format = _field("reasoning_format", lambda: _str(data["reasoning_format"]))
        if _has(data, "generation_prompt"):
            t.generation_prompt = _field("generation_prompt", lambda: _str(data["generation_prompt"]))
        t.parse_tool_calls = _bool(data, "parse_tool_calls", False)
        if _has(data, "stop"):
            stop = data["stop"]
            words = [w for w in stop if isinstance(w, str) and w] if isinstance(stop, list) else (
                [stop] if isinstance(stop, str) else [])
            t.stop = words or list(antiprompt or [])
        if _has(data, "preserved_tokens") and vocab is not None:
            toks = []
            for s in data["preserved_tokens"] if isinstance(data["preserved_tokens"], list) else []:
                if isinstance(s, str):
                    ids = vocab.tokenize(s, parse_special=True)
                    if len(ids) == 1:
                        toks.append(ids[0])
            t.preserved_tokens = sorted(set(toks))
        if _has(data, "grammar_triggers"):
            t.grammar_triggers = _field("grammar_triggers", lambda: _triggers(data["grammar_triggers"], vocab,
                                                                              t.preserved_tokens))
            if t.grammar_lazy and not t.grammar_triggers:
                raise ValueError("Field 'grammar_triggers': Error: no triggers set for lazy grammar!")
        _reasoning_fields(t, data, vocab, base_reasoning_budget)
        if isinstance(data.get("_chat_format_name"), str):      # set by the chat endpoint (jinja)
            t.chat_format = data["_chat_format_name"]
        t.id_slot = _int32(data.get("id_slot"), -1)
        return t

    # ------------------------------------------------------------------ generation_settings
    def to_json(self, eog_bias: list[int] = (), *, only_metrics: bool = False) -> dict[str, Any]:  # type: ignore[assignment]
        """``task_params::to_json``: the ``generation_settings`` object (``only_metrics``: /props and /slots)."""
        s = self.sampling
        out: dict[str, Any] = {
            "seed": s.seed, "temperature": s.temp, "dynatemp_range": s.dynatemp_range,
            "dynatemp_exponent": s.dynatemp_exponent, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
            "top_n_sigma": s.top_n_sigma, "xtc_probability": s.xtc_probability, "xtc_threshold": s.xtc_threshold,
            "typical_p": s.typ_p, "repeat_last_n": s.penalty_last_n, "repeat_penalty": s.penalty_repeat,
            "presence_penalty": s.penalty_present, "frequency_penalty": s.penalty_freq,
            "dry_multiplier": s.dry_multiplier, "dry_base": s.dry_base, "dry_allowed_length": s.dry_allowed_length,
            "dry_penalty_last_n": s.dry_penalty_last_n,
        }
        if not only_metrics:
            out["dry_sequence_breakers"] = list(s.dry_sequence_breakers)
        out.update({"mirostat": s.mirostat, "mirostat_tau": s.mirostat_tau, "mirostat_eta": s.mirostat_eta,
                    "adaptive_target": s.adaptive_target, "adaptive_decay": s.adaptive_decay})
        if not only_metrics:
            out["stop"] = list(self.stop)
        out.update({"max_tokens": self.n_predict, "n_predict": self.n_predict, "n_keep": self.n_keep,
                    "n_discard": self.n_discard, "ignore_eos": s.ignore_eos, "stream": self.stream})
        if not only_metrics:
            bias = [{"bias": float(b), "token": int(t)} for t, b in s.logit_bias if isinstance(t, int)]
            if s.ignore_eos:
                bias += [{"bias": float("-inf"), "token": int(t)} for t in eog_bias]
            out["logit_bias"] = bias
        out.update({"n_probs": s.n_probs, "min_keep": s.min_keep})
        if not only_metrics:
            out.update({"grammar": self.grammar, "grammar_lazy": self.grammar_lazy,
                        "grammar_triggers": list(self.grammar_triggers),
                        "preserved_tokens": list(self.preserved_tokens)})
        out.update({
            "chat_format": self.chat_format, "reasoning_format": self.reasoning_format,
            "reasoning_in_content": False, "generation_prompt": self.generation_prompt,
            "samplers": list(s.samplers), "speculative.types": "none",
            "timings_per_token": self.timings_per_token, "post_sampling_probs": self.post_sampling_probs,
            "backend_sampling": self.backend_sampling, "lora": [],
        })
        return out


def _reasoning_fields(t: TaskParams, data: dict[str, Any], vocab: Any, base_budget: int) -> None:
    """server-schema.cpp:384-431, in its order: ``reasoning_control``, ``reasoning_budget_tokens`` (-1 ..
    INT32_MAX, the base is ``--reasoning-budget``), ``reasoning_budget_start_tag``, ``reasoning_budget_end_tags``
    (or ``reasoning_budget_end_tag``; empty tags skipped), ``reasoning_budget_message`` (the forced tokens: the
    message's, then the first end tag's), each tokenized with specials."""
    t.reasoning_control = _bool(data, "reasoning_control", False)
    t.reasoning_budget_tokens = _hard_int(data, ("reasoning_budget_tokens",), base_budget, -1, INT32_MAX)
    if vocab is None:
        return

    def tok(s: Any) -> list[int]:
        return list(vocab.tokenize(_str(s), parse_special=True))

    if _has(data, "reasoning_budget_start_tag"):
        t.reasoning_budget_start = _field("reasoning_budget_start_tag", lambda: tok(data["reasoning_budget_start_tag"]))
    for name in ("reasoning_budget_end_tags", "reasoning_budget_end_tag"):
        if _has(data, name):
            def ends(name: str = name) -> list[list[int]]:
                v = data[name]
                tags = [_str(x) for x in v] if name.endswith("tags") else [_str(v)]
                return [tok(x) for x in tags if x]
            t.reasoning_budget_end = _field("reasoning_budget_end_tags", ends)
            break
    if _has(data, "reasoning_budget_message") and t.reasoning_budget_end:
        def forced() -> list[int]:
            m = data["reasoning_budget_message"]
            msg = m if isinstance(m, str) else ""
            return (tok(msg) if msg else []) + t.reasoning_budget_end[0]
        t.reasoning_budget_forced = _field("reasoning_budget_message", forced)


def _triggers(items: Any, vocab: Any, preserved: list[int]) -> list[dict[str, Any]]:
    """The ``grammar_triggers`` handler: ``server_grammar_trigger`` objects; a word that is one preserved token
    becomes a token trigger (type 0), as make_llama_cmpl_schema does."""
    out: list[dict[str, Any]] = []
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict) or "type" not in it or "value" not in it:
            raise ValueError("[json.exception.out_of_range.403] key 'type' not found" if isinstance(it, dict)
                             and "type" not in it else "[json.exception.out_of_range.403] key 'value' not found")
        kind = get_int(it["type"])
        value = _str(it["value"])
        if kind == 1:                      # WORD
            ids = vocab.tokenize(value, parse_special=True) if vocab is not None else []
            if len(ids) == 1:
                if ids[0] not in preserved:
                    raise ValueError(f"Grammar trigger word should be marked as preserved token: {value}")
                out.append({"type": 0, "value": value, "token": int(ids[0])})
            else:
                out.append({"type": 1, "value": value})
        elif kind == 0:
            out.append({"type": 0, "value": value, "token": get_int(it.get("token"))})
        else:
            out.append({"type": kind, "value": value})
    return out


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"[json.exception.type_error.302] type must be string, but is {json_type_name(v)}")
    return v


def _grammar_field(t: TaskParams, data: dict[str, Any]) -> None:
    # the "json_schema" / "grammar" handler of make_llama_cmpl_schema
    if "json_schema" in data and "grammar" not in data:
        schema = data.get("json_schema")
        if schema is None:
            schema = {}
        if isinstance(schema, (str, bytes)):     # a JSON string value, not a schema (the Python API parses text)
            raise ValueError('"json_schema": JSON schema conversion failed:\nJSON schema error at #: schema must be '
                             "an object")
        try:
            t.grammar = convert_json_schema(server_json_schema(schema)).gbnf
        except Exception as e:  # noqa: BLE001 - any conversion failure is the field's error
            raise ValueError(f"\"json_schema\": JSON schema conversion failed:\n{_schema_errors(e)}") from None
        t.grammar_type = "output_format"
        t.json_schema = schema
    else:
        g = data.get("grammar")
        if isinstance(g, str) and g:
            t.grammar = g
            t.grammar_type = "tool_calls" if _json_value_str(data, "grammar_type") == "tool_calls" else "user"


def _schema_errors(e: Exception) -> str:
    msg = str(e)
    prefix = "JSON schema conversion failed:\n"
    return msg[len(prefix):] if msg.startswith(prefix) else msg


def prompt_inputs(prompt: Any) -> list[Any]:
    """``tokenize_input_prompts``: the sub-prompts of a ``prompt`` field (a string, token ids, mixed, or a list).

    Raises:
        ValueError: a prompt element of a kind llama-server refuses (its message).
    """
    def is_num(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    def contains_numbers(p: Any) -> bool:
        return isinstance(p, list) and any(is_num(x) for x in p)

    if isinstance(prompt, list) and not contains_numbers(prompt):
        out = [_subprompt(p) for p in prompt]
    else:
        out = [_subprompt(prompt)]
    if not out:
        raise ValueError("\"prompt\" must not be empty")
    return out


def _subprompt(p: Any) -> Any:
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in p):
        return p
    if isinstance(p, list) and not p:
        return p
    if isinstance(p, dict) and "prompt_string" in p:
        if "multimodal_data" in p:
            raise ValueError("Multimodal data provided, but model does not support multimodal requests.")
        return _subprompt(p["prompt_string"])
    raise ValueError("\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt "
                     "string, or a list of mixed strings & tokens.")
