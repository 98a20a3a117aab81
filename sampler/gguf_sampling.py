"""A GGUF's ``general.sampling.*`` defaults, read as ``common_init_sampler_from_model`` reads them.

llama.cpp keeps every scalar metadata value as a string (``gguf_kv_to_str``: ``std::to_string`` for numbers), copies
it into a fixed buffer (64 bytes for ints, 128 for floats, 512 for the sequence) and parses it back with ``strtol`` /
``strtof``; array values are not kept at all. This module does the same, so a float key such as 0.1234567 comes
back as ``strtof("0.123457")``.

The metadata is read by the caller (``constrained.vocab.gguf_meta.sampling_metadata(path)``), so the sampler reads
no file format and imports nothing of ``constrained``.

Example:
    >>> from sampler.params import Params
    >>> Params.from_gguf({"general.sampling.top_k": 7, "general.sampling.sequence": b"top_k;temp"}).top_k
    7
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from .cconv import samplers_from_names, strtof, strtol

_INT_KEYS = {"top_k": "top_k", "penalty_last_n": "penalty_last_n", "mirostat": "mirostat"}
_FLOAT_KEYS = {"top_p": "top_p", "min_p": "min_p", "xtc_probability": "xtc_probability",
               "xtc_threshold": "xtc_threshold", "temp": "temp", "penalty_repeat": "penalty_repeat",
               "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta"}
_ORDER = ["top_k", "top_p", "min_p", "xtc_probability", "xtc_threshold", "temp", "penalty_last_n", "penalty_repeat",
          "mirostat", "mirostat_tau", "mirostat_eta"]
_USER_FLAG = {"sequence": "samplers", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
              "xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold", "temp": "temp",
              "penalty_last_n": "penalty_last_n", "penalty_repeat": "penalty_repeat", "mirostat": "mirostat",
              "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta"}


def _to_string(value: Any, vtype: str) -> str | None:
    """``gguf_kv_to_str`` for a scalar (None for arrays, which llama.cpp does not keep)."""
    if vtype == "ARRAY":
        return None
    if vtype == "STRING":
        return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
    if vtype == "BOOL":
        return "true" if value else "false"
    if vtype in ("FLOAT32", "FLOAT64"):
        return f"{float(value):f}"
    return str(int(value))


def sampling_kv(metadata: Mapping[str, Any]) -> dict[str, str]:
    """The scalar ``general.sampling.*`` values of a GGUF's metadata (key -> value, as
    ``constrained.vocab.gguf_meta.read_metadata`` gives it: ``bytes`` for strings) as ``gguf_kv_to_str`` strings,
    keys without the prefix.

    >>> sampling_kv({"general.sampling.top_k": 40, "general.sampling.temp": 0.1234567, "general.name": b"x"})
    {'top_k': '40', 'temp': '0.123457'}
    """
    out: dict[str, str] = {}
    for name, val in metadata.items():
        if not name.startswith("general.sampling."):
            continue
        if isinstance(val, (list, np.ndarray)):
            continue                                  # arrays are not kept by llama.cpp
        vtype = ("STRING" if isinstance(val, bytes) else "BOOL" if isinstance(val, bool)
                 else "FLOAT32" if isinstance(val, float) else "INT")
        out[name[len("general.sampling."):]] = _to_string(val, vtype)
    return out


def sampling_from_kv(kv: dict[str, str], base: Any, user_set: frozenset[str] = frozenset()) -> Any:
    """Apply ``general.sampling.*`` strings (keys without the prefix) over ``base``."""
    cur: dict[str, Any] = {}
    if "samplers" not in user_set and "sequence" in kv:
        buf = kv["sequence"].encode()[:511].decode("utf-8", "ignore")
        if len(kv["sequence"]) > 0:
            cur["samplers"] = samplers_from_names(buf.split(";"))
    for key in _ORDER:
        attr = _USER_FLAG[key]
        if attr in user_set or key not in kv or len(kv[key]) == 0:
            continue
        if key in _INT_KEYS:
            v, end = strtol(kv[key].encode()[:63].decode("utf-8", "ignore"))
            if end > 0:
                v &= 0xFFFFFFFF                       # (int32_t) of the long
                cur[attr] = v - 2**32 if v >= 2**31 else v
        else:
            fv, ok = strtof(kv[key].encode()[:127].decode("utf-8", "ignore"))
            if ok:
                cur[attr] = fv
    return replace(base, **cur)


def read_sampling_kv(metadata: Mapping[str, Any], base: Any, user_set: frozenset[str] = frozenset()) -> Any:
    """``base`` with a GGUF's ``general.sampling.*`` metadata applied (``common_init_sampler_from_model``)."""
    return sampling_from_kv(sampling_kv(metadata), base, user_set)
