"""The Jinja environment chat templates are rendered in, as llama.cpp's engine (common/jinja/) renders them.

llama.cpp's engine (after huggingface.js's jinja) differs from jinja2's defaults; :func:`environment` gives a jinja2
sandbox configured and extended to match it: ``trim_blocks`` / ``lstrip_blocks`` on and the final newline dropped,
``{% generation %}`` blocks rendered as their content, the two mutating list methods ``append`` / ``pop``, and the
globals and filters where llama.cpp's differ: ``raise_exception`` (message prefixed ``Jinja Exception:``),
``strftime_now`` (local time, C ``strftime``), ``tojson`` (``", "`` / ``": "`` separators, raw UTF-8 unless
``ensure_ascii``), ``default`` replacing ``none`` too, ``safe`` a no-op (jinja2's gives ``Markup``, which escapes
what is added to it), ``map`` / ``select`` / ``reject`` / ``selectattr`` / ``rejectattr`` giving lists (jinja2's
give generators, which ``tojson`` cannot write). Output and ``+`` / ``~`` follow runtime.cpp: ``{{ x }}`` writes
strings, numbers and booleans (floats as ``std::to_string`` without trailing zeros), the items of a list, and
nothing for ``none``, an undefined value or a mapping; a string plus anything is the string plus the value's
``as_string`` (Python-like reprs of lists and mappings); ``none`` or an undefined value beside a string is the empty
string.

Example:
    >>> environment().from_string("{{ x | tojson }}").render(x={"a": [1, "é"]})
    '{"a": [1, "é"]}'
    >>> environment().from_string("{{ 'n: ' + n }}|{{ n }}|{{ 'x' ~ none_value }}").render(n=0.5, none_value=None)
    'n: 0.5|0.5|x'
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ChatTemplateError

__all__ = ["ChatTemplateError", "as_string", "environment", "now"]


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


# ----------------------------------------------------------------------------- values as runtime.cpp writes them
def _float_str(v: float) -> str:
    # value_float_t::as_string: std::to_string (%f), trailing zeros removed, one kept after the point
    out = f"{v:f}"
    out = out.rstrip("0")
    return out + "0" if out.endswith(".") else out


def _repr(v: Any) -> str:
    # value_to_string_repr: a string quoted with ' (as JSON when it holds one), anything else its as_repr
    if isinstance(v, str):
        v = str.__str__(v)                 # the plain text (a probe's tracked string is not "used" by a repr)
        return json.dumps(v, ensure_ascii=False) if "'" in v else "'" + v + "'"
    if v is None:
        return "None"
    return as_string(v)


def as_string(v: Any) -> str:
    """``value_t::as_string`` (value.h): what a value becomes beside a string in ``+`` / ``~``.

    >>> as_string({"k": "v", "n": [1, None, True, 2.5]}), as_string(("a",))
    ("{'k': 'v', 'n': [1, None, True, 2.5]}", "('a',)")
    """
    import jinja2

    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float_str(v)
    if v is None:
        return "None"
    if isinstance(v, list):                 # the containers' own iteration: no probe tracking
        return "[" + ", ".join(_repr(x) for x in list.__iter__(v)) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(_repr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, dict):
        return "{" + ", ".join(_repr(k) + ": " + _repr(x) for k, x in dict.items(v)) + "}"
    if isinstance(v, jinja2.Undefined):
        raise TypeError("Undefined is not a string value")
    return str(v)


def _output(v: Any) -> str:
    # gather_string_parts_recursive (runtime.h): strings, numbers and booleans written, lists item by item, the
    # rest (none, undefined, mappings, functions) nothing
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, int, float)):
        return as_string(v)
    if isinstance(v, (list, tuple)):
        return "".join(_output(x) for x in v)
    return ""


def _type_name(v: Any) -> str:
    import jinja2

    if isinstance(v, jinja2.Undefined):
        return "Undefined"
    for kind, name in ((str, "String"), (bool, "Boolean"), (int, "Integer"), (float, "Float"), (list, "Array"),
                       (tuple, "Array"), (dict, "Object")):
        if isinstance(v, kind):
            return name
    return "None" if v is None else type(v).__name__


def _plus(left: Any, right: Any, op: str) -> Any:
    """``binary_expression::execute_impl`` for ``+`` and ``~`` (runtime.cpp:112-297)."""
    import jinja2

    lnull = left is None or isinstance(left, jinja2.Undefined)
    rnull = right is None or isinstance(right, jinja2.Undefined)
    if lnull or rnull:
        # workaround_concat_null_with_str: null/undefined beside a string is the empty string
        if lnull and isinstance(right, str):
            return right + ""
        if rnull and isinstance(left, str):
            return left + ""
        if isinstance(left, jinja2.Undefined) or isinstance(right, jinja2.Undefined):
            raise TypeError(f"Cannot perform operation {op} on undefined values")
        raise TypeError("Cannot perform operation on null values")
    num = (int, float)
    if op == "+" and isinstance(left, num) and isinstance(right, num) and not isinstance(left, bool) \
            and not isinstance(right, bool):
        if isinstance(left, float) or isinstance(right, float):
            return float(left) + float(right)
        return int(float(left) + float(right))          # computed in double, as llama.cpp
    if op == "+" and isinstance(left, list) and isinstance(right, list):
        return [*left, *right]
    if isinstance(left, str) and isinstance(right, str):
        return left + right
    if isinstance(left, str) or isinstance(right, str):
        return as_string(left) + as_string(right)
    raise TypeError(f'Unknown operator "{op}" between {_type_name(left)} and {_type_name(right)}')


#: the largest string or list a template may build (characters or items): an operator's template cannot
#: allocate gigabytes (``'a' * 10**8``, a loop doubling a string)
MAX_TEMPLATE_SIZE = 16 * 1024 * 1024
#: the largest integer power a template may compute, in bits (``10 ** 10000000`` would burn half a minute)
MAX_POWER_BITS = 4096


def _bounded(v: Any) -> Any:
    if isinstance(v, (str, list)) and len(v) > MAX_TEMPLATE_SIZE:
        raise OverflowError(f"template value too large: more than {MAX_TEMPLATE_SIZE} characters or items")
    return v


def _bounded_binop(op: str, left: Any, right: Any) -> Any:
    """``*`` and ``**`` with their results bounded (:data:`MAX_TEMPLATE_SIZE`, :data:`MAX_POWER_BITS`); otherwise
    Python's operators, as the sandbox used before."""
    import math
    import operator

    ints = isinstance(left, int) and isinstance(right, int)
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list)) and isinstance(n, int) and len(seq) * max(n, 0) > MAX_TEMPLATE_SIZE:
                raise OverflowError(f"template value too large: more than {MAX_TEMPLATE_SIZE} characters or items")
        if ints and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
            raise OverflowError(f"template arithmetic too large: more than {MAX_POWER_BITS} bits")
        return operator.mul(left, right)
    if ints and right > 0 and abs(left) > 1 and right * math.log2(abs(left)) > MAX_POWER_BITS:
        raise OverflowError(f"template arithmetic too large: more than {MAX_POWER_BITS} bits")
    return operator.pow(left, right)


