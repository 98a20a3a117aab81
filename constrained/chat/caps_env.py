"""The caps probe's jinja environment: llama.cpp's usage tracking (``value_t::stats``, common/jinja/value.h) on
jinja2, for :mod:`constrained.chat.caps`.

The probe inputs are wrapped in ``dict`` / ``list`` / ``str`` subclasses (:func:`track`) whose accesses the probe
environment records as llama.cpp's runtime marks them: a member or index access marks the container and the value it
returns (runtime.cpp ``member_expression::execute_impl``), a filter, test or method marks its input and names the
operation (``try_builtin_func``, ``test_expression``), a ``{% for %}`` marks what it iterates, ``tojson`` and
``string`` mark their input deeply (value.cpp), and a value referenced by name is used when the template outputs,
compares, concatenates or tests it. The environment is the rendering one (:mod:`constrained.chat.jinja_env`) with
those records added. :class:`ProbeRun` is one ``caps_try_execute``.

Example:
    >>> run = ProbeRun(probe_environment().from_string("{{ messages[0].content }}"),
    ...                [{"role": "user", "content": "Hi"}, {"role": "user", "content": "unused"}])
    >>> run.output, run.used(run.messages[0]["content"]), run.used(run.messages[1]["content"])
    ('Hi', True, False)
"""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["ProbeRun", "probe_environment", "track"]


