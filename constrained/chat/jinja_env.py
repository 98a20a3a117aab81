"""The Jinja environment chat templates are rendered in, as llama.cpp's engine (common/jinja/) renders them.

llama.cpp's engine (after huggingface.js's jinja) differs from jinja2's defaults; :func:`environment` gives a jinja2
sandbox configured and extended to match it: ``trim_blocks`` / ``lstrip_blocks`` on and the final newline dropped,
``{% generation %}`` blocks rendered as their content, an undefined value concatenating as the empty string, the two
mutating list methods ``append`` / ``pop``, and the globals and filters where llama.cpp's differ: ``raise_exception``
(message prefixed ``Jinja Exception:``), ``strftime_now`` (local time, C ``strftime``), ``tojson`` (``", "`` /
``": "`` separators, raw UTF-8 unless ``ensure_ascii``).

Example:
    >>> environment().from_string("{{ x | tojson }}").render(x={"a": [1, "é"]})
    '{"a": [1, "é"]}'
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["ChatTemplateError", "environment", "now"]


class ChatTemplateError(ValueError):
    """A template that cannot be applied (llama-server answers these as errors)."""


def _tojson(value: Any, indent: int | None = None, separators: Sequence[str] | None = None,
            ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    # jinja/value.cpp tojson: ", " / ": " separators without indent, "," with an indent
    if sort_keys:
        raise ChatTemplateError("tojson sort_keys=true not implemented")
    item = separators[0] if separators and len(separators) > 0 else ("," if indent is not None else ", ")
    key = separators[1] if separators and len(separators) > 1 else ": "
    return json.dumps(_plain(value), indent=indent, separators=(item, key), ensure_ascii=ensure_ascii)


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _raise(msg: str) -> None:
    raise ChatTemplateError(f"Jinja Exception: {msg}")


def now() -> time.struct_time:
    """The time ``strftime_now`` formats (local time, as llama.cpp's ``std::localtime``)."""
    return time.localtime()


def _strftime_now(fmt: str) -> str:
    return time.strftime(fmt, now())


_ENV: Any = None


def _generation_extension() -> Any:
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationBlock(Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers' assistant-mask marker): just the body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return GenerationBlock


_GenerationBlock: Any = None


def environment() -> Any:
    """The shared rendering environment (built once)."""
    global _ENV, _GenerationBlock
    if _ENV is None:
        _GenerationBlock = _generation_extension()
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

        # as llama.cpp's engine (after huggingface.js's jinja): trim_blocks and lstrip_blocks on, the final
        # newline dropped, {% generation %} blocks rendered as their content
        class _Undefined(jinja2.Undefined):
            # llama.cpp's engine: an undefined value concatenates as the empty string
            def __add__(self, other: Any) -> Any:
                return other if isinstance(other, str) else jinja2.Undefined.__add__(self, other)

            def __radd__(self, other: Any) -> Any:
                return other if isinstance(other, str) else jinja2.Undefined.__radd__(self, other)

        class _Env(ImmutableSandboxedEnvironment):
            # llama.cpp's engine has two mutating list methods, append and pop (jinja/value.cpp:1144-1155)
            def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
                if isinstance(obj, list) and attr in ("append", "pop"):
                    return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
                return bool(super().is_safe_attribute(obj, attr, value))

        env = _Env(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
                                            undefined=_Undefined,
                                            extensions=["jinja2.ext.loopcontrols", _GenerationBlock])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        _ENV = env
    return _ENV
