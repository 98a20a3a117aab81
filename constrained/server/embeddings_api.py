"""The embedding and rerank routes (``/embedding``, ``/embeddings``, ``/v1/embeddings``; ``/rerank``,
``/reranking``, ``/v1/rerank``, ``/v1/reranking``), as llama-server's ``handle_embeddings_impl`` and
``post_rerank`` (server-context.cpp) with ``format_embeddings_response_oaicompat``, ``format_response_rerank`` and
``format_prompt_rerank`` (server-common.cpp): the body read and checked with llama-server's messages, one task per
input (or per document) queued on the engine, the answers in llama-server's shapes.

Example:
    >>> string_list(["a", "b"]), string_list(["a", 1]), string_list("a")
    (['a', 'b'], None, None)
"""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

from llama_cpp import llama_cpp as L
from starlette.requests import Request
from starlette.responses import Response

from sampler.request import json_type_name

from .bodies import error_response, json_response, read_body
from .chat_api import MEDIA_PARTS
from .completions import watch_disconnect
from .embeddings import POOLING_NONE, POOLING_RANK, EmbdResult
from .errors import HttpError
from .slots import Task
from .state import ServerState
from .task import _subprompt
from .work import offload

__all__ = ["embeddings_handler", "rerank_handler", "string_list"]


def string_list(v: Any) -> list[str] | None:
    """``get<std::vector<std::string>>``: the list, or None where nlohmann throws."""
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return v
    return None


def _type_error(v: Any, want: str) -> HttpError:       # nlohmann's get<T> on the wrong type (500 via ex_wrapper)
    return HttpError(f"[json.exception.type_error.302] type must be {want}, but is {json_type_name(v)}",
                     "server_error")


def _content_tokens(state: ServerState, content: Any) -> list[int]:
    """``tokenize_oai_content_array`` without a projector: the text parts joined, tokenized with specials."""
    if not isinstance(content, list):
        raise HttpError('"content" must be an array', "invalid_request_error")
    text = ""
    for part in content:
        t = part.get("type") if isinstance(part, dict) else None
        t = t if isinstance(t, str) else ""
        if t in MEDIA_PARTS:
            raise HttpError(f"{MEDIA_PARTS[t]} input is not supported - hint: if this is unexpected, you may need to "
                            "provide the mmproj", "server_error")
        if t != "text":
            raise HttpError("unsupported content[].type", "invalid_request_error")
    for part in content:
        x = part.get("text")
        text += x if isinstance(x, str) else ""
    return state.engine.tokenize(text, True, True)


def _entry_tokens(state: ServerState, p: Any) -> list[int]:
    if isinstance(p, dict) and "content" in p:
        return _content_tokens(state, p["content"])
    try:
        sub = _subprompt(p)
    except ValueError as e:                 # tokenize_input_subprompt's runtime_error
        raise HttpError(str(e), "server_error") from None
    return list(state.engine.tokenize_prompt(sub))


