"""Embedding and rerank tasks on the model thread, as llama-server's ``send_embedding`` / ``send_rerank``
(server-context.cpp): a task whose prompt has been decoded (every token an output, ``llama_set_embeddings`` on
for that batch) answers with the pooled vector of its sequence, normalised as ``common_embd_normalize`` does,
the vector of each token (pooling ``none``, not normalised), or the first value of the pooled output (rerank).

Example:
    >>> normalize([3.0, 4.0], 2), normalize([3.0, -4.0], 1), normalize([1.0, 2.0], -1)
    ([0.6000000238418579, 0.800000011920929], [0.4285714626312256, -0.5714285969734192], [1.0, 2.0])
    >>> can_split(pooling=3, causal=False), can_split(pooling=1, causal=True), can_split(pooling=4, causal=True)
    (True, False, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llama_cpp import llama_cpp as L

from .slots import Slot, Task

__all__ = ["EmbdResult", "EmbeddingOutput", "can_split", "normalize"]

POOLING_NONE, POOLING_LAST, POOLING_RANK = 0, 3, 4


def normalize(vec: Any, norm: int) -> list[float]:
    """``common_embd_normalize``: -1 none, 0 max absolute (an int16 range), 2 euclidean, else the p-norm; the sums
    in double over float products, the factor a float, as the C code computes them."""
    x = np.asarray(vec, dtype=np.float32)
    if norm == -1:
        s = 1.0
    elif norm == 0:
        s = 0.0
        for v in np.abs(x).tolist():
            if s < v:
                s = v
        s /= 32760.0
    elif norm == 2:
        s = 0.0
        for v in (x * x).tolist():              # float * float, added in double
            s += v
        s = math.sqrt(s)
    else:
        s = 0.0
        for v in np.abs(x).tolist():
            s += math.pow(v, norm)
        s = math.pow(s, 1.0 / norm)
    f = np.float32(1.0 / s if s > 0.0 else 0.0)
    return (x * f).astype(np.float32).tolist()


def can_split(*, pooling: int, causal: bool) -> bool:
    """``server_slot::can_split`` for an embedding task: its prompt may span batches only when the output is the
    last token's (``last`` pooling, or a causal reranker)."""
    return pooling == POOLING_LAST or (pooling == POOLING_RANK and causal)


@dataclass
class EmbdResult:
    """``server_task_result_embd`` (``embedding``: one vector, or one per token) / ``_rerank`` (``score``)."""

    task: Task
    n_tokens: int
    embedding: list[list[float]] = field(default_factory=list)
    score: float = 0.0


class EmbeddingOutput:
    """The results of embedding and rerank tasks (methods of :class:`~.engine.Engine`)."""

    ctx: Any
    model: Any
    pooling: int

    def _send_embd(self, s: Slot, rows: list[int]) -> None:
        """The result of ``s``'s task from the batch just decoded (``rows``: the batch indices of its tokens)."""
        task = s.task
        assert task is not None
        n_out = int(L.llama_model_n_embd_out(self.model))
        res = EmbdResult(task, len(task.tokens))
        if task.kind == "rerank":
            res.score = -1e6
            for i in rows:
                p = L.llama_get_embeddings_seq(self.ctx, s.id)
                if not p:
                    p = L.llama_get_embeddings_ith(self.ctx, i)
                if not p:
                    res.score = -1e6
                    continue
                res.score = float(np.float32(p[0]))
            task.emit(res)
            return
        for i in rows:
            p = (L.llama_get_embeddings_ith(self.ctx, i) if self.pooling == POOLING_NONE
                 else L.llama_get_embeddings_seq(self.ctx, s.id))
            if not p:
                res.embedding.append([0.0] * n_out)
                continue
            vec = np.ctypeslib.as_array(p, shape=(n_out,)).copy()
            if self.pooling != POOLING_NONE:         # normalised only when pooled: one vector
                res.embedding.append(normalize(vec, task.embd_normalize))
                break
            res.embedding.append(vec.astype(np.float32).tolist())
        task.emit(res)
