"""Shared by the vLLM tests: engine settings for this 2-core CPU machine and the llama.cpp replay of outputs."""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema

from constrained import Grammar
from oracle.llama import CGrammar

# one OpenMP thread on one core: spinning threads crawl on a shared, loaded 2-core machine
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")

# one small engine: float32 (the CPU kernels), no CUDA graphs, a 256 MiB KV cache, short contexts
ENGINE = dict(dtype="float32", enforce_eager=True, max_model_len=512, max_num_seqs=16,
              kv_cache_memory_bytes=256 << 20, seed=0)


def gbnf_of(kind: str, spec: Any) -> str:
    """The GBNF llama.cpp's grammar sampler gets for a request (schemas converted as llama-server does)."""
    if kind == "json":
        return Grammar.from_json_schema(spec).to_gbnf()
    return spec


def replay(vm: Any, gbnf: str, ids: list[int], finish_reason: str | None) -> list[int]:
    """Feed a request's output token ids to llama.cpp's grammar sampler; every token must be allowed, and a
    request that stopped must have stopped on an end-of-generation token the grammar allowed. Returns the body."""
    with CGrammar(vm, gbnf) as g:
        for k, t in enumerate(ids):
            if vm.is_eog(t):
                assert g.allows(t), f"end of generation at {k} where llama.cpp's grammar cannot end"
                assert k == len(ids) - 1, "tokens after the end of generation"
                return ids[:k]
            assert g.allows(t), f"llama.cpp's grammar rejects token {t} ({vm.piece(t)!r}) at {k} of {ids}"
            g.accept(t)
    assert finish_reason != "stop", "stopped without an end-of-generation token"
    return ids


def check_json(text: str, schema: Any) -> None:
    jsonschema.validate(json.loads(text), schema)
