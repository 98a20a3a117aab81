"""``constrained serve [llama-server flags]`` / ``python -m constrained.server``: start the server.

The flags are llama-server's (:func:`constrained.llama.flags.parse_server_args`); without ``-m`` the default model is
served. A progress line is printed while the model loads, then one line per request.

Example:
    $ constrained serve -m model.gguf --port 8080 -np 2 --jinja
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConstrainedError, FlagError
from ..llama.flags import ServerArgs, parse_server_args

if TYPE_CHECKING:
    from .loading import EngineConfig
    from .state import ServerConfig

__all__ = ["config_from_args", "engine_config_from_args", "freeze_loaded_heap", "main", "model_path_from_args", "serve"]


def model_path_from_args(a: ServerArgs) -> str:
    """The GGUF to serve: ``-m``, else the default model."""
    if a.model:
        return a.model
    from ..llama.model import default_model_path

    return str(default_model_path())


def engine_config_from_args(a: ServerArgs, model: str | None = None) -> EngineConfig:
    """The model and context settings for a parsed command line (``model``: :func:`model_path_from_args`,
    found here when not given)."""
    from sampler import Params

    from ..vocab.gguf_meta import sampling_metadata
    from .loading import EngineConfig

    model = model or model_path_from_args(a)
    sampling = Params.from_gguf(sampling_metadata(model), base=a.sampling, user_set=a.sampling_user_set)
    n_par, unified = a.resolved_parallel()
    nt, ntb = a.resolved_threads()
    # server.cpp: embeddings need every token in one ubatch, so n_batch is cut to n_ubatch
    n_batch = a.n_ubatch if a.embedding and a.n_batch > a.n_ubatch else a.n_batch
    return EngineConfig(model_path=model, n_ctx=a.n_ctx, n_parallel=n_par, n_batch=n_batch, n_ubatch=a.n_ubatch,
                        flash_attn=a.flash_attn, swa_full=a.swa_full, ctx_checkpoints=a.n_ctx_checkpoints,
                        n_threads=nt, n_threads_batch=ntb, kv_unified=unified, n_predict=a.n_predict,
                        sampling=sampling, slot_prompt_similarity=a.slot_prompt_similarity,
                        cache_prompt=a.cache_prompt, checkpoint_min_step=a.checkpoint_min_step,
                        cache_ram_mib=a.cache_ram_mib, cache_idle_slots=a.cache_idle_slots, warmup=a.warmup,
                        ctx_shift=a.ctx_shift, n_keep=a.n_keep, debug=a.verbose,
                        sleep_idle_seconds=a.sleep_idle_seconds, embedding=a.embedding, pooling=a.pooling,
                        embd_normalize=a.embd_normalize)


def config_from_args(a: ServerArgs, engine: EngineConfig | None = None) -> ServerConfig:
    """The engine and server settings for a parsed command line (``engine``: from :func:`engine_config_from_args`,
    computed here when not given)."""
    from .state import ServerConfig

    eng = engine if engine is not None else engine_config_from_args(a)
    tmpl = a.chat_template
    if a.chat_template_file:
        p = Path(a.chat_template_file)
        if not p.is_file():
            raise FlagError(f"error: failed to open file '{a.chat_template_file}'")
        tmpl = p.read_text(encoding="utf-8")
    kwargs = dict(a.chat_template_kwargs)
    if a.reasoning in ("on", "off"):            # --reasoning on|off: enable_thinking for every template
        kwargs["enable_thinking"] = a.reasoning == "on"
    return ServerConfig(engine=eng, alias=list(a.alias), api_keys=list(a.api_key), jinja=a.jinja,
                        chat_template=tmpl, chat_template_kwargs=kwargs,
                        endpoint_slots=a.slots, endpoint_metrics=a.metrics, endpoint_props=a.props, ui=a.webui,
                        cors_origins=a.cors_origins, prefill_assistant=a.prefill_assistant,
                        verbose=a.verbose, reasoning_format=a.reasoning_format,
                        reasoning_budget=a.reasoning_budget, reasoning_budget_message=a.reasoning_budget_message,
                        slot_save_path=a.slot_save_path)


def freeze_loaded_heap() -> None:
    """Collect once, then move every object alive after loading (model wrappers, vocabulary tables, compiled
    grammars and templates, the app) to the collector's permanent generation (``gc.freeze``): a generation-2
    collection no longer walks them, so it stops costing 20-110 ms wherever it lands in a request. Objects made
    later are collected as before."""
    import gc

    gc.collect()
    gc.freeze()


def serve(argv: Sequence[str]) -> int:
    """Parse ``argv``, load the model, serve until interrupted. Returns the exit code."""
    argv = list(argv)
    tags: list[str] = []
    for i, x in enumerate(argv):               # --tags: only the server uses it (model metadata in /models)
        if x == "--tags" and i + 1 < len(argv):
            tags = [t for t in argv[i + 1].split(",") if t]
    try:
        argv, limits = split_limit_flags(argv)
        a = parse_server_args(argv)
        model_path = model_path_from_args(a)
        if not os.path.isfile(model_path):
            engine_config_from_args(a, model_path)    # the settings reader's own error for a file it cannot read
    except (FlagError, ConstrainedError, ValueError) as e:
        print(f"constrained serve: {e}", file=sys.stderr)
        return 2

    def progress(msg: str) -> None:
        print(f"constrained serve: {msg}", file=sys.stderr, flush=True)

    # the model, its context and llama-server's warm-up run load on a thread (C calls without the GIL) while the
    # rest of the settings are read and the server's Python code is imported below; the vocabulary reader starts
    # as soon as the model is there
    from .loading import ModelLoad, VocabLoad

    vocab_load = VocabLoad(model_path)
    try:
        load = ModelLoad(model_path, progress, on_model=vocab_load.start).start()
    except ConstrainedError as e:
        print(f"constrained serve: {e}", file=sys.stderr)
        return 3
    try:
        eng_cfg = engine_config_from_args(a, model_path)
        load.configure(eng_cfg)
        cfg = config_from_args(a, eng_cfg)
        cfg.tags = tags
        for k, v in limits.items():
            setattr(cfg, k, v)
    except (FlagError, ConstrainedError, ValueError) as e:
        print(f"constrained serve: {e}", file=sys.stderr)
        return 2
    try:
        import uvicorn
    except ImportError:
        print("constrained serve needs the server extra: pip install 'constrained[server]'", file=sys.stderr)
        return 2
    from .app import build_app
    from .state import ServerState

    try:
        state = ServerState.load(cfg, progress, load=load, vocab_load=vocab_load)
    except ConstrainedError as e:
        print(f"constrained serve: {e}", file=sys.stderr)
        return 3
    app = build_app(state)
    freeze_loaded_heap()
    hosts = [h for h in a.host.split(",") if h]
    from .gcp_api import gcp_port

    port = gcp_port(a.port)               # AIP_MODE=PREDICTION: AIP_HTTP_PORT wins (server-http.cpp:117-125)
    progress(f"listening on http://{hosts[0]}:{port}")
    if len(hosts) == 1:
        # SIGTERM / SIGINT: stop accepting, give in-flight requests GRACE_S seconds, then cancel them
        uvicorn.run(app, host=hosts[0], port=port, log_level="warning", access_log=False,
                    timeout_keep_alive=a.timeout, server_header=False, date_header=True,
                    timeout_graceful_shutdown=GRACE_S)
    else:
        import asyncio
        import socket

        socks = []
        for h in hosts:
            fam = socket.AF_INET6 if ":" in h else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((h, port))
            socks.append(s)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                                               timeout_graceful_shutdown=GRACE_S))
        asyncio.run(server.serve(sockets=socks))
    state.engine.stop()
    return 0


#: seconds in-flight requests get to finish after SIGTERM before they are cancelled
GRACE_S = 2

# our flags (llama-server has no such limits): flag -> (ServerConfig field, minimum)
LIMIT_FLAGS = {"--max-body-size": ("max_body", 0), "--max-messages": ("max_messages", 0),
               "--max-dry-breakers": ("max_dry_breakers", 0)}


def split_limit_flags(argv: list[str]) -> tuple[list[str], dict[str, int]]:
    """``argv`` without our limit flags (``--max-body-size BYTES``, ``--max-messages N``, ``--max-dry-breakers N``;
    0 turns a limit off), and their values by :class:`ServerConfig` field.

    Example:
        >>> split_limit_flags(["-np", "2", "--max-body-size", "1000"])
        (['-np', '2'], {'max_body': 1000})
    """
    out: list[str] = []
    vals: dict[str, int] = {}
    i = 0
    while i < len(argv):
        x = argv[i]
        name, _, inline = x.partition("=")
        if name in LIMIT_FLAGS:
            if inline:
                raw = inline
            elif i + 1 < len(argv):
                i += 1
                raw = argv[i]
            else:
                raise FlagError(f"error: {name} expects a value")
            try:
                v = int(raw)
            except ValueError:
                raise FlagError(f"error: {name} expects an integer, got '{raw}'") from None
            field, lo = LIMIT_FLAGS[name]
            if v < lo:
                raise FlagError(f"error: {name} must be >= {lo}")
            vals[field] = v
        else:
            out.append(x)
        i += 1
    return out, vals


def main(argv: Sequence[str] | None = None) -> int:
    return serve(sys.argv[1:] if argv is None else argv)
