"""An HTTP server that answers as llama-server does: ``constrained serve [llama-server flags]``.

- :mod:`.app`: the routes (Starlette) and middlewares; :mod:`.completions`: the completion routes' tasks, bodies
  and streams; :mod:`.state`: settings and shared state; :mod:`.bodies`: request/response bodies;
- :mod:`.engine`: the model worker, slots decoded together in one batch, each with its own sampler and grammar
  (:mod:`.scheduler`: slot choice, prompt cache, launch and release; :mod:`.batch`: the batch built and decoded;
  :mod:`.sampling`: each slot's token, stops and limits; :mod:`.slots`: task, result and slot data);
- :mod:`.task`: request fields → task parameters; :mod:`.chat_api`: chat bodies → prompts and grammars;
- :mod:`.results`: response JSON in llama-server's key order; :mod:`.jsonout`: JSON/SSE bytes;
- :mod:`.main`: the command line.

>>> from constrained.server.jsonout import dumps
>>> dumps({"bias": float("-inf")})
b'{"bias":null}'
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv=None) -> int:  # noqa: ANN001
    """``constrained serve``'s entry point."""
    from .main import main as _main

    return _main(argv)