# ----------------------------------------------------------------------------- usage tracking (value_t::stats)
class _Stats:
    """The ``used`` flags and ``ops`` sets of one render, keyed by the identity of the tracked inputs."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        self.ops: dict[int, set[str]] = {}

    def mark(self, v: Any, deep: bool = False) -> None:
        # value_t::stats_t::mark_used
        if isinstance(v, _TRACKED):
            self.used.add(id(v))
        if deep and isinstance(v, (dict, list, tuple)):
            for x in dict.values(v) if isinstance(v, dict) else list.__iter__(v) if isinstance(v, list) else v:
                self.mark(x, True)

    def op(self, v: Any, name: str) -> None:
        if isinstance(v, _TRACKED):
            self.ops.setdefault(id(v), set()).add(name)

    def is_used(self, v: Any) -> bool:
        return id(v) in self.used

    def has_op(self, v: Any, name: str) -> bool:
        return name in self.ops.get(id(v), ())


_STATS: contextvars.ContextVar[_Stats | None] = contextvars.ContextVar("caps_stats", default=None)


def _mark(v: Any) -> None:
    s = _STATS.get()
    if s is not None:
        s.mark(v)


def _from_for_loop() -> bool:
    # the template's own {% for %} (its compiled code, or jinja2's LoopContext), not a filter iterating the value
    f = sys._getframe(3)
    name = f.f_code.co_filename
    return name == "<template>" or name.endswith(("jinja2/runtime.py", "jinja2\\runtime.py"))


def _loop(v: Any, op: str) -> None:
    # for_statement::execute_impl marks what it iterates
    s = _STATS.get()
    if s is not None and _from_for_loop():
        s.mark(v)
        s.op(v, op)
        if isinstance(v, str):
            # llama.cpp's engine: "Expected iterable or object type in for loop: got String"
            raise TypeError("Expected iterable or object type in for loop: got String")


class _TStr(str):
    """A probe string: used when output, concatenated, compared or tested (llama.cpp marks it at the identifier)."""

    __hash__ = str.__hash__

    def __str__(self) -> str:
        _mark(self)
        return str.__str__(self)

    def __iter__(self) -> Any:
        _loop(self, "array_access")
        return str.__iter__(self)

    def __add__(self, other: Any) -> Any:
        _mark(self)
        return str.__add__(self, other)

    def __radd__(self, other: Any) -> Any:
        _mark(self)
        if isinstance(other, str):
            return str.__add__(other, self)
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        _mark(self)
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        _mark(self)
        return str.__ne__(self, other)

    def __bool__(self) -> bool:
        _mark(self)
        return len(self) > 0


class _TList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        _loop(self, "array_access")
        return list.__iter__(self)


class _TDict(dict):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        _loop(self, "object_access")
        return dict.__iter__(self)

    def get(self, key: Any, default: Any = None) -> Any:
        v = dict.get(self, key, default)
        _mark(v)
        return v


_TRACKED = (_TStr, _TList, _TDict)


def track(v: Any) -> Any:
    """The probe input as tracked values (``from_json(..., mark_input)``): fresh objects, so identity is per value."""
    if isinstance(v, dict):
        return _TDict({k: track(x) for k, x in v.items()})
    if isinstance(v, list):
        return _TList(track(x) for x in v)
    if isinstance(v, str):
        return _TStr(v)
    return v


# ----------------------------------------------------------------------------- the probe environment
def _wrap_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    deep = name in ("tojson", "string")
    passed = getattr(fn, "jinja_pass_arg", None)

    def f(*args: Any, **kw: Any) -> Any:
        s = _STATS.get()
        if s is not None:
            v = args[1] if passed is not None and len(args) > 1 else args[0] if args else None
            s.mark(v, deep)
            s.op(v, name)
        return fn(*args, **kw)

    if passed is not None:
        f.jinja_pass_arg = passed  # type: ignore[attr-defined]
    return f


def _wrap_test(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    passed = getattr(fn, "jinja_pass_arg", None)

    def t(*args: Any, **kw: Any) -> Any:
        s = _STATS.get()
        if s is not None:
            v = args[1] if passed is not None and len(args) > 1 else args[0] if args else None
            s.mark(v)
            s.op(v, "test_is_" + name)
        return fn(*args, **kw)

    if passed is not None:
        t.jinja_pass_arg = passed  # type: ignore[attr-defined]
    return t


def _access(obj: Any, key: Any, value: Any, method: bool) -> None:
    # member_expression::execute_impl's stats: the container, the key and the value it gives are used
    s = _STATS.get()
    if s is None:
        return
    if isinstance(key, slice):
        s.mark(obj)
        s.op(obj, "slice")
        return
    if method:                                 # obj.strip, obj.items: try_builtin_func
        s.mark(obj)
        s.op(obj, str(key))
        return
    s.mark(obj)
    s.mark(value)
    if isinstance(obj, dict) or isinstance(key, (str, float, list)) or key is None:
        s.op(obj, "object_access")
    elif isinstance(key, int):
        s.op(obj, "array_access")


@functools.lru_cache(maxsize=1)
def probe_environment() -> Any:
    """The rendering environment with the usage records (built once)."""
    from .jinja_env import environment

    base = environment()

    class ProbeEnv(type(base)):  # type: ignore[misc]  # the rendering sandbox (lists' append/pop as llama.cpp's)
        def getitem(self, obj: Any, argument: Any) -> Any:
            v = super().getitem(obj, argument)
            _access(obj, argument, v, False)
            return v

        def getattr(self, obj: Any, attribute: str) -> Any:
            v = super().getattr(obj, attribute)
            _access(obj, attribute, v, callable(v))
            return v

    env = ProbeEnv(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, undefined=base.undefined,
                   extensions=[type(e) for e in base.extensions.values()])
    env.filters.update(base.filters)
    env.globals.update(base.globals)
    env.filters.update({k: _wrap_filter(k, f) for k, f in env.filters.items()})
    env.tests.update({k: _wrap_test(k, f) for k, f in env.tests.items()})
    output = base.finalize

    def finalize(v: Any) -> Any:
        _mark(v)
        return output(v)

    env.finalize = finalize
    return env


class ProbeRun:
    """One ``caps_try_execute``: the tracked inputs, whether the render succeeded, and its output."""

    def __init__(self, tmpl: Any, messages: list[Any], tools: list[Any] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.stats = _Stats()
        self.messages = track(messages)
        self.tools = track(tools or [])
        ctx: dict[str, Any] = {"messages": self.messages, "tools": self.tools, "bos_token": "", "eos_token": "",
                               "add_generation_prompt": True}
        self.extra = {k: track(v) for k, v in (extra or {}).items()}
        if "reasoning_effort" in self.extra:       # caps_apply_reasoning_effort binds both names to one value
            self.extra["reasoning_strength"] = self.extra["reasoning_effort"]
        ctx.update(self.extra)
        token = _STATS.set(self.stats)
        try:
            self.output = tmpl.render(**ctx)
            self.success = True
        except Exception:  # noqa: BLE001 - caps_try_execute ignores exceptions during the analysis
            self.output = ""
            self.success = False
        finally:
            _STATS.reset(token)

    def used(self, v: Any) -> bool:
        return self.stats.is_used(v)

    def has_op(self, v: Any, name: str) -> bool:
        return self.stats.has_op(v, name)
