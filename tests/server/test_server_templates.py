"""``/apply-template`` prompts for all 70 templates of the sdist's models/templates/, against the real llama-server.

The real server's answers are recorded in ``tests/data/server_templates.json`` by
``scripts/record_server_templates.py`` (it starts llama-server with ``--jinja --chat-template-file`` on the default
model for each template); here ``constrained.server.chat_api.chat_params`` renders the same conversations with the
same BOS/EOS texts (all 420 cases identical). A template whose prompt differed would be listed in :data:`KNOWN` with
the reason.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from constrained.chat import ChatTemplates, jinja_env
from constrained.server.chat_api import chat_params
from constrained.server.errors import HttpError
from oracle.cases.server import TEMPLATE_CASES
from oracle.sdist import llama_cpp_source

DATA = Path(__file__).resolve().parents[1] / "data" / "server_templates.json"
REC = json.loads(DATA.read_text()) if DATA.exists() else {"templates": {}, "date": "2026-01-01"}
# tools: test_apply_template_with_tools_as_llama_server (llama-server's tool handling)
CASES = {k: v for k, v in TEMPLATE_CASES.items() if k != "user-tools"}

# (template, case) -> why our prompt differs from llama-server's (none now: assistant prefills, enable_thinking's
# default and reasoning history follow constrained.chat.autoparser_prompt, as common_chat_templates_apply_jinja)
KNOWN: dict[tuple[str, str], str] = {}


def _ours(src: str, body: dict) -> tuple[int, str]:
    t = ChatTemplates(src, bos_token="<bos>", eos_token="<eos>", add_bos=True, add_eos=False)
    try:
        return 200, chat_params(dict(body), t, jinja=True)["prompt"]
    except HttpError as e:
        return e.status, e.message


PARAMS = [(name, case) for name in sorted(REC["templates"]) for case in CASES]


@pytest.mark.parametrize("name,case", PARAMS, ids=[f"{n[:-6]}-{c}" for n, c in PARAMS])
def test_apply_template_as_llama_server(name: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    known = KNOWN.get((name, case))
    rec = REC["templates"][name]
    assert "start_error" not in rec, rec
    want = rec[case]
    day = time.strptime(REC["date"], "%Y-%m-%d")
    monkeypatch.setattr(jinja_env, "now", lambda: day)
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    status, prompt = _ours(src, CASES[case])
    same = (status, prompt) == (200, want["body"].get("prompt")) if want["status"] == 200 else status == want["status"]
    if known:
        assert not same, f"listed as known but now identical: remove it from KNOWN ({known})"
        pytest.xfail(known)
    assert same, (status, prompt, want)


@pytest.mark.parametrize("name", sorted(REC["templates"]), ids=[n[:-6] for n in sorted(REC["templates"])])
def test_apply_template_with_tools_as_llama_server(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the recorded user-tools case with llama-server's own tool handling ("llama_server_compat": true; without it a
    # template that cannot render tools gets our generic format, constrained.chat.tools): the template is given
    # the tools as llama-server gives them
    want = REC["templates"][name]["user-tools"]
    monkeypatch.setattr(jinja_env, "now", lambda: time.strptime(REC["date"], "%Y-%m-%d"))
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    status, prompt = _ours(src, dict(TEMPLATE_CASES["user-tools"], llama_server_compat=True))
    assert (status, prompt if status == 200 else None) == (want["status"], want["body"].get("prompt")), name


@pytest.mark.parametrize("name", sorted(REC["templates"]), ids=[n[:-6] for n in sorted(REC["templates"])])
def test_content_caps_as_llama_server(name: str) -> None:
    # /props' chat_template_caps: whether the template takes string and/or typed content (jinja::caps_get)
    caps = REC["templates"][name]["caps"]
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    want = (caps["supports_string_content"], caps["supports_typed_content"])
    assert ChatTemplates(src).content_caps == want


def test_all_templates_recorded() -> None:
    names = sorted(p.name for p in (Path(llama_cpp_source()) / "models" / "templates").glob("*.jinja"))
    assert sorted(REC["templates"]) == names and len(names) == 70
