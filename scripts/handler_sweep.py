"""Specialised tool-call handlers against llama.cpp's own code, every case (the suite runs a fixed sample:
tests/chat/test_handler_ports.py).

For each sdist template llama-server hands to a specialised handler we reproduce (default: all of them; or the
templates named), through the libcommon shim (``oracle/shims/render_shim.cpp``):

- setups: 7 tool sets x 2 conversations (plain; a past call and its result) x tool_choice auto / required / none /
  named x parallel_tool_calls true / false / absent x reasoning_format deepseek / none x enable_thinking default /
  false: prompt, grammar text,
  laziness, triggers, preserved tokens and generation prompt of ``common_chat_templates_apply`` against our
  server's ``chat_params`` (``llama_server_compat``);
- parses (handlers with replies in ``oracle.cases.handler_shim.REPLIES``): every prefix of each reply as a
  partial parse and the whole as final, under tool_choice auto / required / none x parallel on / off x
  reasoning_format deepseek / none x enable_thinking on / off: ``common_chat_parse``'s message against ours.

Run:  heavy .venv/bin/python scripts/handler_sweep.py [template.jinja ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from constrained.chat.handlers import handler_for  # noqa: E402
from oracle.cases.handler_shim import (  # noqa: E402
    ARRAYS,
    MIXED,
    PING,
    REPLIES,
    WEATHER,
    D,
    parse_differences,
    setup_differences,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("templates", nargs="*")
    ap.add_argument("--no-parse", action="store_true")
    a = ap.parse_args()
    names = a.templates or sorted(p.name for p in D.glob("*.jinja") if handler_for(p.read_text()))
    total = bad_total = 0
    for n in names:
        h = handler_for((D / n).read_text())
        if h is None:
            print(f"{n}: not a reproduced handler's template")
            continue
        cases, bad = setup_differences(n, thinking=(None, False))
        failed = {c for c, _ in bad}
        total, bad_total = total + cases, bad_total + len(failed)
        line = f"{n}: {h} setups {cases - len(failed)}/{cases} identical"
        if bad:
            line += f" (differ: {sorted(set(bad))[:6]})"
        if h in REPLIES and not a.no_parse:
            texts, calls, pbad = parse_differences(n, h, choices=("auto", "required", "none"),
                                                   tools=[WEATHER, MIXED, PING, ARRAYS], thinking=(True, False))
            total, bad_total = total + texts, bad_total + len(pbad)
            line += f"; parses {texts - len(pbad)}/{texts} identical ({calls} with calls)"
            if pbad:
                line += f" (differ: {[(b[0], b[1][:40], b[2]) for b in pbad[:4]]})"
        print(line, flush=True)
    print(f"total: {total - bad_total}/{total} identical")
    return 0 if bad_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
