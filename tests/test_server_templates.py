"""``/apply-template`` prompts for all 70 templates of the sdist's models/templates/, against the real llama-server.

The real server's answers are recorded in ``tests/data/server_templates.json`` by
``scripts/record_server_templates.py`` (it starts llama-server with ``--jinja --chat-template-file`` on the default
model for each template); here ``constrained.server.chat_api.chat_params`` renders the same conversations with the
same BOS/EOS texts. Templates whose prompt differs are listed in :data:`KNOWN` with the reason.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from constrained.chat import ChatTemplates
from constrained.chat import template as tm
from constrained.server.chat_api import chat_params
from constrained.server.errors import HttpError
from tests.oracle.sdist import llama_cpp_source
from tests.server_support import TEMPLATE_CASES

DATA = Path(__file__).parent / "data" / "server_templates.json"
REC = json.loads(DATA.read_text()) if DATA.exists() else {"templates": {}, "date": "2026-01-01"}
# tools are rendered by the tool-call layer (constrained.chat.tools), not compared here
CASES = {k: v for k, v in TEMPLATE_CASES.items() if k != "user-tools"}

# (template, case) -> why our prompt differs from llama-server's
_PREFILL = """Apertus-8B-Instruct Apriel-1.6-15b-Thinker-fixed Bielik-11B-v3.0-Instruct ByteDance-Seed-OSS Cohere2MoE CohereForAI-c4ai-command-r-plus-tool_use
CohereForAI-c4ai-command-r7b-12-2024-tool_use GLM-4.6 GLM-4.7-Flash HuggingFaceTB-SmolLM3-3B Kimi-K2-Instruct LFM2-8B-A1B
LFM2.5-8B-A1B LFM2.5-Instruct MiniMax-M2 MiniMax-M3 NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 NVIDIA-Nemotron-Nano-v2
Qwen-QwQ-32B Spark2.5 StepFun3.5-Flash deepseek-ai-DeepSeek-R1-Distill-Llama-8B deepseek-ai-DeepSeek-R1-Distill-Qwen-32B deepseek-ai-DeepSeek-V4-Flash-0731
deepseek-ai-DeepSeek-V4 google-gemma-4-31B-it-interleaved google-gemma-4-31B-it ibm-granite-granite-3.3-2B-Instruct llama-cpp-deepseek-r1 llama-cpp-rwkv-world
microsoft-Phi-3.5-mini-instruct mistralai-Ministral-3-14B-Reasoning-2512 moonshotai-Kimi-K2 muse-glimmer openai-gpt-oss-120b openbmb-MiniCPM5-1B
poolside-Laguna-XS-2.1 poolside-Laguna-XS.2 unsloth-mistral-Devstral-Small-2507 upstage-Solar-Open-100B""".split()
_WHY_PREFILL = ("assistant prefill with --jinja: llama-server continues the last message through its template "
                "autoparser (reasoning markers, template-diff surgery), which is not ported")
_WHY_THINKING = ("enable_thinking: llama-server enables it only when its autoparser detects reasoning markers in the "
                 "template; we pass enable_thinking=true")
_WHY_REASONING_HISTORY = ("past assistant turns: llama-server renders them with the reasoning fields its autoparser "
                          "adds; not ported")
KNOWN: dict[tuple[str, str], str] = {
    **{(f"{n}.jinja", c): _WHY_PREFILL for n in _PREFILL for c in ("prefill", "prefill-typed")},
    **{("Apertus-8B-Instruct.jinja", c): _WHY_THINKING for c in ("user", "multi-turn", "no-generation-prompt",
                                                                  "typed-content")},
    ("deepseek-ai-DeepSeek-V4-Flash-0731.jinja", "multi-turn"): _WHY_REASONING_HISTORY,
    ("deepseek-ai-DeepSeek-V4.jinja", "multi-turn"): _WHY_REASONING_HISTORY,
}


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
    monkeypatch.setattr(tm, "_now", lambda: day)
    src = (Path(llama_cpp_source()) / "models" / "templates" / name).read_text(encoding="utf-8")
    status, prompt = _ours(src, CASES[case])
    same = (status, prompt) == (200, want["body"].get("prompt")) if want["status"] == 200 else status == want["status"]
    if known:
        assert not same, f"listed as known but now identical: remove it from KNOWN ({known})"
        pytest.xfail(known)
    assert same, (status, prompt, want)


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
