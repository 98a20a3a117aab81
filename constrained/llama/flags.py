"""llama-server's command line, read as ``common_params_parse`` reads it at llama.cpp 0c1e57098.

:func:`parse_server_args` takes the flags a user would give ``llama-server`` (names, aliases, ``--no-`` forms and
defaults from ``common/arg.cpp``, ``common/common.h`` and ``tools/server/server.cpp``) and returns a
:class:`ServerArgs`: the model load settings (``load_model`` creates its context from them), the default sampling
parameters of every request (``sampling``, a :class:`sampler.Params`) and the server's own settings (``host``,
``port``, ``api_key``...). A flag llama-server does not know is refused as llama-server refuses it; a flag it knows
for a feature this project lacks (LoRA, multimodal, speculative decoding, downloads...) is refused naming it;
flags that change nothing we compute (logging, GPU offload on a CPU build, thread pinning) are accepted and listed
in ``ServerArgs.ignored``.

Example:
    >>> a = parse_server_args(["-m", "model.gguf", "-c", "4096", "-fa", "off", "--swa-full", "--temp", "0.5"])
    >>> a.model, a.n_ctx, a.flash_attn, a.swa_full, a.sampling.temp
    ('model.gguf', 4096, 'off', True, 0.5)
    >>> parse_server_args([]).n_batch, parse_server_args([]).n_ubatch, parse_server_args([]).n_ctx_checkpoints
    (2048, 512, 32)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sampler import Params
from sampler.cconv import samplers_from_chars, samplers_from_names, stof, stoi, stoul

from ..errors import FlagError

__all__ = ["FlagError", "ServerArgs", "UNSUPPORTED_FLAGS", "IGNORED_FLAGS", "known_flags", "parse_server_args",
           "physical_cores"]


# ggml_type names llama-server accepts for -ctk/-ctv (kv_cache_types in common/arg.cpp) -> GGML type id
KV_CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6,
                  "q5_1": 7}


@dataclass(frozen=True)
class ServerArgs:
    """What a llama-server command line sets (``common_params``), with llama-server's defaults.

    Load settings: ``n_ctx`` 0 means the model's training context (llama-server's default ``-c``);
    ``flash_attn`` is ``"auto"``, ``"on"`` or ``"off"``; ``n_parallel`` -1 means auto (4 slots, unified KV cache);
    threads -1 mean the number of physical cores (``common_cpu_get_num_math``).
    """

    model: str | None = None
    alias: tuple[str, ...] = ()
    # ---- context / load (common_context_params_to_llama)
    n_ctx: int = 0
    n_batch: int = 2048
    n_ubatch: int = 512
    flash_attn: str = "auto"
    swa_full: bool = False
    kv_unified: bool = False
    n_parallel: int = -1
    n_threads: int = -1
    n_threads_batch: int = -1
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_gpu_layers: str = "auto"
    # ---- slot / prompt handling
    n_ctx_checkpoints: int = 32
    checkpoint_min_step: int = 8192
    cache_prompt: bool = True
    cache_reuse: int = 0
    cache_ram_mib: int = 8192
    cache_idle_slots: bool = True
    slot_prompt_similarity: float = 0.1
    ctx_shift: bool = False
    cont_batching: bool = True
    n_predict: int = -1
    n_keep: int = 0
    sleep_idle_seconds: int = -1      # --sleep-idle-seconds: idle this long, the context is freed until a request
    slot_save_path: str = ""          # --slot-save-path: a directory, with a trailing "/" (empty: slot actions off)
    embedding: bool = False           # --embedding / --rerank: the embedding routes served (the context's outputs)
    pooling: int = -1                 # --pooling: LLAMA_POOLING_TYPE_* (-1 unspecified: the model's own; --rerank: 4)
    embd_normalize: int = 2           # --embd-normalize: the default normalisation (2: euclidean)
    # ---- sampling defaults of every request (common_params_sampling), and the flags the user set
    sampling: Params = field(default_factory=Params)
    sampling_user_set: frozenset[str] = frozenset()
    grammar: str | None = None
    json_schema: Any = None
    # ---- the HTTP server
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: tuple[str, ...] = ()
    api_prefix: str = ""
    timeout: int = 3600
    threads_http: int = -1
    sse_ping_interval: int = 30
    jinja: bool = True
    chat_template: str | None = None
    chat_template_file: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_format: str = "auto"
    reasoning: str = "auto"
    reasoning_budget: int = -1
    reasoning_budget_message: str = ""
    prefill_assistant: bool = True
    slots: bool = True
    metrics: bool = False
    props: bool = False
    webui: bool = True
    cors_origins: str = "*"
    verbose: bool = False
    #: --warmup / --no-warmup: llama-server's empty run before serving; off unless asked for here (it changes no
    #: output and, measured, gains the first request nothing on CPU with the model file in the page cache)
    warmup: bool = False
    #: flags accepted but without effect here (logging, GPU offload on a CPU build, CPU pinning...)
    ignored: tuple[str, ...] = ()

    def resolved_threads(self) -> tuple[int, int]:
        """``(n_threads, n_threads_batch)`` as llama-server resolves -1 (physical cores; batch = threads)."""
        n = self.n_threads if self.n_threads > 0 else physical_cores()
        nb = self.n_threads_batch if self.n_threads_batch > 0 else n
        return n, nb

    def resolved_parallel(self) -> tuple[int, bool]:
        """``(n_slots, kv_unified)``: ``-np -1`` (the default) is 4 slots with a unified KV cache (server.cpp)."""
        if self.n_parallel < 0:
            return 4, True
        return self.n_parallel, self.kv_unified

    def replace(self, **kw: Any) -> ServerArgs:
        return replace(self, **kw)


def physical_cores() -> int:
    """``common_cpu_get_num_physical_cores`` on Linux: distinct ``thread_siblings`` sets (fallback: CPU count)."""
    seen = set()
    cpu = 0
    while True:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings") as f:
                seen.add(f.readline())
        except OSError:
            break
        cpu += 1
    if seen:
        return len(seen)
    n = os.cpu_count() or 1
    return n // 2 if n >= 4 else n


# ---------------------------------------------------------------- value conversions (as common/arg.cpp does them)
# std::stoi / std::stof (sampler.cconv); the seed is std::stoul (64-bit, negative values wrap) into a uint32
def _seed(v: str) -> int:
    return stoul(v) & 0xFFFFFFFF


def _tri(v: str, flag: str) -> str:
    if v in ("on", "enabled", "true", "1"):
        return "on"
    if v in ("off", "disabled", "false", "0"):
        return "off"
    if v in ("auto", "-1"):
        return "auto"
    raise ValueError(f"error: unknown value for {flag}: '{v}'")


# ---------------------------------------------------------------- the flag table
_State = dict[str, Any]
def _reasoning_budget(v: str) -> int:
    """``--reasoning-budget N``: -1 unlimited, 0 end at once, N tokens (arg.cpp: below -1 is ``invalid value``)."""
    x = stoi(v)
    if x < -1:
        raise ValueError("invalid value")
    return x


_H = Callable[[_State, str], None]


def _slot_save_path(v: str) -> str:
    """``--slot-save-path``: an existing directory, a ``/`` appended when it has none (common/arg.cpp)."""
    import os

    if not os.path.isdir(v):
        raise FlagError(f"not a directory: {v}")
    return v if v.endswith("/") else v + "/"


#: --pooling's names: LLAMA_POOLING_TYPE_*
POOLING_TYPES = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


def _pooling(v: str) -> int:
    if v not in POOLING_TYPES:
        raise ValueError("invalid value")
    return POOLING_TYPES[v]


def _set(key: str, conv: Callable[[str], Any] = str) -> _H:
    def h(st: _State, v: str) -> None:
        st[key] = conv(v)
    return h


def _sleep_seconds(v: str) -> int:
    n = stoi(v)
    if n == 0 or n < -1:
        raise ValueError("invalid value: cannot be 0 or less than -1")
    return n


def _samp(key: str, conv: Callable[[str], Any], user: str | None = None) -> _H:
    def h(st: _State, v: str) -> None:
        st["sampling"][key] = conv(v)
        if user:
            st["user_set"].add(user)
    return h


def _repeat_penalty(v: str) -> float:
    x = stof(v)
    if not math.isfinite(x) or x <= 0.0 or not math.isfinite(1.0 / x):
        raise ValueError("error: repeat-penalty must be finite and greater than 0")
    return x


def _finite(name: str) -> Callable[[str], float]:
    def c(v: str) -> float:
        x = stof(v)
        if not math.isfinite(x):
            raise ValueError(f"error: {name} must be finite")
        return x
    return c


def _last_n(v: str) -> int:
    x = stoi(v)
    if x < -1:
        raise ValueError("error: value must be >= -1")
    return x


def _dry_base(st: _State, v: str) -> None:
    x = stof(v)
    if x >= 1.0:                       # smaller values are ignored, as arg.cpp does
        st["sampling"]["dry_base"] = x


def _dry_breaker(st: _State, v: str) -> None:
    if not st["dry_cleared"]:
        st["sampling"]["dry_sequence_breakers"] = []
        st["dry_cleared"] = True
    if v == "none":
        st["sampling"]["dry_sequence_breakers"] = []
    else:
        st["sampling"]["dry_sequence_breakers"].append(v)


def _logit_bias(st: _State, v: str) -> None:
    import re

    m = re.match(r"\s*([+-]?\d+)\s*([+-])(.*)$", v, re.S)
    if not m:
        raise ValueError("invalid input format")
    bias = stof(m.group(3)) * (-1.0 if m.group(2) == "-" else 1.0)
    st["sampling"]["logit_bias"].append((int(m.group(1)), bias))


def _read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as err:
        raise ValueError(f"error: failed to open file '{path}'") from err


def _json_schema(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"[json.exception.parse_error] {err}") from err


def _parallel(v: str) -> int:
    x = stoi(v)
    if x == 0:
        raise ValueError("error: invalid value for n_parallel")
    return x


def _kv_type(v: str) -> str:
    if v not in KV_CACHE_TYPES:
        raise ValueError(f"Unsupported cache type: {v}")
    return v


def _threads(v: str) -> int:
    x = stoi(v)
    return x if x > 0 else (os.cpu_count() or 1)   # <= 0: std::thread::hardware_concurrency()


def _reasoning_format(v: str) -> str:
    if v not in ("none", "deepseek", "deepseek-legacy", "auto"):
        raise ValueError(f"Unknown reasoning format: {v}")
    return v


def _kwargs(st: _State, v: str) -> None:
    d = _json_schema(v)
    if not isinstance(d, dict):
        raise ValueError("chat-template-kwargs must be a JSON object")
    st["chat_template_kwargs"].update(d)


def _api_key(st: _State, v: str) -> None:
    st["api_key"].extend(k for k in v.split(",") if k)


def _api_key_file(st: _State, v: str) -> None:
    st["api_key"].extend(line.strip() for line in _read_file(v).splitlines() if line.strip())


def _alias(st: _State, v: str) -> None:
    st["alias"] = [a for a in v.split(",") if a]


def _bool(key: str) -> Callable[[_State, bool], None]:
    def h(st: _State, positive: bool) -> None:
        st[key] = positive
    return h


def _void(key: str, value: Any = True) -> Callable[[_State], None]:
    def h(st: _State) -> None:
        st[key] = value
    return h


def _rerank(st: _State) -> None:
    st["embedding"] = True
    st["pooling"] = POOLING_TYPES["rank"]


def _ignore_eos(st: _State) -> None:
    st["sampling"]["ignore_eos"] = True


# (names, handler) for flags taking one value; (names, neg_names, handler(positive)) for on/off flags;
# (names, handler()) for flags without a value.
_VALUE: list[tuple[tuple[str, ...], _H]] = [
    (("-m", "--model"), _set("model")),
    (("-a", "--alias"), _alias),
    (("-c", "--ctx-size"), _set("n_ctx", stoi)),
    (("-b", "--batch-size"), _set("n_batch", stoi)),
    (("-ub", "--ubatch-size"), _set("n_ubatch", stoi)),
    (("-fa", "--flash-attn"), lambda st, v: st.__setitem__("flash_attn", _tri(v, "--flash-attn"))),
    (("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), _set("n_ctx_checkpoints", stoi)),
    (("-cms", "--checkpoint-min-step"), _set("checkpoint_min_step", stoi)),
    (("-cram", "--cache-ram"), _set("cache_ram_mib", stoi)),
    (("-t", "--threads"), _set("n_threads", _threads)),
    (("-tb", "--threads-batch"), _set("n_threads_batch", _threads)),
    (("-np", "--parallel"), _set("n_parallel", _parallel)),
    (("-ctk", "--cache-type-k"), _set("cache_type_k", _kv_type)),
    (("-ctv", "--cache-type-v"), _set("cache_type_v", _kv_type)),
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), _set("n_gpu_layers")),
    (("--cache-reuse",), _set("cache_reuse", stoi)),
    (("-n", "--predict", "--n-predict"), _set("n_predict", stoi)),
    (("--keep",), _set("n_keep", stoi)),
    (("--sleep-idle-seconds",), _set("sleep_idle_seconds", _sleep_seconds)),
    (("--slot-save-path",), _set("slot_save_path", _slot_save_path)),
    (("--pooling",), _set("pooling", _pooling)),
    (("--embd-normalize",), _set("embd_normalize", stoi)),
    (("-sps", "--slot-prompt-similarity"), _set("slot_prompt_similarity", stof)),
    # params.verbosity: only whether it exceeds 9 matters here (server-schema.cpp: params.verbose)
    (("-lv", "--verbosity", "--log-verbosity"), lambda st, v: st.__setitem__("verbose", stoi(v) > 9)),
    # sampling (common_params_sampling); the user_set names are those Params.from_gguf knows
    (("--samplers",), _samp("samplers", lambda v: samplers_from_names(v.split(";")), "samplers")),
    (("-s", "--seed"), _samp("seed", _seed)),
    (("--sampler-seq", "--sampling-seq"), _samp("samplers", samplers_from_chars)),
    (("--temp", "--temperature"), _samp("temp", lambda v: max(stof(v), 0.0), "temp")),
    (("--top-k",), _samp("top_k", stoi, "top_k")),
    (("--top-p",), _samp("top_p", stof, "top_p")),
    (("--min-p",), _samp("min_p", stof, "min_p")),
    (("--top-nsigma", "--top-n-sigma"), _samp("top_n_sigma", stof)),
    (("--xtc-probability",), _samp("xtc_probability", stof, "xtc_probability")),
    (("--xtc-threshold",), _samp("xtc_threshold", stof, "xtc_threshold")),
    (("--typical", "--typical-p"), _samp("typ_p", stof)),
    (("--repeat-last-n",), _samp("penalty_last_n", _last_n, "penalty_last_n")),
    (("--repeat-penalty",), _samp("penalty_repeat", _repeat_penalty, "penalty_repeat")),
    (("--presence-penalty",), _samp("penalty_present", _finite("presence-penalty"))),
    (("--frequency-penalty",), _samp("penalty_freq", _finite("frequency-penalty"))),
    (("--dry-multiplier",), _samp("dry_multiplier", stof)),
    (("--dry-base",), _dry_base),
    (("--dry-allowed-length",), _samp("dry_allowed_length", stoi)),
    (("--dry-penalty-last-n",), _samp("dry_penalty_last_n", _last_n)),
    (("--dry-sequence-breaker",), _dry_breaker),
    (("--adaptive-target",), _samp("adaptive_target", stof)),
    (("--adaptive-decay",), _samp("adaptive_decay", stof)),
    (("--dynatemp-range",), _samp("dynatemp_range", stof)),
    (("--dynatemp-exp",), _samp("dynatemp_exponent", stof)),
    (("--mirostat",), _samp("mirostat", stoi, "mirostat")),
    (("--mirostat-lr",), _samp("mirostat_eta", stof, "mirostat_eta")),
    (("--mirostat-ent",), _samp("mirostat_tau", stof, "mirostat_tau")),
    (("-l", "--logit-bias"), _logit_bias),
    (("--grammar",), _set("grammar")),
    (("--grammar-file",), lambda st, v: st.__setitem__("grammar", _read_file(v))),
    (("-j", "--json-schema"), lambda st, v: st.__setitem__("json_schema", _json_schema(v))),
    (("-jf", "--json-schema-file"), lambda st, v: st.__setitem__("json_schema", _json_schema(_read_file(v)))),
    # the HTTP server
    (("--host",), _set("host")),
    (("--port",), _set("port", stoi)),
    (("--api-key",), _api_key),
    (("--api-key-file",), _api_key_file),
    (("--api-prefix",), _set("api_prefix")),
    (("-to", "--timeout"), _set("timeout", stoi)),
    (("--threads-http",), _set("threads_http", stoi)),
    (("--sse-ping-interval",), _set("sse_ping_interval", stoi)),
    (("--chat-template",), _set("chat_template")),
    (("--chat-template-file",), _set("chat_template_file")),
    (("--chat-template-kwargs",), _kwargs),
    (("--reasoning-format",), _set("reasoning_format", _reasoning_format)),
    (("-rea", "--reasoning"), lambda st, v: st.__setitem__("reasoning", _tri(v, "--reasoning"))),
    (("--reasoning-budget",), _set("reasoning_budget", _reasoning_budget)),
    (("--reasoning-budget-message",), _set("reasoning_budget_message")),
    (("--cors-origins",), _set("cors_origins")),
]

_BOOL: list[tuple[tuple[str, ...], tuple[str, ...], Callable[[_State, bool], None]]] = [
    (("--cache-prompt",), ("--no-cache-prompt",), _bool("cache_prompt")),
    (("--cache-idle-slots",), ("--no-cache-idle-slots",), _bool("cache_idle_slots")),
    (("-kvu", "--kv-unified"), ("-no-kvu", "--no-kv-unified"), _bool("kv_unified")),
    (("--context-shift",), ("--no-context-shift",), _bool("ctx_shift")),
    (("-cb", "--cont-batching"), ("-nocb", "--no-cont-batching"), _bool("cont_batching")),
    (("--jinja",), ("--no-jinja",), _bool("jinja")),
    (("--slots",), ("--no-slots",), _bool("slots")),
    (("--ui", "--webui"), ("--no-ui", "--no-webui"), _bool("webui")),
    (("--prefill-assistant",), ("--no-prefill-assistant",), _bool("prefill_assistant")),
    (("--warmup",), ("--no-warmup",), _bool("warmup")),
]

_VOID: list[tuple[tuple[str, ...], Callable[[_State], None]]] = [
    (("--swa-full",), _void("swa_full")),
    (("--embedding", "--embeddings"), _void("embedding")),
    (("--rerank", "--reranking"), _rerank),
    (("--metrics",), _void("metrics")),
    (("--props",), _void("props")),
    (("--ignore-eos",), _ignore_eos),
    (("-v", "--verbose", "--log-verbose"), _void("verbose")),
]

#: flags accepted without effect on what we compute: how many of them take a value
IGNORED_FLAGS: dict[str, int] = {
    **dict.fromkeys(["--log-disable", "--log-prefix", "--no-log-prefix",
                     "--log-timestamps", "--no-log-timestamps", "--log-jsonl", "--no-log-jsonl"], 0),
    "--log-file": 1, "--log-colors": 1, "--log-prompts-dir": 1,
    **dict.fromkeys(["--perf", "--no-perf", "--no-host", "--repack", "-nr",
                     "--no-repack", "-kvo", "--kv-offload", "-nkvo", "--no-kv-offload", "--op-offload",
                     "--no-op-offload", "--check-tensors",
                     "--offline", "--reuse-port", "--cors-credentials", "--no-cors-credentials", "-cmoe",
                     "--cpu-moe", "--no-mmproj", "--no-mmproj-auto", "--mmproj-auto", "--skip-chat-parsing",
                     "--no-skip-chat-parsing", "--reasoning-preserve", "--no-reasoning-preserve",
                     "--models-autoload", "--no-models-autoload", "--ui-mcp-proxy", "--webui-mcp-proxy",
                     "--no-ui-mcp-proxy", "--no-webui-mcp-proxy", "-ag", "--agent", "-no-ag", "--no-agent",
                     "--mmproj-offload", "--no-mmproj-offload", "--list-devices", "-e", "--escape", "--no-escape",
                     "-sp", "--special"], 0),
    **dict.fromkeys(["-C", "--cpu-mask", "-Cr", "--cpu-range", "--cpu-strict", "--prio", "--poll", "-Cb",
                     "--cpu-mask-batch", "-Crb", "--cpu-range-batch", "--cpu-strict-batch", "--prio-batch",
                     "--poll-batch", "--numa", "-dev", "--device", "-sm", "--split-mode", "-ts", "--tensor-split",
                     "-mg", "--main-gpu", "-fit", "--fit", "-fitt", "--fit-target", "-fitc", "--fit-ctx",
                     "-dt", "--defrag-thold", "--cors-methods", "--cors-headers", "--path",
                     "--tags", "-ncmoe", "--n-cpu-moe", "-ncffn", "--n-cpu-ffn", "-lm", "--load-mode", "-lzm",
                     "--lazy-mode", "--media-path", "--ui-config", "--webui-config",
                     "--ui-config-file", "--webui-config-file", "--models-max",
                     "--reasoning-effort", "-r", "--reverse-prompt"], 1),
}

#: flags llama-server knows for features this project does not have: the reason given when one is used
UNSUPPORTED_FLAGS: dict[str, str] = {
    **dict.fromkeys(["--lora", "--lora-scaled", "--lora-init-without-apply"], "LoRA adapters"),
    **dict.fromkeys(["--control-vector", "--control-vector-scaled", "--control-vector-layer-range"],
                    "control vectors"),
    **dict.fromkeys(["-mm", "--mmproj", "-mmu", "--mmproj-url", "--image-min-tokens", "--image-max-tokens",
                     "--mtmd-batch-max-tokens", "-mmdev", "--mmproj-device", "--video-fps", "--video-timestamp-interval", "--video-ffmpeg-dir"],
                    "multimodal input"),
    **dict.fromkeys(["--rope-scaling", "--rope-scale", "--rope-freq-base", "--rope-freq-scale", "--yarn-orig-ctx",
                     "--yarn-ext-factor", "--yarn-attn-factor", "--yarn-beta-slow", "--yarn-beta-fast",
                     "--override-kv", "-ot", "--override-tensor", "--kv-unified-per-slot"],
                    "model overrides"),
    **dict.fromkeys(["-mu", "--model-url", "-dr", "--docker-repo", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file",
                     "-hft", "--hf-token", "-cl", "--cache-list"], "model downloads (give -m with a GGUF path)"),
    **dict.fromkeys(["--models-dir", "--models-preset"], "the multi-model router"),
    **dict.fromkeys(["--ssl-key-file", "--ssl-cert-file"], "HTTPS"),
    **dict.fromkeys(["--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json"],
                    "built-in tools and MCP"),
    **dict.fromkeys(["--rpc"], "RPC backends"),
    **dict.fromkeys(["-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic", "--spm-infill",
                     "-bs", "--backend-sampling"], "lookup decoding, backend sampling"),
    **dict.fromkeys(["-h", "--help", "--usage", "--version", "--completion-bash"],
                    "help output (run llama-server itself)"),
}
_UNSUPPORTED_PREFIXES = (("--spec-", "speculative decoding"), ("--draft", "speculative decoding"),
                         ("--fim-", "preset downloads"), ("--embd-", "preset downloads"),
                         ("--vision-", "preset downloads"), ("--gpt-oss-", "preset downloads"))
_UNSUPPORTED_SHORT = {"-md", "-devd", "-ngld", "-td", "-tbd", "-Cd", "-Crd", "-Cbd", "-ctkd", "-ctvd", "-otd",
                      "-cmoed", "-ncmoed", "-hfd", "-hfrd", "--model-draft", "--device-draft", "--gpu-layers-draft",
                      "--n-gpu-layers-draft", "--threads-draft", "--threads-batch-draft", "--cpu-mask-draft",
                      "--cpu-range-draft", "--cpu-strict-draft", "--prio-draft", "--poll-draft",
                      "--cpu-mask-batch-draft", "--cpu-strict-batch-draft", "--prio-batch-draft",
                      "--poll-batch-draft", "--cache-type-k-draft", "--cache-type-v-draft",
                      "--override-tensor-draft", "--cpu-moe-draft", "--n-cpu-moe-draft", "--hf-repo-draft"}


def _index() -> dict[str, tuple[str, Any, bool]]:
    idx: dict[str, tuple[str, Any, bool]] = {}
    for names, h in _VALUE:
        for n in names:
            idx[n] = ("value", h, True)
    for names, neg, hb in _BOOL:
        for n in names:
            idx[n] = ("bool", hb, True)
        for n in neg:
            idx[n] = ("bool", hb, False)
    for names, hv in _VOID:
        for n in names:
            idx[n] = ("void", hv, True)
    return idx


_INDEX = _index()


def known_flags() -> set[str]:
    """Every flag name this module knows (supported, ignored or refused as unsupported)."""
    return set(_INDEX) | set(IGNORED_FLAGS) | set(UNSUPPORTED_FLAGS) | _UNSUPPORTED_SHORT


def _unsupported(arg: str) -> str | None:
    if arg in UNSUPPORTED_FLAGS:
        return UNSUPPORTED_FLAGS[arg]
    if arg in _UNSUPPORTED_SHORT:
        return "speculative decoding"
    if arg in _INDEX:                  # a known flag under a refused prefix (--embd-normalize)
        return None
    for p, why in _UNSUPPORTED_PREFIXES:
        if arg.startswith(p):
            return why
    return None


def parse_server_args(argv: Sequence[str], *, base: ServerArgs | None = None) -> ServerArgs:
    """Read a llama-server command line (without the program name) into :class:`ServerArgs`.

    As ``common_params_parse``: ``--`` flags may spell ``-`` as ``_``; a later flag wins over an earlier one.

    Raises:
        FlagError: an unknown flag (``error: invalid argument: --foo``), a missing or bad value (``error while
            handling argument "-c": ...``), or a flag for a feature this project does not have.
    """
    b = base or ServerArgs()
    st: _State = {f: getattr(b, f) for f in b.__dataclass_fields__}
    sp = b.sampling
    st["sampling"] = {f: getattr(sp, f) for f in sp.__dataclass_fields__}
    st["sampling"]["logit_bias"] = list(sp.logit_bias)
    st["sampling"]["dry_sequence_breakers"] = list(sp.dry_sequence_breakers)
    st["user_set"] = set(b.sampling_user_set)
    st["api_key"] = list(b.api_key)
    st["alias"] = list(b.alias)
    st["chat_template_kwargs"] = dict(b.chat_template_kwargs)
    st["dry_cleared"] = False
    ignored: list[str] = list(b.ignored)
    args = [str(a) for a in argv]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        why = _unsupported(arg)
        if why is not None:
            raise FlagError(f"llama-server flag {arg} is not supported here ({why})")
        if arg in IGNORED_FLAGS and arg not in _INDEX:
            n = IGNORED_FLAGS[arg]
            if i + n >= len(args) and n:
                raise FlagError(f'error while handling argument "{arg}": expected value for argument')
            ignored.append(arg)
            i += 1 + n
            continue
        if arg not in _INDEX:
            raise FlagError(f"error: invalid argument: {arg}")
        kind, handler, positive = _INDEX[arg]
        try:
            if kind == "void":
                handler(st)
            elif kind == "bool":
                handler(st, positive)
            else:
                if i + 1 >= len(args):
                    raise ValueError("expected value for argument")
                i += 1
                handler(st, args[i])
        except ValueError as err:
            msg = str(err)
            raise FlagError(f'error while handling argument "{arg}": {msg}') from err
        i += 1
    samp = st.pop("sampling")
    try:
        params = Params(**samp)
    except (TypeError, ValueError) as err:
        raise FlagError(f"invalid sampling flags: {err}") from err
    user_set = frozenset(st.pop("user_set"))
    st.pop("dry_cleared")
    st.update(sampling=params, sampling_user_set=user_set, api_key=tuple(st["api_key"]), alias=tuple(st["alias"]),
              ignored=tuple(ignored))
    return ServerArgs(**st)
