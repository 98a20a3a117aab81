"""The server's model load (constrained/server/loading.py): llama-server's warm-up run leaves nothing behind (the
same logits bit for bit as a context that never ran it, an empty KV memory), the context settings may come after
the load started, and ``--warmup`` reaches the engine settings."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from constrained.llama.flags import parse_server_args
from constrained.server.loading import EngineConfig, ModelLoad, warm_up
from constrained.server.main import engine_config_from_args


def _logits(model, ctx, toks: list[int]) -> np.ndarray:
    arr = (L.llama_token * len(toks))(*toks)
    assert L.llama_decode(ctx, L.llama_batch_get_one(arr, len(toks))) == 0
    n = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    ptr = L.llama_get_logits_ith(ctx, -1)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n,)).copy()


def test_warm_up_leaves_nothing_behind(default_model_path: str) -> None:
    cfg = EngineConfig(model_path=default_model_path, n_ctx=256, n_parallel=1, n_threads=1, n_threads_batch=1,
                       warmup=True)
    load = ModelLoad(default_model_path).start()     # the settings after the start, as constrained serve does
    load.configure(cfg)
    model, ctx = load.result()
    mem = L.llama_get_memory(ctx)
    assert L.llama_memory_seq_pos_max(mem, 0) == -1          # the warm-up's two tokens are gone
    cold = ModelLoad(default_model_path, cfg=EngineConfig(**{**cfg.__dict__, "warmup": False}))
    model2, ctx2 = cold.run()
    toks = [2, 818, 5279, 529, 7001, 563]
    a, b = _logits(model, ctx, toks), _logits(model2, ctx2, toks)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    warm_up(model2, ctx2, 2048)                              # a warm-up after use clears the memory too
    assert L.llama_memory_seq_pos_max(L.llama_get_memory(ctx2), 0) == -1
    assert np.array_equal(_logits(model2, ctx2, toks).view(np.uint32), a.view(np.uint32))
    for c in (ctx, ctx2):
        L.llama_free(c)
    for m in (model, model2):
        L.llama_model_free(m)


def test_configure_checks_the_path(default_model_path: str) -> None:
    load = ModelLoad(default_model_path)
    with pytest.raises(ValueError, match="the load started with"):
        load.configure(EngineConfig(model_path=default_model_path + ".other"))


def test_warmup_flag_reaches_the_engine_settings(default_model_path: str) -> None:
    assert engine_config_from_args(parse_server_args(["-m", default_model_path])).warmup is False
    assert engine_config_from_args(parse_server_args(["-m", default_model_path, "--warmup"])).warmup is True
