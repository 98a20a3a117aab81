"""``/props``' ``chat_template_caps`` as llama-server computes them (common/jinja/caps.cpp's probe).

The real llama-server's whole caps dict for each of the 70 templates of the sdist's models/templates/ is recorded in
``tests/data/server_templates.json`` (``scripts/record_server_templates.py`` starts it with ``--jinja
--chat-template-file`` on the default model and reads ``/props``). Here :func:`constrained.chat.caps.template_caps`
must give the same dict, keys in the same order, for every template; ``constrained serve`` must answer it in
``/props`` over HTTP for every template; and, live, ``/props``' caps of the real binary and ours are compared for
the default model's own template and for a tool template.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.caps import TemplateCaps, probe_caps, template_caps
from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer, free_port
from oracle.sdist import llama_cpp_source

DATA = Path(__file__).resolve().parents[1] / "data" / "server_templates.json"
REC = json.loads(DATA.read_text())["templates"]
NAMES = sorted(REC)
TEMPLATES = Path(llama_cpp_source()) / "models" / "templates"


def _source(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def test_recording_covers_all_templates() -> None:
    assert NAMES == sorted(p.name for p in TEMPLATES.glob("*.jinja"))
    assert all("caps" in REC[n] for n in NAMES)
    # the recording is not uniform: every cap the probe computes is true for some templates and false for others
    for key in TemplateCaps().to_map():
        assert {REC[n]["caps"][key] for n in NAMES} == {True, False} or key == "supports_string_content", key


@pytest.mark.parametrize("name", NAMES, ids=[n[:-6] for n in NAMES])
def test_template_caps_as_llama_server(name: str) -> None:
    want = REC[name]["caps"]
    got = template_caps(ChatTemplates(_source(name)).source)
    assert list(got.items()) == list(want.items())


def test_probe_unparsable_template_keeps_defaults() -> None:
    assert probe_caps("{% for %}") == TemplateCaps()


# ---------------------------------------------------------------------------- /props over HTTP, all 70 templates
@pytest.fixture(scope="module")
def served(default_model_path: str):
    """``constrained serve`` in this process (one model load); the test swaps the state's templates."""
    import uvicorn

    from constrained.llama.flags import parse_server_args
    from constrained.server.app import ServerState, build_app
    from constrained.server.main import config_from_args

    cfg = config_from_args(parse_server_args(["-m", default_model_path, "-c", "512", "-np", "1", "-t", "1", "--jinja"]))
    cfg.log_requests = False
    state = ServerState.load(cfg)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(state), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started

    class Srv:
        pass

    s = Srv()
    s.port, s.state = port, state  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        server.should_exit = True
        th.join(30)
        state.engine.stop()


def test_props_caps_all_templates(served) -> None:
    bos, eos = served.state.templates.bos_token, served.state.templates.eos_token
    wrong = {}
    for name in NAMES:
        served.state.templates = ChatTemplates(_source(name), bos_token=bos, eos_token=eos)
        st, _, body = raw(served, "GET", "/props")
        assert st == 200
        props = json.loads(body)
        if list(props["chat_template_caps"].items()) != list(REC[name]["caps"].items()):
            wrong[name] = props["chat_template_caps"]
    assert not wrong


# ---------------------------------------------------------------------------- live, against the real binary
@pytest.mark.parametrize("template", [None, "Qwen-Qwen2.5-7B-Instruct.jinja"], ids=["model-template", "qwen2.5"])
def test_props_caps_as_real_llama_server(template: str | None, default_model_path: str) -> None:
    args = ["-m", default_model_path, "-c", "512", "-np", "1", "-t", "1", "--jinja"]
    if template:
        args += ["--chat-template-file", str(TEMPLATES / template)]
    caps = []
    for start in (LlamaServer, ours):
        with start(args) as srv:
            st, _, body = raw(srv, "GET", "/props")
            assert st == 200
            caps.append(json.loads(body)["chat_template_caps"])
    assert list(caps[0].items()) == list(caps[1].items())


def test_reasoning_format_flag_reaches_chat_params() -> None:
    # --reasoning-format: the server's default for chat requests (chat_params' reasoning_format; "none" keeps the
    # reasoning in the content)
    from constrained.llama.flags import parse_server_args
    from constrained.server.main import config_from_args

    assert config_from_args(parse_server_args(["--reasoning-format", "none"])).reasoning_format == "none"
    assert config_from_args(parse_server_args([])).reasoning_format == "auto"
