"""Sweep: Vocabulary.from_hf on every vocabulary-only GGUF that transformers can convert, against from_gguf.

Run in the scale venv: `.venv-vllm/bin/python scripts/sweep_hf_vocab.py`. Where transformers' own GGUF conversion
adds or retypes tokens (deepseek, llama-bpe, aquila, phi-3), the differences are printed: they are not ours.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SKIP = {"tokenizer.ggml.merges", "tokenizer.ggml.tokens", "tokenizer.chat_template", "tokenizer.ggml.scores",
         "tokenizer.ggml.token_type", "tokenizer.ggml.precompiled_charsmap", "tokenizer.huggingface.json"}


def main() -> int:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from transformers import AutoTokenizer

    from constrained.vocab import Vocabulary
    from constrained.vocab.gguf_meta import read_metadata
    from oracle.sdist import vocab_ggufs

    for p in vocab_ggufs():
        t = time.time()
        try:
            tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        except Exception as e:  # noqa: BLE001 - transformers cannot import every architecture
            print(p.name, "transformers cannot load it:", type(e).__name__, str(e)[:100])
            continue
        pre = read_metadata(p, skip=_SKIP).get("tokenizer.ggml.pre", b"")
        pre = pre.decode() if isinstance(pre, bytes) else str(pre)
        try:
            a = Vocabulary.from_hf(tok, pre=pre)
        except Exception as e:  # noqa: BLE001
            print(p.name, "from_hf failed:", type(e).__name__, str(e)[:200])
            continue
        b = Vocabulary.from_gguf(p)
        n = min(len(a), len(b))
        diffs = [i for i in range(n) if a.pieces[i] != b.pieces[i] or a.attrs[i] != b.attrs[i]]
        print(p.name, len(a), len(b), "ids differing", len(diffs), "eog equal", a.eog_ids == b.eog_ids,
              "special equal", a.special_ids == b.special_ids, f"{time.time() - t:.1f}s")
        for i in diffs[:4]:
            print("   ", i, a.pieces[i], b.pieces[i], a.attrs[i], b.attrs[i])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
