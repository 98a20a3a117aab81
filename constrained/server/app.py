"""The HTTP layer: llama-server's routes on Starlette, bodies written by :mod:`.jsonout`.

Middleware order as server-http.cpp: CORS (the request's ``Origin`` echoed), ``OPTIONS`` answered at once, 503
while the model loads, then the API key (``Authorization: Bearer`` or ``X-Api-Key``; ``/health`` is public).
Every response carries ``Server: llama.cpp``. Errors are llama-server's (``{"error": {"code", "message",
"type"}}``; a malformed JSON body is 500 with nlohmann's parse-error text).

The completion routes' common path is :mod:`.completions`; the settings and shared state :mod:`.state`; request
and response bodies :mod:`.bodies`.

Example:
    >>> app = build_app(ServerState.load(ServerConfig(EngineConfig(model_path="model.gguf"))))   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..chat import ChatTemplates
from .anthropic_api import AnthropicShape, anthropic_to_chat
from .bodies import error_response, json_response, read_body, read_raw, too_large_response
from .chat_api import chat_params, parser_for
from .completions import run_completion
from .embeddings_api import embeddings_handler, rerank_handler
from .errors import HttpError, middleware_error
from .jsonout import SSE_HEADERS
from .responses_api import ResponsesShape, responses_to_chat
from .results import gen_id
from .slot_actions import SlotAction, parse_slot_id, valid_filename
from .state import ServerState
from .streams import stoull
from .task import TaskParams
from .work import HEAVY_BYTES, offload

__all__ = ["ServerState", "build_app"]

#: the routes llama-server answers without waking a sleeping server (``create_response(true)``)
NO_WAKE = {"/health", "/v1/health", "/metrics", "/models", "/v1/models"}


def _no_wake(request: Request) -> bool:
    p = request.url.path
    return p in NO_WAKE or (p == "/props" and request.method == "GET")


def build_app(state: ServerState) -> Starlette:
    """The Starlette application serving llama-server's API for ``state``."""
    cfg = state.cfg
    eng = state.engine

    def log(msg: str) -> None:
        if cfg.log_requests:
            print(msg, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ simple endpoints
    async def health(request: Request) -> Response:
        if not eng.alive():                   # the model thread ended: not healthy, whatever else still answers
            return error_response(HttpError(f"the model thread stopped: {eng.fatal}", "unavailable_error"))
        return json_response({"status": "ok"})

    async def models(request: Request) -> Response:
        name = state.model_name
        aliases = sorted(set(cfg.alias)) if cfg.alias else [name]
        return json_response({
            "models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model",
                        "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
                        "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                    "parameter_size": "", "quantization_level": ""}}],
            "object": "list",
            "data": [{"id": name, "aliases": aliases, "tags": sorted(set(cfg.tags)), "object": "model",
                      "created": int(time.time()), "owned_by": "llamacpp", "meta": state.meta}],
        })

    async def props(request: Request) -> Response:
        if request.method == "POST":
            if not cfg.endpoint_props:
                return error_response(HttpError("This server does not support changing global properties. Start it with "
                                      "`--props`", "not_supported_error"))
            return json_response({"success": True})
        base = TaskParams(sampling=eng.cfg.sampling, n_predict=eng.cfg.n_predict, n_keep=eng.cfg.n_keep)
        base.reasoning_format = "none"
        t = state.templates
        out = {
            "default_generation_settings": {"params": base.to_json(only_metrics=True), "n_ctx": eng.n_ctx_slot},
            "total_slots": eng.n_parallel, "model_alias": state.model_name, "model_ftype": state.model_ftype,
            "model_path": eng.cfg.model_path, "modalities": {"vision": False, "video": False, "audio": False},
            "media_marker": _MEDIA_MARKER, "endpoint_slots": cfg.endpoint_slots,
            "endpoint_props": cfg.endpoint_props, "endpoint_metrics": cfg.endpoint_metrics, "ui": cfg.ui,
            "ui_settings": {}, "chat_template": t.source, "chat_template_caps": _caps(t),
            "bos_token": t.bos_token, "eos_token": t.eos_token, "build_info": cfg.build_info, "is_sleeping": eng.sleeping,
            "cors_proxy_enabled": False,
        }
        if cfg.jinja and t.tool_use:
            out["chat_template_tool_use"] = t.tool_use
        return json_response(out)

    async def slots(request: Request) -> Response:
        if not cfg.endpoint_slots:
            return error_response(HttpError("This server does not support slots endpoint. Start it with `--slots`",
                                  "not_supported_error"))
        arr = []
        n_idle = 0
        for s in eng.slots:
            busy = s.state != "idle"
            n_idle += not busy
            d: dict[str, Any] = {"id": s.id, "n_ctx": s.n_ctx, "speculative": False, "is_processing": busy}
            task = s.task or s.task_prev
            if task is not None:          # server_slot::to_json(only_metrics = true)
                d.update({"id_task": task.id, "n_prompt_tokens": len(s.tokens),
                          "n_prompt_tokens_processed": s.n_processed if busy else 0,
                          "n_prompt_tokens_cache": s.n_cached if busy else 0,
                          "params": task.params.to_json(state.eog_bias(), only_metrics=True),
                          "next_token": [{"has_next_token": busy, "has_new_line": s.has_new_line if busy else False,
                                          "n_remain": (task.params.n_predict - s.n_decoded
                                                       if busy and task.params.n_predict != -1 else -1),
                                          "n_decoded": s.n_decoded if busy else 0}]})
            arr.append(d)
        if request.query_params.get("fail_on_no_slot") and n_idle == 0:
            return error_response(HttpError("no slot available", "unavailable_error"))
        return json_response(arr)

    scrape_window: dict[str, float] = {}

    async def metrics(request: Request) -> Response:
        if not cfg.endpoint_metrics:
            return error_response(HttpError("This server does not support metrics endpoint. Start it with `--metrics`",
                                  "not_supported_error"))
        m = dict(eng.metrics)
        # the rate gauges cover the window since the previous scrape (server_metrics::reset_bucket)
        last = scrape_window
        d_pt, d_ps = m["prompt_tokens_total"] - last.get("pt", 0), m["prompt_seconds_total"] - last.get("ps", 0.0)
        d_gs = m.get("tokens_predicted_steps_total", 0) - last.get("gs", 0)
        d_gt = m["tokens_predicted_seconds_total"] - last.get("gt", 0.0)
        scrape_window.update(pt=m["prompt_tokens_total"], ps=m["prompt_seconds_total"],
                             gs=m.get("tokens_predicted_steps_total", 0), gt=m["tokens_predicted_seconds_total"])
        rows = [
            ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens",
             m["prompt_tokens_total"]),
            ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache",
             m["prompt_tokens_cached_total"]),
            ("prompt_seconds_total", "counter", "Total time spent processing prompts", m["prompt_seconds_total"]),
            ("tokens_predicted_total", "counter", "Number of generation tokens processed",
             m["tokens_predicted_total"]),
            ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens",
             m["tokens_predicted_seconds_total"]),
            ("n_decode_total", "counter", "Total number of llama_decode() calls, excluding speculative decoding "
             "and multimodal decoding", m["n_decode_total"]),
            ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)",
             m["n_tokens_max"]),
            # no speculative decoding here: the counters stay 0
            ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated", 0),
            ("spec_decode_num_accepted_tokens_total", "counter",
             "Speculative: Total draft tokens accepted by the target model", 0),
            ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps",
             0),
            ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s",
             d_pt / d_ps if d_ps > 0 else 0.0),
            ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s",
             d_gs / d_gt if d_gt > 0 else 0.0),
            ("requests_processing", "gauge", "Number of requests processing", m["requests_processing"]),
            ("requests_deferred", "gauge", "Number of requests deferred", m["requests_deferred"]),
            ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call",
             m.get("n_busy_slots_total", 0) / max(m["n_decode_total"], 1)),
        ]
        text = "".join(f"# HELP llamacpp:{n} {h}\n# TYPE llamacpp:{n} {t}\nllamacpp:{n} {v:g}\n"
                       for n, t, h, v in rows)
        resp = Response(text.encode(), headers={"Content-Type": "text/plain; version=0.0.4"})     # no charset
        # the header's name cased as llama-server sends it (clients reading a plain dict look it up so)
        resp.raw_headers.append((b"Process-Start-Time-Unix", str(state.t_start).encode()))
        return resp

    async def tokenize(request: Request) -> Response:
        data = await read_body(request, cfg.max_body)
        out: list[Any] = []
        if isinstance(data, dict) and "content" in data:
            add_special = data.get("add_special") is True
            parse_special = data.get("parse_special", True) is not False
            with_pieces = data.get("with_pieces") is True
            content = data["content"]
            if isinstance(content, str) and len(content) >= HEAVY_BYTES:
                toks = await offload(eng.tokenize, content, add_special, parse_special)
            elif isinstance(content, str):
                toks = eng.tokenize(content, add_special, parse_special)
            elif isinstance(content, list):
                toks = []
                first = True
                for x in content:
                    toks += eng.tokenize(x, add_special and first, parse_special) if isinstance(x, str) else [int(x)]
                    first = False
            else:
                toks = []
            if with_pieces:
                for t in toks:
                    piece = eng.piece(t, True) if 0 <= t < eng.n_vocab else b""
                    try:
                        pv: Any = piece.decode("utf-8")
                    except UnicodeDecodeError:
                        pv = list(piece)
                    out.append({"id": t, "piece": pv})
            else:
                out = toks
        return json_response({"tokens": out})

    async def detokenize(request: Request) -> Response:
        data = await read_body(request, cfg.max_body)
        content = ""
        if isinstance(data, dict) and "tokens" in data:
            toks = [int(t) for t in data["tokens"] if isinstance(t, int) and 0 <= t < eng.n_vocab]
            content = eng.detokenize(toks, True).decode("utf-8", "replace")
        return json_response({"content": content})

    async def chat_body(request: Request) -> dict[str, Any]:
        # oaicompat_chat_params_parse on the request body: the prompt and the completion fields of a chat request
        return await chat_of(request, await read_body(request, cfg.max_body))

    async def chat_of(request: Request, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):            # body.contains("messages") is false for any non-object
            raise HttpError("'messages' is required", "invalid_request_error")
        msgs = data.get("messages")
        if isinstance(msgs, list) and cfg.max_messages > 0 and len(msgs) > cfg.max_messages:
            raise HttpError(f"too many messages: {len(msgs)} (the limit is {cfg.max_messages}, --max-messages)",
                            "invalid_request_error")
        heavy = len(getattr(request, "_body", b"")) >= HEAVY_BYTES or bool(data.get("tools"))
        return await offload(chat_params, dict(data), state.templates, heavy=heavy, jinja=cfg.jinja,
                             prefill_assistant=cfg.prefill_assistant, chat_template_kwargs=cfg.chat_template_kwargs,
                             reasoning_format=cfg.reasoning_format,
                             reasoning_budget=cfg.reasoning_budget,
                             reasoning_budget_message=cfg.reasoning_budget_message)

    async def apply_template(request: Request) -> Response:
        return json_response({"prompt": (await chat_body(request))["prompt"]})

    # ------------------------------------------------------------------ completions
    async def completion(request: Request) -> Response:
        return await run_completion(state, request, await read_body(request, cfg.max_body), "completion", None, log)

    async def completions_oai(request: Request) -> Response:
        return await run_completion(state, request, await read_body(request, cfg.max_body), "oai_cmpl", None, log)

    async def chat_completions(request: Request) -> Response:
        body = await chat_body(request)
        return await run_completion(state, request, body, "chat", parser_for(body), log)

    async def chat_input_tokens(request: Request) -> Response:
        # handle_count_tokens (OAI chat): the prompt's token count, tokenize_mixed with special tokens
        prompt = (await chat_body(request))["prompt"]
        n = len(await offload(eng.tokenize_prompt, prompt, heavy=len(prompt) >= HEAVY_BYTES))
        return json_response({"input_tokens": n, "object": "response.input_tokens"})

    # Anthropic Messages and OpenAI Responses: converted to a chat body, answered in their own shapes
    async def converted_body(request: Request, convert: Any) -> dict[str, Any]:
        return await chat_of(request, convert(await read_body(request, cfg.max_body)))

    async def anthropic_messages(request: Request) -> Response:
        body = await converted_body(request, anthropic_to_chat)
        return await run_completion(state, request, body, "chat", parser_for(body), log, shape=AnthropicShape())

    async def anthropic_count_tokens(request: Request) -> Response:
        prompt = (await converted_body(request, anthropic_to_chat))["prompt"]
        n = len(await offload(eng.tokenize_prompt, prompt, heavy=len(prompt) >= HEAVY_BYTES))
        return json_response({"input_tokens": n})

    async def responses(request: Request) -> Response:
        body = await converted_body(request, responses_to_chat)
        return await run_completion(state, request, body, "chat", parser_for(body), log, shape=ResponsesShape())

    async def responses_input_tokens(request: Request) -> Response:
        prompt = (await converted_body(request, responses_to_chat))["prompt"]
        n = len(await offload(eng.tokenize_prompt, prompt, heavy=len(prompt) >= HEAVY_BYTES))
        return json_response({"input_tokens": n, "object": "response.input_tokens"})

    async def chat_control(request: Request) -> Response:
        # post_control (server-context.cpp:4931-4966): {"id": <chatcmpl id>, "action": "reasoning_end"}
        import asyncio

        data = await read_body(request, cfg.max_body)
        body = data if isinstance(data, dict) else {}
        cmpl_id = body.get("id") if isinstance(body.get("id"), str) else ""
        action = body.get("action") if isinstance(body.get("action"), str) else ""
        if not cmpl_id:
            raise HttpError("missing completion id", "invalid_request_error")
        if action != "reasoning_end":
            raise HttpError("unknown control action", "invalid_request_error")
        return json_response(await asyncio.to_thread(eng.control, cmpl_id, action))

    async def slot_action(request: Request) -> Response:
        # post_slots + handle_slots_save / _restore / _erase
        if not cfg.slot_save_path:
            raise HttpError("This server does not support slots action. Start it with `--slot-save-path`",
                            "not_supported_error")
        id_slot = parse_slot_id(request.path_params["id_slot"])
        if id_slot is None:
            raise HttpError("Invalid slot ID", "invalid_request_error")
        kind = request.query_params.get("action", "")
        if kind not in ("save", "restore", "erase"):
            raise HttpError("Invalid action", "invalid_request_error")
        filename = ""
        if kind != "erase":
            data = await read_body(request, cfg.max_body)
            filename = _at_string(data, "filename")
            if not valid_filename(filename):
                raise HttpError("Invalid filename", "invalid_request_error")
        import asyncio

        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def emit(ev: Any) -> None:
            def put() -> None:
                if not fut.done():
                    fut.set_result(ev)
            try:
                loop.call_soon_threadsafe(put)
            except RuntimeError:          # the loop is closed (shutdown)
                pass

        act = SlotAction(kind, id_slot, emit, filename, cfg.slot_save_path + filename)
        eng.submit([act])                 # type: ignore[list-item]
        try:
            res = await fut
        finally:
            act.cancel()
        if isinstance(res, HttpError):
            raise res
        return json_response(res)

    embd_plain = embeddings_handler(state, False)
    rerank = rerank_handler(state)

    async def infill(request: Request) -> Response:
        # post_infill's model check; with the three FIM tokens present we still refuse (infill is not served)
        from llama_cpp import llama_cpp as L

        v = eng.vocab_ptr
        err = ""
        if L.llama_vocab_fim_pre(v) == -1:
            err += "prefix token is missing. "
        if L.llama_vocab_fim_suf(v) == -1:
            err += "suffix token is missing. "
        if L.llama_vocab_fim_mid(v) == -1:
            err += "middle token is missing. "
        raise HttpError(f"Infill is not supported by this model: {err}" if err else
                        "Infill is not supported by constrained serve", "not_supported_error")

    async def lora_adapters(request: Request) -> Response:
        # no LoRA adapters are loaded (--lora is refused): GET lists none, POST sets the scales of none
        if request.method in ("GET", "HEAD"):
            return json_response([])
        data = await read_body(request, cfg.max_body)
        if not isinstance(data, list):
            raise HttpError("Request body must be an array", "invalid_request_error")
        return json_response({"success": True})

    async def feature_disabled(request: Request) -> Response:
        # server.cpp res_403: /cors-proxy and /tools without --ui-mcp-proxy / --tools
        return json_response({"error": {"message": "this feature is disabled", "type": "feature_disabled"}}, 403)

    # ------------------------------------------------------------------ resumable streams (server-stream.cpp)
    async def stream_get(request: Request) -> Response:
        conv = request.query_params.get("conv_id", "")
        if not conv:
            raise HttpError("Missing conversation id in path", "invalid_request_error")
        session = state.streams.get(conv)
        if session is None:          # "Stream not found or expired", rewritten by httplib's 404 handler
            return json_response(middleware_error("File Not Found", "not_found_error", 404), 404)
        start = 0
        raw_from = request.query_params.get("from", "")
        if raw_from:
            try:
                start = stoull(raw_from)
            except ValueError:
                raise HttpError("Invalid 'from' offset", "invalid_request_error") from None
        if start < session.dropped:
            raise HttpError("Stream offset lost, please restart", "invalid_request_error")

        async def replay() -> Any:
            async for chunk in session.read(start):
                yield chunk
        return StreamingResponse(replay(), headers=SSE_HEADERS)

    async def streams_lookup(request: Request) -> Response:
        raw_body = await read_raw(request, cfg.max_body)
        try:
            body = json.loads(raw_body)
        except ValueError as e:
            return json_response({"error": {"message": f"invalid body: {e}", "type": "invalid_request_error"}}, 400)
        ids = []
        if isinstance(body, dict) and isinstance(body.get("conversation_ids"), list):
            ids = [v for v in body["conversation_ids"] if isinstance(v, str) and v]
        return json_response(state.streams.lookup(ids))

    async def stream_delete(request: Request) -> Response:
        conv = request.query_params.get("conv_id", "")
        if not conv:
            raise HttpError("Missing conversation id in path", "invalid_request_error")
        if not state.streams.evict_and_cancel(conv):
            log(f"stop on unknown stream session, conv_id={conv} matched nothing")
        return Response(b"", status_code=204, media_type="application/json")

    def wrap(fn: Any) -> Any:
        async def handler(request: Request) -> Response:
            try:
                if eng.sleeping and not _no_wake(request):   # create_response(): wake the model first
                    await asyncio.to_thread(eng.wait_until_no_sleep)
                return await fn(request)
            except HttpError as e:
                if e.status == 413:
                    log(f"request {request.url.path} -> 413 (body larger than {cfg.max_body} bytes)")
                    return too_large_response()
                log(f"request {request.url.path} -> {e.status} ({e.message[:80]})")
                return error_response(e)
            except Exception as e:  # noqa: BLE001 - ex_wrapper: any other failure is a 500 server_error
                log(f"request {request.url.path} -> 500 ({type(e).__name__}: {e})")
                return error_response(HttpError(str(e), "server_error"))
        return handler

    routes = [
        Route("/health", wrap(health), methods=["GET"]), Route("/v1/health", wrap(health), methods=["GET"]),
        Route("/v1/models", wrap(models), methods=["GET"]), Route("/models", wrap(models), methods=["GET"]),
        Route("/props", wrap(props), methods=["GET", "POST"]), Route("/slots", wrap(slots), methods=["GET"]),
        Route("/metrics", wrap(metrics), methods=["GET"]),
        Route("/completion", wrap(completion), methods=["POST"]), Route("/completions", wrap(completion), methods=["POST"]),
        Route("/v1/completions", wrap(completions_oai), methods=["POST"]),
        Route("/v1/chat/completions", wrap(chat_completions), methods=["POST"]),
        Route("/chat/completions", wrap(chat_completions), methods=["POST"]),
        Route("/tokenize", wrap(tokenize), methods=["POST"]), Route("/detokenize", wrap(detokenize), methods=["POST"]),
        Route("/apply-template", wrap(apply_template), methods=["POST"]),
        Route("/v1/chat/completions/input_tokens", wrap(chat_input_tokens), methods=["POST"]),
        Route("/v1/chat/completions/control", wrap(chat_control), methods=["POST"]),
        Route("/chat/completions/input_tokens", wrap(chat_input_tokens), methods=["POST"]),
        Route("/v1/messages", wrap(anthropic_messages), methods=["POST"]),
        Route("/v1/messages/count_tokens", wrap(anthropic_count_tokens), methods=["POST"]),
        Route("/v1/responses", wrap(responses), methods=["POST"]), Route("/responses", wrap(responses), methods=["POST"]),
        Route("/v1/responses/input_tokens", wrap(responses_input_tokens), methods=["POST"]),
        Route("/v1/stream", wrap(stream_get), methods=["GET"]),
        Route("/v1/stream", wrap(stream_delete), methods=["DELETE"]),
        Route("/v1/streams/lookup", wrap(streams_lookup), methods=["POST"]),
        # embeddings and reranking (llama-server's 501 without --embeddings / --reranking)
        Route("/embedding", wrap(embd_plain), methods=["POST"]), Route("/embeddings", wrap(embd_plain), methods=["POST"]),
        Route("/v1/embeddings", wrap(embeddings_handler(state, True)), methods=["POST"]),
        *[Route(p, wrap(rerank), methods=["POST"]) for p in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking")],
        Route("/slots/{id_slot}", wrap(slot_action), methods=["POST"]),
        Route("/infill", wrap(infill), methods=["POST"]),
        Route("/lora-adapters", wrap(lora_adapters), methods=["GET", "POST"]),
        Route("/cors-proxy", wrap(feature_disabled), methods=["GET", "POST"]),
        Route("/tools", wrap(feature_disabled), methods=["GET", "POST"]),
    ]
    inner = Starlette(routes=routes)
    from .gcp_api import gcp_enabled, gcp_routes, predict_handler

    if gcp_enabled():                      # Vertex AI: AIP_MODE=PREDICTION adds the predict route (and a health alias)
        predict, health_alias = gcp_routes()
        posts = [r.path for r in routes if "POST" in (r.methods or ())]
        inner.router.routes.append(Route(predict, wrap(predict_handler(inner, posts)), methods=["POST"]))
        if health_alias:
            inner.router.routes.append(Route(health_alias, wrap(health), methods=["GET"]))
    paths = {r.path for r in inner.router.routes}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        extra = [(b"Server", b"llama.cpp")]
        origin = headers.get("origin", "")
        if cfg.cors_origins == "*":
            extra.append((b"Access-Control-Allow-Origin", origin.encode("latin-1")))
        elif cfg.cors_origins == "localhost":
            if origin and _is_localhost(origin):
                extra.append((b"Access-Control-Allow-Origin", origin.encode("latin-1")))
        else:
            extra.append((b"Access-Control-Allow-Origin", cfg.cors_origins.encode("latin-1")))

        async def send_h(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                msg = dict(msg)
                msg["headers"] = list(msg.get("headers", [])) + extra
            await send(msg)

        path = scope["path"]
        method = scope["method"]
        if method == "OPTIONS":
            extra += [(b"Access-Control-Allow-Credentials", b"true"),
                      (b"Access-Control-Allow-Methods", b"GET, POST, DELETE, OPTIONS"),
                      (b"Access-Control-Allow-Headers", b"*")]
            await Response(b"", media_type="text/html")(scope, receive, send_h)
            return
        if not state.ready:
            await json_response(middleware_error("Loading model", "unavailable_error", 503), 503)(scope, receive, send_h)
            return
        if cfg.api_keys and path not in ("/health", "/v1/health"):
            key = headers.get("authorization", "") or headers.get("x-api-key", "")
            if key.startswith("Bearer "):
                key = key[len("Bearer "):]
            if key not in cfg.api_keys:
                log(f"request {path} -> 401 (invalid API key)")
                await json_response(middleware_error("Invalid API Key", "authentication_error", 401), 401)(
                    scope, receive, send_h)
                return
        if path not in paths and not (path.startswith("/slots/") and path[7:] and "/" not in path[7:]):
            await json_response(middleware_error("File Not Found", "not_found_error", 404), 404)(scope, receive, send_h)
            return
        await inner(scope, receive, send_h)

    return app  # type: ignore[return-value]


def _is_localhost(origin: str) -> bool:
    from urllib.parse import urlparse

    host = urlparse(origin).hostname or ""
    return host in ("localhost", "127.0.0.1", "::1") or host.endswith(".localhost")


_MEDIA_MARKER = "<__media_" + gen_id("")[:32] + "__>"


def _caps(t: ChatTemplates) -> dict[str, bool]:
    # common_chat_templates_get_caps: the tool_use template's caps when the model has one (caps.cpp's probe)
    from ..chat.caps import template_caps

    return template_caps(t.tool_use or t.source)


def _at_string(data: Any, key: str) -> str:
    """``std::string v = data.at(key)`` as nlohmann throws it (each a 500 ``server_error`` in llama-server)."""
    def name(v: Any) -> str:
        return ("null" if v is None else "boolean" if isinstance(v, bool) else "number"
                if isinstance(v, (int, float)) else "string" if isinstance(v, str) else "array"
                if isinstance(v, list) else "object")
    if not isinstance(data, dict):
        raise HttpError(f"[json.exception.type_error.304] cannot use at() with {name(data)}", "server_error")
    if key not in data:
        raise HttpError(f"[json.exception.out_of_range.403] key '{key}' not found", "server_error")
    v = data[key]
    if not isinstance(v, str):
        raise HttpError(f"[json.exception.type_error.302] type must be string, but is {name(v)}", "server_error")
    return v