def _concat(*values: Any) -> Any:
    # a ~ b ~ c as runtime.cpp evaluates it: ((a ~ b) ~ c)
    return functools.reduce(lambda a, b: _bounded(_plus(a, b, "~")), values)


def _safe(value: Any) -> Any:
    # value.cpp: "safe" is a no-op on strings (as_string otherwise)
    return value if isinstance(value, str) else as_string(value)


def _default(value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    # value.cpp default_value: none is replaced as well as an undefined value (jinja2: undefined only)
    import jinja2

    if value is None or isinstance(value, jinja2.Undefined) or (boolean and not value):
        return default_value
    return value


# value_undefined_t::get_builtins (value.cpp:1374-1405): the empty value each method of an undefined value gives
# (None: undefined)
_UNDEFINED_EMPTY: dict[str, Any] = {
    **dict.fromkeys(("capitalize", "join", "lower", "replace", "safe", "string", "strip", "title", "truncate",
                     "upper"), ""),
    **dict.fromkeys(("items", "list", "map", "reject", "rejectattr", "reverse", "select", "selectattr", "sort",
                     "unique"), []),
    **dict.fromkeys(("length", "sum", "wordcount"), 0),
    **dict.fromkeys(("first", "last", "max", "min"), None),
}

_ARRAY_FILTERS = ("map", "select", "reject", "selectattr", "rejectattr")


def _as_array(fn: Any) -> Any:
    # llama.cpp's map/select/... give arrays (value.cpp), which tojson and + can take; jinja2's give generators
    def f(*args: Any, **kw: Any) -> Any:
        return list(fn(*args, **kw))

    f.jinja_pass_arg = fn.jinja_pass_arg  # type: ignore[attr-defined]
    return f



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
        from jinja2.compiler import CodeGenerator
        from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

        # as llama.cpp's engine (after huggingface.js's jinja): trim_blocks and lstrip_blocks on, the final
        # newline dropped, {% generation %} blocks rendered as their content
        class _Undefined(jinja2.Undefined):
            # llama.cpp's engine (runtime.cpp member_expression, value.cpp value_undefined_t::get_builtins): a
            # member or item of an undefined value is undefined, its built-in methods give empty values
            # (`x.missing.items()` is an empty list), calling it is an error
            __slots__ = ()

            def __getattr__(self, name: str) -> Any:
                if name[:2] == "__":
                    raise AttributeError(name)
                if name == "default":
                    return lambda value="", *a, **k: value
                if name in _UNDEFINED_EMPTY:
                    empty = _UNDEFINED_EMPTY[name]
                    return lambda *a, **k: type(self)() if empty is None else type(empty)()
                return type(self)()

            def __getitem__(self, key: Any) -> Any:
                return type(self)()

        class _CodeGenerator(CodeGenerator):
            # a ~ b: runtime.cpp's rules (jinja2 joins str() of every operand), never folded as a constant
            def visit_Concat(self, node: Any, frame: Any) -> None:
                self.write("environment.concat_values(")
                for arg in node.nodes:
                    self.visit(arg, frame)
                    self.write(", ")
                self.write(")")

        class _Env(ImmutableSandboxedEnvironment):
            code_generator_class = _CodeGenerator
            intercepted_binops = frozenset(["+", "*", "**"])
            concat_values = staticmethod(_concat)

            # llama.cpp's engine has two mutating list methods, append and pop (jinja/value.cpp:1144-1155)
            def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
                if isinstance(obj, list) and attr in ("append", "pop"):
                    return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
                return bool(super().is_safe_attribute(obj, attr, value))

            def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
                if operator == "+":
                    return _bounded(_plus(left, right, operator))
                return _bounded_binop(operator, left, right)

            def getitem(self, obj: Any, argument: Any) -> Any:
                # member_expression on none, a number or a boolean: only a name (a built-in) may be asked for
                if (obj is None or isinstance(obj, (int, float))) and not isinstance(argument, str):
                    raise TypeError(f"Cannot access property with non-string: got {_type_name(argument)}")
                return super().getitem(obj, argument)

        env = _Env(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, undefined=_Undefined,
                   finalize=_output, extensions=["jinja2.ext.loopcontrols", _GenerationBlock])
        for name in _ARRAY_FILTERS:
            env.filters[name] = _as_array(env.filters[name])
        env.filters["safe"] = _safe
        env.filters["default"] = env.filters["d"] = _default
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        _ENV = env
    return _ENV
