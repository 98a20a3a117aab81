"""llama-server's sampling parameters: defaults, GGUF defaults, request fields and their refusals.

:class:`Params` mirrors ``common_params_sampling`` (``common/common.h``). Floats are stored as the float32 values
llama.cpp holds. :meth:`Params.from_request` reads a ``/completion`` or ``/v1/chat/completions`` body as
``server_schema::eval_llama_cmpl_schema`` does (aliases, clamps, and the same error texts as ``ValueError``).

Example:
    >>> p = Params.from_request({"temperature": -1, "top_k": -5, "seed": -1, "samplers": "kt"})
    >>> p.temp, p.top_k, p.seed, p.samplers
    (0.0, 0, 4294967295, ('top_k', 'temperature'))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .cconv import _CANONICAL, DEFAULT_SAMPLERS, f32
from .gguf_sampling import read_sampling_kv
from .request import eval_ollama, eval_request


@dataclass(frozen=True)
class Params:
    """llama-server's sampling parameters (``common_params_sampling``) with its defaults.

    ``logit_bias`` is a tuple of ``(token, bias)``; a token may also be a string, tokenized (no specials) when the
    sampler is built with a vocabulary. ``ignore_eos`` adds a -inf bias for every end-of-generation token.
    """

    seed: int = 0xFFFFFFFF
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typ_p: float = 1.0
    temp: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", "\"", "*")
    top_n_sigma: float = -1.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    min_keep: int = 0
    n_probs: int = 0
    samplers: tuple[str, ...] = DEFAULT_SAMPLERS
    logit_bias: tuple[tuple[int | str, float], ...] = field(default=())
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "float":
                object.__setattr__(self, f.name, f32(v))
            elif f.type == "int":
                object.__setattr__(self, f.name, int(v))
        object.__setattr__(self, "seed", self.seed & 0xFFFFFFFF)
        object.__setattr__(self, "samplers", tuple(self.samplers))
        object.__setattr__(self, "dry_sequence_breakers", tuple(self.dry_sequence_breakers))
        object.__setattr__(self, "logit_bias", tuple((t, f32(b)) for t, b in self.logit_bias))
        bad = [s for s in self.samplers if s not in _CANONICAL]
        if bad:
            raise ValueError(f"unknown sampler name(s) {bad}; use one of {list(_CANONICAL)}")

    def replace(self, **kw: Any) -> Params:
        """A copy with some fields changed."""
        return replace(self, **kw)

    # ------------------------------------------------------------------ GGUF
    @classmethod
    def from_gguf(cls, metadata: Mapping[str, Any], base: Params | None = None, *,
                  user_set: frozenset[str] = frozenset()) -> Params:
        """Apply a GGUF's ``general.sampling.*`` keys over ``base`` as ``common_init_sampler_from_model`` does.

        ``metadata`` is the GGUF's key -> value metadata (at least its ``general.sampling.*`` keys), as
        ``constrained.vocab.gguf_meta.sampling_metadata(path)`` reads it. ``user_set`` names fields the user gave on
        the command line (those win over the GGUF). Values go through llama.cpp's metadata string
        (``std::to_string``) and ``strtol``/``strtof``.

        Example:
            >>> p = Params.from_gguf({"general.sampling.top_p": 0.5, "general.sampling.top_k": 7},
            ...                      user_set=frozenset({"top_k"}))
            >>> p.top_p, p.top_k
            (0.5, 40)
        """
        return read_sampling_kv(metadata, base or cls(), user_set)

    # ------------------------------------------------------------------ requests
    @classmethod
    def from_request(cls, body: dict[str, Any], vocab: Any = None, base: Params | None = None, *,
                     chat: bool | None = None) -> Params:
        """Read a llama-server request body (``/completion``, or ``/v1/chat/completions`` when ``chat``).

        ``chat`` defaults to True when the body has ``messages``. ``vocab`` (a ``constrained.Vocabulary``) is
        needed for string ``logit_bias`` keys and the id range check.

        Raises:
            ValueError: with llama-server's message, e.g.
                ``Field 'repeat_last_n': Value must be between 0 <= value <= 2147483647, but got -1``.
        """
        return eval_request(cls, body, vocab, base or cls(), chat)

    @classmethod
    def from_ollama(cls, options: dict[str, Any], base: Params | None = None) -> Params:
        """Read Ollama's ``options`` names (``temperature``, ``top_k``, ``repeat_penalty``, ...).

        Raises:
            ValueError: unknown option names (all of them, sorted).
        """
        return eval_ollama(cls, options, base or cls())
