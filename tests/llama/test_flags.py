"""constrained.llama.flags: llama-server's command line (names, aliases, defaults, refusals)."""

from __future__ import annotations

import pytest

from constrained.errors import ConstrainedError
from constrained.llama.flags import FlagError, ServerArgs, known_flags, parse_server_args
from sampler import Params


def test_defaults_are_llama_servers() -> None:
    a = parse_server_args([])
    assert (a.n_ctx, a.n_batch, a.n_ubatch, a.flash_attn, a.swa_full) == (0, 2048, 512, "auto", False)
    assert (a.n_ctx_checkpoints, a.checkpoint_min_step, a.cache_prompt, a.n_parallel) == (32, 8192, True, -1)
    assert a.resolved_parallel() == (4, True)
    assert (a.host, a.port, a.jinja, a.slots, a.metrics, a.timeout) == ("127.0.0.1", 8080, True, True, False, 3600)
    assert a.sampling == Params()


def test_aliases_and_underscores() -> None:
    a = parse_server_args(["--model", "m.gguf", "--ctx_size", "1024", "--flash-attn", "enabled", "-ctxcp", "0",
                           "--swa-checkpoints", "3", "-np", "2", "-tb", "3", "--temperature", "-2",
                           "--sampler-seq", "kx", "--typical-p", "0.5", "-to", "30", "--no-webui", "--no-jinja"])
    assert (a.model, a.n_ctx, a.flash_attn, a.n_ctx_checkpoints, a.n_parallel) == ("m.gguf", 1024, "on", 3, 2)
    assert a.resolved_threads()[1] == 3
    assert a.sampling.temp == 0.0 and a.sampling.samplers == ("top_k", "xtc") and a.sampling.typ_p == 0.5
    assert (a.timeout, a.webui, a.jinja) == (30, False, False)


def test_sampling_flags_map_onto_params() -> None:
    a = parse_server_args(["--top-k", "5", "--top-p", "0.9", "--min-p", "0.1", "--repeat-penalty", "1.1",
                           "--repeat-last-n", "-1", "--presence-penalty", "0.5", "--frequency-penalty", "0.25",
                           "--dry-multiplier", "0.8", "--dry-base", "0.5", "--dry-allowed-length", "3",
                           "--dry-penalty-last-n", "32", "--dry-sequence-breaker", "x", "--dry-sequence-breaker", "y",
                           "--xtc-probability", "0.5", "--xtc-threshold", "0.2", "--mirostat", "2",
                           "--mirostat-lr", "0.2", "--mirostat-ent", "3", "--top-nsigma", "1.5",
                           "--dynatemp-range", "0.3", "--dynatemp-exp", "1.2", "--samplers", "top_k;TEMPERATURE;bogus",
                           "-s", "-1", "--ignore-eos", "-l", "15043-1", "--adaptive-target", "0.5"])
    p = a.sampling
    assert (p.top_k, p.penalty_last_n, p.dry_base, p.dry_allowed_length, p.mirostat) == (5, -1, 1.75, 3, 2)
    assert p.dry_sequence_breakers == ("x", "y") and p.samplers == ("top_k", "temperature")
    assert p.seed == 0xFFFFFFFF and p.ignore_eos and p.logit_bias == ((15043, -1.0),)
    assert p == Params(top_k=5, top_p=0.9, min_p=0.1, penalty_repeat=1.1, penalty_last_n=-1, penalty_present=0.5,
                       penalty_freq=0.25, dry_multiplier=0.8, dry_allowed_length=3, dry_penalty_last_n=32,
                       dry_sequence_breakers=("x", "y"), xtc_probability=0.5, xtc_threshold=0.2, mirostat=2,
                       mirostat_eta=0.2, mirostat_tau=3, top_n_sigma=1.5, dynatemp_range=0.3,
                       dynatemp_exponent=1.2, samplers=("top_k", "temperature"), ignore_eos=True,
                       logit_bias=((15043, -1.0),), adaptive_target=0.5)
    # the flags common_init_sampler_from_model lets win over the GGUF's general.sampling.* keys
    assert a.sampling_user_set == {"top_k", "top_p", "min_p", "penalty_repeat", "penalty_last_n", "xtc_probability",
                                   "xtc_threshold", "mirostat", "mirostat_eta", "mirostat_tau", "samplers"}
    assert parse_server_args(["--dry-sequence-breaker", "none"]).sampling.dry_sequence_breakers == ()


