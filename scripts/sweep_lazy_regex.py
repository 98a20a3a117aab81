"""Sweep: random ECMAScript trigger patterns, our translation vs std::regex (llama.cpp's find). Usage:
``python scripts/sweep_lazy_regex.py [n_patterns] [seed]``; prints each disagreement and the counts."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from constrained.errors import TriggerPatternError  # noqa: E402
from constrained.grammar.lazy_regex import TriggerPattern  # noqa: E402
from oracle.cases.lazy import random_pattern, random_text  # noqa: E402
from oracle.lazy import RegexError, regex_find  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    counts = {"same": 0, "both refuse": 0, "we refuse": 0, "DIFFER": 0}
    for _ in range(n):
        p = random_pattern(rng)
        try:
            tp: TriggerPattern | None = TriggerPattern.compile(p)
        except TriggerPatternError:
            tp = None
        for t in [random_text(rng) for _ in range(8)]:
            try:
                want = regex_find(p, t)
            except RegexError:
                want = None
            if tp is None:
                counts["both refuse" if want is None else "we refuse"] += 1
                break
            if want is None or tp.find(t) != want:
                counts["DIFFER"] += 1
                print("DIFFER", repr(p), t, want, None if want is None else tp.find(t))
                break
        else:
            counts["same"] += 1
    print(counts)


if __name__ == "__main__":
    main()
