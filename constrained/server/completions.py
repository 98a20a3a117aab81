"""The completion routes' common path: a request's prompts become engine tasks, and their results become
llama-server's bodies (``/completion``, ``/v1/completions``, ``/v1/chat/completions``), whole or streamed as SSE
with pings, ``[DONE]`` on the OpenAI routes, and the client's disconnect cancelling its tasks.

Example:
    >>> import asyncio; asyncio.iscoroutinefunction(run_completion)
    True
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from sampler.request import json_type_name

from ..chat.reply_parsers import ContentParser, message_json
from .batch import user_message_starts
from .bodies import error_response, json_response
from .errors import HttpError
from .jsonout import DONE, PING, SSE_HEADERS, sse
from .results import (
    chat_final,
    chat_partial,
    chat_stream_final,
    completion_final,
    completion_partial,
    gen_id,
    oai_cmpl_final,
    oai_cmpl_partial,
)
from .slots import Final, Partial, Task
from .state import ServerState
from .streams import StreamSession
from .task import prompt_inputs
from .work import HEAVY_BYTES, offload

__all__ = ["run_completion", "watch_disconnect"]


async def run_completion(state: ServerState, request: Request, data: dict[str, Any], kind: str,
                         parser_factory: Any = None, log: Callable[[str], None] = print,
                         shape: Any = None) -> Response:
    """:func:`_run_completion` with its resumable stream (``set_req``): with an ``X-Conversation-Id`` header the
    request gets a session under that id (:mod:`.streams`), kept only if the answer is a stream."""
    conv = request.headers.get("x-conversation-id", "")
    session = state.streams.create_or_replace(conv) if conv else None
    try:
        resp = await _run_completion(state, request, data, kind, parser_factory, log, shape, session)
    except BaseException:
        if session is not None:
            state.streams.evict(conv, session)
        raise
    if session is not None and not getattr(resp, "teed", False):
        state.streams.evict(conv, session)      # on_complete without a stream: nothing left behind
    return resp


async def _run_completion(state: ServerState, request: Request, data: dict[str, Any], kind: str,
                          parser_factory: Any, log: Callable[[str], None], shape: Any,
                          session: StreamSession | None) -> Response:
    """One completion request (``handle_completions_impl``): its tasks (one per prompt, with the ``n > 1``
    children) queued on the engine, then the whole body, or the SSE stream of partial results; a client that goes
    away cancels its tasks. ``kind``: ``"completion"`` (``/completion``), ``"oai_cmpl"`` (``/v1/completions``) or
    ``"chat"`` (``/v1/chat/completions``, ``parser_factory`` giving the reply's parser). ``shape``: for a chat
    request, the other API its results are written in (``/v1/messages``, ``/v1/responses``: an object with
    ``final``, ``partial``, ``stream_final``, ``stream_error`` and ``done``, see :mod:`.anthropic_api`)."""
    cfg = state.cfg
    eng = state.engine
    t0 = time.perf_counter()
    if not isinstance(data, dict):          # data.at("prompt") on a non-object (nlohmann's type name)
        raise HttpError(f"[json.exception.type_error.304] cannot use at() with {json_type_name(data)}",
                        "invalid_request_error")
    chat = kind == "chat"
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[Any] = asyncio.Queue()

    def emit(ev: Any) -> None:
        try:
            loop.call_soon_threadsafe(q.put_nowait, ev)
        except RuntimeError:              # the loop is closed (shutdown): nobody is waiting any more
            pass

    def build() -> tuple[list[Task], Any]:
        # tokenization, the sampling parameters, json_schema -> grammar: per-request CPU work, off the loop when big
        try:
            if "prompt" not in data:
                raise ValueError("[json.exception.out_of_range.403] key 'prompt' not found")
            inputs = prompt_inputs(data["prompt"])
            br = data.get("dry_sequence_breakers")
            if isinstance(br, list) and cfg.max_dry_breakers > 0 and len(br) > cfg.max_dry_breakers:
                raise HttpError(f"Field 'dry_sequence_breakers': too many sequence breakers: {len(br)} (the limit "
                                f"is {cfg.max_dry_breakers})", "invalid_request_error")
            tasks: list[Task] = []
            params0 = None
            delims = []
            for d in data.get("message_delimiters") or []:
                if isinstance(d, dict) and isinstance(d.get("delimiter"), str) and d["delimiter"]:
                    delims.append((str(d.get("role")), eng.tokenize(d["delimiter"], False, True)))
            for i, p in enumerate(inputs):
                toks = eng.tokenize_prompt(p, refuse_from=eng.n_ctx_slot)
                params = state.task_params(data, chat)
                if chat and not isinstance(data.get("_chat_format_name"), str):
                    params.chat_format = "Content-only"
                if params0 is None:
                    try:
                        _warm_breakers(eng, params.sampling)
                    except Exception:  # noqa: BLE001 - the model thread builds (and reports) it then
                        pass
                params0 = params0 or params
                n = params.n_cmpl
                kids = []
                for j in range(1, n):
                    cp = state.task_params(data, chat)
                    if cp.sampling.seed != 0xFFFFFFFF:
                        cp.sampling = cp.sampling.replace(seed=(cp.sampling.seed + j) & 0xFFFFFFFF)
                    kids.append(Task(toks if isinstance(toks, np.ndarray) else list(toks), cp, emit,
                                     index=i * n + j))
                tasks.append(Task(toks, params, emit, index=i * n, children=kids))
                if delims and not isinstance(toks, np.ndarray):     # (an array: a prompt the slot refuses)
                    tasks[-1].user_starts = user_message_starts(toks, delims)
                    for k in kids:
                        k.user_starts = tasks[-1].user_starts
        except HttpError:
            raise
        except RecursionError:
            raise HttpError("request nested too deeply", "invalid_request_error") from None
        except (ValueError, TypeError, OverflowError) as e:
            raise HttpError(str(e), "invalid_request_error") from None
        return tasks, params0

    tasks, params0 = await offload(build, heavy=_heavy(request, data))
    all_tasks = [t for task in tasks for t in (task, *task.children)]
    stream = params0.stream if params0 else False
    cmpl_id = gen_id()
    for t in all_tasks:
        t.cmpl_id = cmpl_id
    created = int(time.time())
    model = state.model_name
    fp = cfg.build_info
    eng.submit(tasks)

    def cancel() -> None:
        for t in tasks:
            t.cancel()

    def verbose_of(f: Final) -> dict[str, Any] | None:
        if not f.task.params.verbose:
            return None
        return completion_final(f, model, f.task.params.to_json(state.eog_bias()), apply_fields=False)

    if not stream:
        finals: dict[int, Final] = {}
        watcher = asyncio.ensure_future(watch_disconnect(request))
        try:
            while len(finals) < len(all_tasks):
                get = asyncio.ensure_future(q.get())
                done, _ = await asyncio.wait({get, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if watcher in done:
                    get.cancel()
                    cancel()
                    return Response(b"", status_code=499)
                ev = get.result()
                if isinstance(ev, HttpError):
                    cancel()
                    log(f"request {request.url.path} -> {ev.status} ({ev.message[:80]})")
                    return error_response(ev)
                if isinstance(ev, Final):
                    finals[ev.task.index] = ev
        finally:
            watcher.cancel()
        ordered = [finals[k] for k in sorted(finals)]
        if kind == "completion":
            objs = [completion_final(f, model, f.task.params.to_json(state.eog_bias())) for f in ordered]
            body: Any = objs[0] if len(objs) == 1 else objs
        elif kind == "oai_cmpl":
            objs = [oai_cmpl_final(f, model, cmpl_id, fp, created, verbose_of(f)) for f in ordered]
            body = objs[0]
            for o in objs[1:]:
                body["choices"].append(o["choices"][0])
        else:
            objs = []
            for f in ordered:
                prs = (parser_factory or ContentParser)()
                text = f.content.decode("utf-8", "replace")
                msg, _ = prs.update(text, False)
                if not (msg.get("content") or msg.get("reasoning_content") or msg.get("tool_calls")):
                    # to_json_oaicompat_chat / _resp / _anthropic: an empty parsed message is the raw text
                    msg = message_json(text)
                objs.append(shape.final(f, msg, model, cmpl_id) if shape is not None else
                            chat_final(f, msg, model, cmpl_id, fp, created, verbose_of(f)))
            body = objs[0]
            if shape is not None:            # non-OAI results: one object, or the array of them
                body = objs[0] if len(objs) == 1 else objs
            else:
                for o in objs[1:]:
                    body["choices"].append(o["choices"][0])
        f0 = ordered[0]
        log(f"request {request.url.path} 200: {f0.n_prompt} prompt + {f0.n_decoded} tokens "
            f"({f0.stop}) in {time.perf_counter() - t0:.2f} s")
        return json_response(body)

    # streaming: the status goes out with the first result (an error before it is a plain JSON error)
    # a client gone before it (a long prompt still being read) cancels the tasks (rd.next(should_stop))
    first = await _first_or_gone(q, request, session)
    if first is None:
        cancel()
        return Response(b"", status_code=499)
    if isinstance(first, HttpError):
        cancel()
        log(f"request {request.url.path} -> {first.status} ({first.message[:80]})")
        return error_response(first)
    parsers: dict[int, Any] = {}
    ping = params0.sse_ping_interval if params0 else 30

    def encode(ev: Any) -> bytes:
        if isinstance(ev, Partial):
            if ev.begin:
                return b""
            if kind == "completion":
                return sse(completion_partial(ev))
            if kind == "oai_cmpl":
                return sse(oai_cmpl_partial(ev, model, cmpl_id, fp, created))
            prs = parsers.setdefault(ev.task.index, (parser_factory or ContentParser)())
            assert ev.out is not None
            msg, diffs = prs.update(ev.out.text.decode("utf-8", "replace"), True)
            if shape is not None:
                return shape.partial(ev, msg, diffs, model, cmpl_id)
            return b"".join(sse(c) for c in chat_partial(ev, diffs, model, cmpl_id, fp, created))
        if isinstance(ev, Final):
            if kind == "completion":
                return sse(completion_final(ev, model, ev.task.params.to_json(state.eog_bias())))
            if kind == "oai_cmpl":
                f = oai_cmpl_final(ev, model, cmpl_id, fp, created, verbose_of(ev))
                f["choices"][0]["finish_reason"] = f["choices"][0]["finish_reason"]
                return sse(f)
            prs = parsers.setdefault(ev.task.index, (parser_factory or ContentParser)())
            msg, diffs = prs.update("", False)
            if shape is not None:
                return shape.stream_final(ev, msg, diffs, model, cmpl_id)
            return b"".join(sse(c) for c in chat_stream_final(ev, diffs, bool(msg.get("tool_calls")), model,
                                                               cmpl_id, fp, created, verbose_of(ev)))
        return b""

    async def gen() -> Any:
        n_final = 0
        ev = first
        try:
            while True:
                if isinstance(ev, HttpError):
                    yield shape.stream_error(ev) if shape is not None else sse({"error": ev.body()["error"]})
                    return
                # a chat reply's parser re-reads the reply so far: past PARSE_INLINE characters, off the loop
                big = chat and parser_factory is not None and isinstance(ev, (Partial, Final)) and \
                    len(getattr(parsers.get(ev.task.index), "text", "")) >= PARSE_INLINE
                chunk = await offload(encode, ev, heavy=big, pool="parse")
                if chunk:
                    yield chunk
                if isinstance(ev, Final):
                    n_final += 1
                    if n_final == len(all_tasks):
                        break
                while True:
                    try:
                        ev = await asyncio.wait_for(q.get(), timeout=ping if ping > 0 else None)
                        break
                    except asyncio.TimeoutError:
                        yield PING
            if kind != "completion" and (shape is None or shape.done):
                yield shape.done if shape is not None else DONE
            log(f"request {request.url.path} 200 (stream) in {time.perf_counter() - t0:.2f} s")
        finally:
            cancel()

    if session is None:
        return StreamingResponse(gen(), headers=SSE_HEADERS)
    return _teed(state, session, gen())


def _teed(state: ServerState, session: StreamSession, source: Any) -> Response:
    """server_res_spipe: the stream's bytes go into ``session`` from a task of their own, which goes on when the
    client goes away and stops (cancelling the generation) when the session is cancelled; the client reads the
    session from offset 0 (the same bytes, as they come)."""
    async def produce() -> None:
        try:
            async for chunk in source:
                session.append(chunk)
                if session.cancelled:
                    break
        finally:
            await source.aclose()            # gen()'s finally: the tasks cancelled if still running
            session.finalize()

    task = asyncio.ensure_future(produce())
    state.producers.add(task)
    task.add_done_callback(state.producers.discard)

    async def consume() -> Any:
        async for chunk in session.read(0, lambda: session.cancelled):
            yield chunk

    resp = StreamingResponse(consume(), headers=SSE_HEADERS)
    resp.teed = True      # type: ignore[attr-defined]
    return resp


#: a streamed chat reply longer than this is parsed in the "parse" worker pool
PARSE_INLINE = 2048


def _warm_breakers(eng: Any, sp: Any) -> None:
    """DRY's breaker table built here (a worker thread) rather than on the model thread, which then finds it
    in the cache (``sampler.dry.process_breakers``)."""
    if sp.dry_multiplier != 0.0 and sp.dry_base >= 1.0 and sp.dry_penalty_last_n != 0 and "dry" in sp.samplers:
        from sampler.dry import process_breakers

        process_breakers(eng.vocab, sp.dry_sequence_breakers)


def _heavy(request: Request, data: dict[str, Any]) -> bool:
    """Whether a request's set-up is worth a worker thread: a big body or prompt, a schema or a grammar."""
    if len(getattr(request, "_body", b"") or b"") >= HEAVY_BYTES:
        return True
    p = data.get("prompt")
    if isinstance(p, str) and len(p) >= HEAVY_BYTES or isinstance(p, list) and len(p) >= HEAVY_BYTES // 8:
        return True
    return bool(data.get("json_schema") or data.get("grammar") or data.get("dry_sequence_breakers"))


async def _first_or_gone(q: asyncio.Queue[Any], request: Request, session: StreamSession | None) -> Any:
    """The first event of a stream, or None when the client went away before it. A stream kept under an
    ``X-Conversation-Id`` (``session``) goes on without its client, as after its first event (its generation
    stops only when the session is cancelled)."""
    get = asyncio.ensure_future(q.get())
    watcher = asyncio.ensure_future(watch_disconnect(request) if session is None else _cancelled(session))
    try:
        done, _ = await asyncio.wait({get, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if get in done:
        return get.result()
    get.cancel()
    return None


async def _cancelled(session: StreamSession) -> None:
    while not session.cancelled:
        await asyncio.sleep(0.25)


async def watch_disconnect(request: Request) -> None:
    """Returns once the client has gone away (polled every 0.25 s)."""
    while True:
        if await request.is_disconnected():
            return
        await asyncio.sleep(0.25)
