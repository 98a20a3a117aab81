"""A ``llama-server`` stand-in for llama-server's own test suite: its flags in, ``constrained serve`` out.

llama-server's ``tests/utils.py`` spawns ``$LLAMA_SERVER_BIN_PATH`` with llama-server flags. This launcher accepts
them, maps the hub models the suite asks for (``--hf-repo ggml-org/...``) to the local default GGUF, drops the flags
for download and UI options that have no effect here, and runs :func:`constrained.server.main.serve`.

    python -m tests.server_suite.launcher --hf-repo ggml-org/test-model-stories260K --port 8080 --no-jinja
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# flags of tests/utils.py that only concern downloads or the hub (value-taking, then boolean)
_DROP_VALUE = {"--hf-repo", "-hf", "-hfr", "--hf-file", "-hff", "--model-url", "-mu", "--mmproj-url"}
_DROP_FLAG = {"--offline"}


def map_args(argv: Sequence[str], default_model: str) -> list[str]:
    """The ``constrained serve`` command line for a llama-server one from the suite.

    >>> map_args(["--hf-repo", "ggml-org/x", "--hf-file", "x.gguf", "--port", "1"], "/m.gguf")
    ['--port', '1', '-m', '/m.gguf']
    """
    out: list[str] = []
    has_model = False
    wants_model = False
    it = iter(range(len(argv)))
    i = 0
    argv = list(argv)
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if name in _DROP_VALUE:
            wants_model = True
            i += 1 if "=" in a else 2
            continue
        if name in _DROP_FLAG:
            i += 1
            continue
        if name in ("-m", "--model"):
            has_model = True
        out.append(a)
        i += 1
    del it
    if wants_model and not has_model:
        out += ["-m", default_model]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Serve with ``constrained serve``, or, with ``CONSTRAINED_SUITE_REAL=1`` in the environment, exec the real
    llama-server (``oracle.llama_server``) on the same mapped flags: the suite's items run against both."""
    import os

    from constrained.llama import default_model_path

    args = map_args(sys.argv[1:] if argv is None else argv, default_model_path())
    if os.environ.get("CONSTRAINED_SUITE_REAL") == "1":
        from oracle.llama_server import llama_server_binary, one_thread_unless_told

        args = one_thread_unless_told(args)        # the oracle runs on one thread (the machine is shared)

        binary = llama_server_binary()
        os.environ["LD_LIBRARY_PATH"] = str(binary.parent) + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")
        os.execv(str(binary), [str(binary), *args])
    from constrained.server.main import serve

    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
