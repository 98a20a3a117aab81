"""The server's settings and shared state: llama-server's server-side flags (:class:`ServerConfig`) and what
the handlers share (:class:`ServerState`: the engine, the chat templates picked as ``common_chat_templates_init``
picks them, the model's metadata for ``/v1/models`` and ``/props``).

Example:
    >>> ServerConfig(engine=EngineConfig(model_path="model.gguf")).jinja
    True
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..chat import ChatTemplates
from .engine import Engine, EngineConfig
from .task import TaskParams

__all__ = ["ServerConfig", "ServerState"]


@dataclass
class ServerConfig:
    """llama-server's server-side flags (the model and context ones go to :class:`EngineConfig`)."""

    engine: EngineConfig
    alias: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)
    jinja: bool = True
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    endpoint_slots: bool = True
    endpoint_metrics: bool = False
    endpoint_props: bool = False
    ui: bool = True
    cors_origins: str = "*"
    prefill_assistant: bool = True
    log_requests: bool = True
    verbose: bool = False                       # -v / -lv N > 9: every response carries __verbose
    reasoning_format: str = "auto"               # --reasoning-format (a request's own field wins)
    reasoning_budget: int = -1                   # --reasoning-budget (a request's reasoning_budget_tokens wins)
    reasoning_budget_message: str = ""           # --reasoning-budget-message
    build_info: str = "b0-unknown"
    max_body: int = 100 * 1024 * 1024           # --max-body-size: httplib's payload limit (0: none); above, 413
    max_messages: int = 65536                   # --max-messages: a chat body with more is refused (400)
    max_dry_breakers: int = 128                 # dry_sequence_breakers longer than this are refused (400)
    slot_save_path: str = ""                    # --slot-save-path (with its trailing "/"; empty: slot actions 501)


class ServerState:
    """The engine, the templates and the model's metadata, shared by the handlers."""

    def __init__(self, cfg: ServerConfig, engine: Engine) -> None:
        from llama_cpp import llama_cpp as L

        self.cfg = cfg
        self.engine = engine
        self.templates = ChatTemplates.from_model(engine.model, engine.vocab_ptr, cfg.chat_template)
        path = cfg.engine.model_path
        self.model_name = sorted(cfg.alias)[0] if cfg.alias else path
        buf = bytes(256)
        import ctypes

        b = ctypes.create_string_buffer(256)
        L.llama_model_desc(engine.model, b, len(b))
        desc = b.value.decode("utf-8", "replace")
        self.model_ftype = desc.split(" ", 2)[2] if desc.count(" ") >= 2 else desc
        del buf
        self.meta = {
            "vocab_type": int(L.llama_vocab_type(engine.vocab_ptr)), "n_vocab": engine.n_vocab,
            "n_ctx": engine.n_ctx, "n_ctx_train": engine.n_ctx_train, "n_embd": int(L.llama_model_n_embd(engine.model)),
            "n_params": int(L.llama_model_n_params(engine.model)), "size": int(L.llama_model_size(engine.model)),
            "ftype": self.model_ftype,
        }
        self.t_start = int(time.time())
        self.ready = True
        from .streams import StreamSessions

        self.streams = StreamSessions()              # resumable streams (X-Conversation-Id)
        self.producers: set[Any] = set()             # their generations, running on without a client

    @classmethod
    def load(cls, cfg: ServerConfig, progress: Any = None, load: Any = None, vocab_load: Any = None) -> ServerState:
        """The engine (``load`` / ``vocab_load``: a model load already started, see :class:`.engine.Engine`) and
        the server state, with the model thread running."""
        eng = Engine(cfg.engine, progress, load=load, vocab_load=vocab_load)
        eng.start()
        return cls(cfg, eng)

    def eog_bias(self) -> list[int]:
        return self.engine.eog_ids

    def task_params(self, data: dict[str, Any], chat: bool) -> TaskParams:
        e = self.engine
        return TaskParams.from_body(data, n_parallel=e.n_parallel, vocab=e.vocab, base=e.cfg.sampling,
                                    base_n_predict=e.cfg.n_predict, base_n_keep=e.cfg.n_keep, antiprompt=e.cfg.antiprompt, chat=chat,
                                    verbose=self.cfg.verbose, base_reasoning_budget=self.cfg.reasoning_budget)