@pytest.mark.parametrize("argv, message", [
    (["--no-such-flag"], "error: invalid argument: --no-such-flag"),
    (["-c"], 'error while handling argument "-c": expected value for argument'),
    (["-c", "many"], 'error while handling argument "-c"'),
    (["-fa", "maybe"], "unknown value for --flash-attn: 'maybe'"),
    (["-np", "0"], "invalid value for n_parallel"),
    (["--repeat-penalty", "0"], "repeat-penalty must be finite and greater than 0"),
    (["-ctk", "q2_k"], "Unsupported cache type: q2_k"),
    (["--lora", "a.gguf"], "--lora is not supported here (LoRA adapters)"),
    (["--mmproj", "p.gguf"], "multimodal"),
    (["-md", "draft.gguf"], "speculative decoding"),
    (["--spec-draft-n-max", "4"], "speculative decoding"),
    (["-hf", "user/model"], "model downloads"),
    (["--pooling", "max"], 'error while handling argument "--pooling"'),
    (["--grammar-file", "/nonexistent/x.gbnf"], "failed to open file"),
])
def test_refusals_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=None) as ei:
        parse_server_args(argv)
    assert message in str(ei.value)
    assert isinstance(ei.value, ConstrainedError)


def test_embedding_flags() -> None:
    # common/arg.cpp: --embedding turns the embedding routes on, --rerank too with the rank pooling
    assert (parse_server_args([]).embedding, parse_server_args([]).pooling) == (False, -1)
    a = parse_server_args(["--embeddings", "--pooling", "last", "--embd-normalize", "1"])
    assert (a.embedding, a.pooling, a.embd_normalize) == (True, 3, 1)
    assert (parse_server_args(["--reranking"]).embedding, parse_server_args(["--rerank"]).pooling) == (True, 4)


def test_harmless_flags_are_recorded() -> None:
    a = parse_server_args(["-ngl", "99", "--log-disable", "--no-perf", "-lv", "3", "--numa", "distribute"])
    assert a.ignored == ("--log-disable", "--no-perf", "--numa")
    assert a.n_gpu_layers == "99"


def test_warmup_flag() -> None:
    # --warmup / --no-warmup (common/arg.cpp: params.warmup): the empty run before serving; llama-server's default
    # is on, ours off (a documented deviation: no output changes, tests/server/test_loading.py)
    assert parse_server_args([]).warmup is False
    assert parse_server_args(["--warmup"]).warmup is True
    assert parse_server_args(["--no-warmup"]).warmup is False
    assert parse_server_args(["--no-warmup", "--warmup"]).warmup is True


def test_verbosity_above_9_is_verbose() -> None:
    # params.verbose = params_base.verbosity > 9 (server-schema.cpp): -v is INT_MAX, -lv N sets it
    assert parse_server_args(["-v"]).verbose and parse_server_args(["-lv", "10"]).verbose
    assert not parse_server_args(["-v", "-lv", "9"]).verbose and not parse_server_args([]).verbose


def test_every_flag_of_the_real_llama_server_is_known() -> None:
    """Oracle: `llama-server --completion-bash` lists every flag it accepts; each one is supported, accepted as
    harmless or refused with a reason here (none falls through to "invalid argument")."""
    import os
    import re
    import subprocess

    from oracle.llama_server import llama_server_binary

    binary = llama_server_binary()
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    out = subprocess.run([str(binary), "--completion-bash"], capture_output=True, text=True, env=env,
                         timeout=60).stdout
    opts = re.search(r'opts="([^"]*)"', out)
    assert opts, out[:500]
    names = set(opts.group(1).split())
    assert len(names) > 250
    unknown = sorted(n for n in names if n not in known_flags()
                     and not n.startswith(("--spec-", "--draft", "--fim-", "--embd-", "--vision-", "--gpt-oss-")))
    assert unknown == []
    # and no name we claim to know is one llama-server does not have (--help also shows the --no- forms)
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, env=env, timeout=60).stdout
    names |= set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w.-]*)", help_text))
    assert sorted(n for n in known_flags() if n not in names) == []


def test_server_args_is_frozen() -> None:
    a = ServerArgs()
    with pytest.raises(AttributeError):
        a.port = 1  # type: ignore[misc]
    assert a.replace(port=9).port == 9


def test_cli_takes_llama_server_flags_after_double_dash(capsys) -> None:
    from constrained.cli import main

    assert main(["generate", "--prompt", "x", "--model", "/nonexistent.gguf", "--", "--no-such-flag"]) == 2
    assert "error: invalid argument: --no-such-flag" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--model", "/nonexistent.gguf", "--", "--lora", "a"]) == 2
    assert "--lora is not supported" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--model", "/nonexistent.gguf", "--", "-fa", "off"]) == 3
