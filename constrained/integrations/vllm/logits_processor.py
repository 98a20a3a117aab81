"""vLLM's public V1 logits-processor interface, with llama.cpp's grammar and (optionally) llama-server's sampling.

Load it with ``LLM(..., logits_processors=[ConstrainedLogitsProcessor])`` or
``vllm serve --logits-processors constrained.integrations.vllm:ConstrainedLogitsProcessor``. A request opts in with
``SamplingParams(extra_args={"constrained": {...}})`` (``vllm_xargs`` in the OpenAI API) holding one of ``gbnf``,
``json_schema``, ``grammar`` (a bundled grammar's name), ``regex`` (the whole output matches it), ``choice`` (a list
of strings) or ``structural_tag`` (xgrammar's triggered tags, see :meth:`Grammar.from_structural_tag`), optionally
``enforce``, and optionally ``parity``:

* without ``parity`` the processor masks the row (every token llama.cpp's grammar rejects gets -inf) and vLLM
  samples as configured;
* with ``parity`` (a llama-server request body's sampling fields, e.g. ``{"temperature": 0.8, "top_k": 40,
  "seed": 7}``), the processor draws the token itself with our llama-server chain
  (:meth:`sampler.Sampler.sample_constrained`: the chain on the raw row, the one-token grammar check, the masked
  redraw) and hands vLLM a row where only that token is finite, so vLLM emits exactly the token llama-server's
  sampling gives on those logits. Prompt tokens are fed to the chain first, as llama-server does.

The logits processor runs in the worker after the forward pass, per request; vLLM refuses logits processors when
speculative decoding is on (use the structured-output backend there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from ...errors import ConstrainedError
from ...vocab import Vocabulary
from ..constraint import SequenceConstraint, grammar_from_spec

__all__ = ["ConstrainedLogitsProcessor", "request_options"]

_KINDS = ("gbnf", "json_schema", "grammar", "regex", "choice", "structural_tag")
_KEYS = {*_KINDS, "enforce", "parity"}


def request_options(params: Any) -> dict[str, Any] | None:
    """The ``constrained`` options of a request (``None`` when it did not opt in); raises ValueError when bad."""
    extra = getattr(params, "extra_args", None) or {}
    opts = extra.get("constrained")
    if opts is None:
        return None
    if not isinstance(opts, dict):
        raise ValueError("extra_args['constrained'] must be an object")
    unknown = set(opts) - _KEYS
    if unknown:
        raise ValueError(f"extra_args['constrained']: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
    if sum(k in opts for k in _KINDS) != 1:
        raise ValueError(f"extra_args['constrained'] needs exactly one of {', '.join(repr(k) for k in _KINDS)}")
    if "parity" in opts and not isinstance(opts["parity"], dict):
        raise ValueError("extra_args['constrained']['parity'] must be an object of llama-server sampling fields")
    return opts


def _grammar(opts: dict[str, Any]) -> Any:
    enforce = opts.get("enforce", "llama.cpp")
    if "gbnf" in opts:
        return grammar_from_spec(gbnf=opts["gbnf"])
    if "json_schema" in opts:
        return grammar_from_spec(json_schema=opts["json_schema"], enforce=enforce)
    if "regex" in opts:
        return grammar_from_spec(regex=opts["regex"])
    if "choice" in opts:
        return grammar_from_spec(choice=opts["choice"])
    if "structural_tag" in opts:
        return grammar_from_spec(structural_tag=opts["structural_tag"], enforce=enforce)
    return grammar_from_spec(name=opts["grammar"])


class _Request:
    """One request's state: the constraint and, in parity mode, llama-server's sampler chain."""

    def __init__(self, constraint: SequenceConstraint, vocab_size: int, sampler: Any) -> None:
        self.c = constraint
        self.width = vocab_size
        self.sampler = sampler
        self.prompt_fed = False
        self.drawn: list[int] = []          # parity mode: the tokens the chain drew
        self.rows: list[np.ndarray] = []    # parity mode, when the class records: the rows it drew from

    def __call__(self, prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if self.sampler is not None:
            return self._parity(prompt_ids, output_ids, logits)
        self.c.sync(output_ids)
        return self.c.mask_logits(logits)

    def _parity(self, prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        smpl = self.sampler
        if not self.prompt_fed:
            smpl.reset()                          # as llama-server's init_sampler: reset, then the prompt
            for t in prompt_ids:
                smpl.accept(int(t))
            self.prompt_fed = True
        if list(output_ids) != self.drawn:
            raise ConstrainedError("parity mode: vLLM's output differs from the tokens the chain drew "
                                   "(preemption and n > 1 are not supported in parity mode)")
        self.c.sync(output_ids)
        if self.c.is_terminated and self.c.stop_ids:  # ended on an EOG vLLM does not stop on: stop it now
            tok = self.c.stop_ids[0]
            self.drawn.append(tok)
            out = torch.full_like(logits, float("-inf"))
            out[tok] = 0.0
            return out
        n = len(self.c.vocab)
        row = logits[:n].detach().to(torch.float32).cpu().numpy()
        if ConstrainedLogitsProcessor.record_rows:
            self.rows.append(row.copy())
        m = self.c.matcher
        tok, _ = smpl.sample_constrained(row, m.allows, m.mask)
        smpl.accept(tok)
        self.drawn.append(tok)
        out = torch.full_like(logits, float("-inf"))
        out[tok] = 0.0
        return out


class ConstrainedLogitsProcessor(AdapterLogitsProcessor):
    """llama.cpp's grammar (and, per request, llama-server's sampling) as a vLLM V1 logits processor."""

    #: in-process engines only: the per-request states built, newest last (tests read the parity draws)
    requests: list[_Request] = []
    #: keep each parity-mode logits row (in-process engines; tests replay them through llama-server's sampler)
    record_rows: bool = False

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        self.vocab_size = int(vllm_config.model_config.get_vocab_size())
        self._vocab: Vocabulary | None = None
        self._config = vllm_config

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        opts = request_options(sampling_params)
        if opts is not None:
            try:
                _grammar(opts)
                if "parity" in opts:
                    from sampler import Params

                    Params.from_request(opts["parity"])
            except ConstrainedError as err:
                raise ValueError(f"constrained: {err}") from err

    def is_argmax_invariant(self) -> bool:
        return False

    def vocab(self) -> Vocabulary:
        if self._vocab is None:
            from transformers import AutoTokenizer

            mc = self._config.model_config
            tok = AutoTokenizer.from_pretrained(mc.tokenizer, trust_remote_code=mc.trust_remote_code)
            self._vocab = Vocabulary.from_hf(tok)
        return self._vocab

    def new_req_logits_processor(self, params: Any) -> Callable[..., torch.Tensor] | None:
        opts = request_options(params)
        if opts is None:
            return None
        vocab = self.vocab()
        stops = set(getattr(params, "all_stop_token_ids", None) or ()) or set(vocab.eog_ids)  # what vLLM stops on
        # mask mode: where the grammar can end, only what vLLM stops on (else a llama.cpp end token vLLM does not
        # stop on gets a second, forced one); parity mode keeps llama-server's draw and forces the stop after it
        constraint = SequenceConstraint(_grammar(opts), vocab, stop_ids=stops, only_stop_ids="parity" not in opts)
        smpl = None
        if "parity" in opts:
            from sampler import Params, Sampler

            smpl = Sampler(Params.from_request(opts["parity"], vocab), vocab)
        req = _Request(constraint, self.vocab_size, smpl)
        ConstrainedLogitsProcessor.requests.append(req)
        del ConstrainedLogitsProcessor.requests[:-256]
        return req