async def _run(state: ServerState, request: Request, prompts: list[Any], kind: str,
               embd_normalize: int | None = None) -> Any:
    """One ``kind`` task (``embedding`` / ``rerank``) per prompt on the slots: their results in order, or the
    response to send instead (an error, or an empty 499 when the client went away)."""
    q, emit = _queue(state)
    tasks = []
    for i, toks in enumerate(prompts):
        t = Task(toks, state.task_params({}, False), emit, index=i)
        t.kind = kind
        if embd_normalize is not None:
            t.embd_normalize = embd_normalize
        tasks.append(t)
    state.engine.submit(tasks)
    got: dict[int, EmbdResult] = {}
    watcher = asyncio.ensure_future(watch_disconnect(request))
    try:
        while len(got) < len(tasks):
            get = asyncio.ensure_future(q.get())
            done, _ = await asyncio.wait({get, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if watcher in done:
                get.cancel()
                return Response(b"", status_code=499)
            ev = get.result()
            if isinstance(ev, HttpError):
                return error_response(ev)
            got[ev.task.index] = ev
    finally:
        watcher.cancel()
        for t in tasks:
            t.cancel()
    return [got[i] for i in range(len(tasks))]


def _queue(state: ServerState) -> tuple[asyncio.Queue[Any], Any]:
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[Any] = asyncio.Queue()

    def emit(ev: Any) -> None:
        try:
            loop.call_soon_threadsafe(q.put_nowait, ev)
        except RuntimeError:               # the loop is closed (shutdown)
            pass
    return q, emit


def embeddings_handler(state: ServerState, oai: bool) -> Any:
    """``post_embeddings`` (``oai`` False: ``/embedding``, ``/embeddings``) / ``post_embeddings_oai``."""
    cfg = state.cfg
    eng = state.engine

    async def h(request: Request) -> Response:
        if not cfg.engine.embedding:
            raise HttpError("This server does not support embeddings. Start it with `--embeddings`",
                            "not_supported_error")
        if oai and eng.pooling == POOLING_NONE:
            raise HttpError("Pooling type 'none' is not OAI compatible. Please use a different pooling type",
                            "invalid_request_error")
        body = await read_body(request, cfg.max_body)
        obj = body if isinstance(body, dict) else {}
        res_oai = oai
        if "input" in obj:
            prompt = obj["input"]
        elif "content" in obj:
            res_oai = False                 # "content" is not OAI compatible
            prompt = obj["content"]
        else:
            raise HttpError('"input" or "content" must be provided', "invalid_request_error")
        use_base64 = False
        if "encoding_format" in obj:
            fmt = obj["encoding_format"]
            if not isinstance(fmt, str):
                raise _type_error(fmt, "string")
            if fmt == "base64":
                use_base64 = True
            elif fmt != "float":
                raise HttpError("The format to return the embeddings in. Can be either float or base64",
                                "invalid_request_error")

        def tokenize() -> list[list[int]]:
            if isinstance(prompt, list) and not any(isinstance(x, int) and not isinstance(x, bool)
                                                    for x in prompt):
                return [_entry_tokens(state, p) for p in prompt]
            return [_entry_tokens(state, prompt)]

        prompts = await offload(tokenize, heavy=len(getattr(request, "_body", b"") or b"") >= 65536)
        if not prompts:
            raise HttpError('"input" must not be empty', "invalid_request_error")
        if any(not t for t in prompts):
            raise HttpError("Input content cannot be empty", "invalid_request_error")
        norm = cfg.engine.embd_normalize
        if "embd_normalize" in obj:
            v = obj["embd_normalize"]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _type_error(v, "number")
            norm = int(v)
        results = await _run(state, request, prompts, "embedding", norm)
        if isinstance(results, Response):
            return results
        if not res_oai:
            return json_response([{"index": r.task.index, "embedding": r.embedding} for r in results])
        data = []
        for r in results:
            vec = r.embedding[0]
            if use_base64:
                b64 = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
                data.append({"embedding": b64, "index": r.task.index, "object": "embedding",
                             "encoding_format": "base64"})
            else:
                data.append({"embedding": vec, "index": r.task.index, "object": "embedding"})
        n = sum(r.n_tokens for r in results)
        model = obj.get("model") if isinstance(obj.get("model"), str) else state.model_name
        return json_response({"model": model, "object": "list",
                              "usage": {"prompt_tokens": n, "total_tokens": n}, "data": data})
    return h


def _rerank_tokens(state: ServerState, query: str, doc: str) -> list[int]:
    """``format_prompt_rerank``: the model's ``rerank`` template, else BOS, query, EOS/SEP, document, EOS as the
    vocabulary adds them."""
    eng = state.engine
    tmpl = L.llama_model_chat_template(eng.model, b"rerank")
    if tmpl:
        text = tmpl.decode("utf-8", "replace").replace("{query}", query).replace("{document}", doc)
        return eng.tokenize(text, False, True)
    v = eng.vocab_ptr
    eos = int(L.llama_vocab_eos(v))
    if eos == L.LLAMA_TOKEN_NULL:
        eos = int(L.llama_vocab_sep(v))
    out: list[int] = []
    if L.llama_vocab_get_add_bos(v):
        out.append(int(L.llama_vocab_bos(v)))
    out += eng.tokenize(query, False, False)
    if L.llama_vocab_get_add_eos(v):
        out.append(eos)
    if L.llama_vocab_get_add_sep(v):
        out.append(int(L.llama_vocab_sep(v)))
    out += eng.tokenize(doc, False, False)
    if L.llama_vocab_get_add_eos(v):
        out.append(eos)
    return out


def rerank_handler(state: ServerState) -> Any:
    """``post_rerank``: Jina's format, or TEI's when the body has ``texts``."""
    cfg = state.cfg

    async def h(request: Request) -> Response:
        if not cfg.engine.embedding or cfg.engine.pooling != POOLING_RANK:
            raise HttpError("This server does not support reranking. Start it with `--reranking`",
                            "not_supported_error")
        body = await read_body(request, cfg.max_body)
        obj = body if isinstance(body, dict) else {}
        tei = "texts" in obj
        if "query" not in obj:
            raise HttpError('"query" must be provided', "invalid_request_error")
        query = obj["query"]
        if not isinstance(query, str):
            raise HttpError('"query" must be a string', "invalid_request_error")
        texts = string_list(obj.get("texts")) or []
        docs = string_list(obj.get("documents"))
        docs = texts if docs is None else docs
        if not docs:
            raise HttpError('"documents" must be a non-empty string array', "invalid_request_error")
        top_n = obj.get("top_n")
        top_n = int(top_n) if isinstance(top_n, (int, float)) and not isinstance(top_n, bool) else len(docs)
        prompts = await offload(lambda: [_rerank_tokens(state, query, d) for d in docs], heavy=len(docs) > 16)
        results = await _run(state, request, prompts, "rerank")
        if isinstance(results, Response):
            return results
        label = "score" if tei else "relevance_score"
        return_text = tei and obj.get("return_text") is True
        elems = []
        for r in results:
            e: dict[str, Any] = {"index": r.task.index, label: r.score}
            if return_text:
                e["text"] = docs[r.task.index]
            elems.append(e)
        elems.sort(key=lambda e: -e[label])        # std::sort of so few elements: an insertion sort (stable)
        elems = elems[:max(0, min(top_n, len(elems)))]
        if tei:
            return json_response(elems)
        n = sum(r.n_tokens for r in results)
        model = obj.get("model") if isinstance(obj.get("model"), str) else state.model_name
        return json_response({"model": model, "object": "list", "usage": {"prompt_tokens": n, "total_tokens": n},
                              "results": elems})
    return h
