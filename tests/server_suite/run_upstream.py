"""Run llama-server's own pytest suite (the sdist's ``tools/server/tests/unit/``) against ``constrained serve``.

The test files, ``utils.py`` and ``pytest.ini`` are copied unchanged into a work folder laid out like the source
tree (``models/`` linked, so ``../../../models/templates`` resolves); two things are replaced around them:

- ``conftest.py``: the same two fixtures (one port per worker, every server stopped after each test) without
  ``ServerPreset.load_all()``, which would download the hub models;
- ``wget``: a stub module (``utils.py`` imports it; nothing in the selected tests downloads).

``LLAMA_SERVER_BIN_PATH`` points at :mod:`tests.server_suite.launcher`, which maps the hub models to the default
GGUF. Usage::

    python -m tests.server_suite.run_upstream [pytest args...]      # e.g. unit/test_basic.py -k props

Results of the whole selection, test by test, with the reason for each one that does not pass:
``tests/server_suite/UPSTREAM.md``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''"""Replacement conftest for running against constrained serve (no hub downloads)."""
import os
import pytest
from utils import *


@pytest.fixture(scope="session", autouse=True)
def configure_worker_port(request):
    worker_id = getattr(request.config, "workerinput", {}).get("workerid", "master")
    if worker_id != "master":
        worker_num = int(worker_id[2:])
        os.environ["PORT"] = str(int(os.environ.get("PORT", "8080")) + worker_num * 10)


@pytest.fixture(autouse=True)
def stop_server_after_each_test():
    yield
    for server in set(server_instances):
        server.stop()
'''

WGET_STUB = '''"""Stand-in for the ``wget`` package: the selected tests download nothing."""


def download(url, out=None, bar=None):
    raise RuntimeError(f"no network in this test run: {url}")
'''


def prepare(work: Path) -> Path:
    """Lay out the work folder; returns the tests directory to run pytest in."""
    from oracle.sdist import llama_cpp_source

    src = Path(llama_cpp_source())
    tests = work / "tools" / "server" / "tests"
    if tests.exists():
        shutil.rmtree(tests)
    (tests / "unit").mkdir(parents=True)
    for f in (src / "tools" / "server" / "tests" / "unit").glob("*.py"):
        shutil.copy2(f, tests / "unit" / f.name)
    for name in ("utils.py", "pytest.ini"):
        shutil.copy2(src / "tools" / "server" / "tests" / name, tests / name)
    (tests / "conftest.py").write_text(CONFTEST)
    stubs = work / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "wget.py").write_text(WGET_STUB)
    models = work / "models"
    if not models.exists():
        models.symlink_to(src / "models")
    return tests


def run(args: list[str], *, work: Path | None = None, port: int = 18500,
        timeout: float = 1800, real: bool = False) -> tuple[int, dict[str, str], str]:
    """Run pytest on the upstream suite with ``args``; returns (exit code, {test id: outcome}, output).
    ``real``: against the real llama-server, on the same mapped flags and model (the launcher execs it)."""
    from oracle.cases.server import launcher_binary
    from oracle.sdist import cache_dir

    work = work or (cache_dir() / ("server-suite-real" if real else "server-suite"))
    tests = prepare(work)
    junit = work / "junit.xml"
    env = dict(os.environ)
    env["LLAMA_SERVER_BIN_PATH"] = str(launcher_binary())
    env["PORT"] = str(port)
    env["PYTHONPATH"] = os.pathsep.join([str(work / "stubs"), str(tests), env.get("PYTHONPATH", "")])
    env.pop("DEBUG_EXTERNAL", None)
    env["CONSTRAINED_SUITE_REAL"] = "1" if real else "0"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=", "--rootdir",
           str(tests), f"--junitxml={junit}", *args]
    proc = subprocess.Popen(cmd, cwd=tests, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:      # stop pytest and every server it started (one process group)
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
    p = subprocess.CompletedProcess(cmd, proc.returncode, stdout, "")
    outcomes: dict[str, str] = {}
    if junit.exists():
        for tc in ET.parse(junit).getroot().iter("testcase"):
            name = f"{tc.get('classname', '').split('.')[-1]}::{tc.get('name')}"
            kind = "passed"
            for child in tc:
                if child.tag in ("failure", "error"):
                    kind = "failed"
                elif child.tag == "skipped":
                    kind = "skipped"
            outcomes[name] = kind
    return p.returncode, outcomes, p.stdout + p.stderr


def main() -> int:
    argv = sys.argv[1:]
    real = "--real" in argv             # python -m tests.server_suite.run_upstream --real unit/x.py
    argv = [a for a in argv if a != "--real"]
    code, outcomes, out = run(argv or ["unit/test_basic.py"], real=real)
    print(out[-20000:])
    return code


if __name__ == "__main__":
    sys.exit(main())
