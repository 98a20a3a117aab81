"""Sweep: Vocabulary.from_hf on every vocabulary-only GGUF that transformers can convert, against from_gguf.

Run in the scale venv: `.venv-vllm/bin/python scripts/sweep_hf_vocab.py`. Where transformers' own GGUF conversion
adds or retypes tokens (deepseek, llama-bpe, aquila, phi-3), the differences are printed: they are not ours.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import time, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from transformers import AutoTokenizer
from constrained.vocab import Vocabulary
from constrained.vocab.gguf_meta import read_metadata
from tests.oracle.sdist import vocab_ggufs
for p in vocab_ggufs():
    try:
        t=time.time()
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    except Exception as e:
        print(p.name, "HF cannot load:", type(e).__name__, str(e)[:100]); continue
    pre = read_metadata(p, skip={'tokenizer.ggml.merges','tokenizer.ggml.tokens','tokenizer.chat_template','tokenizer.ggml.scores','tokenizer.ggml.token_type', "tokenizer.ggml.precompiled_charsmap", "tokenizer.huggingface.json"}).get("tokenizer.ggml.pre", b"")
    pre = pre.decode() if isinstance(pre, bytes) else str(pre)
    try:
        a = Vocabulary.from_hf(tok, pre=pre)
    except Exception as e:
        print(p.name, "from_hf failed:", type(e).__name__, str(e)[:200]); continue
    b = Vocabulary.from_gguf(p)
    n = min(len(a), len(b))
    dp = sum(a.pieces[i]!=b.pieces[i] for i in range(n)); da = sum(a.attrs[i]!=b.attrs[i] for i in range(n))
    print(p.name, len(a), len(b), "piece diffs", dp, "attr diffs", da, "eog", a.eog_ids==b.eog_ids, "special", a.special_ids==b.special_ids, f"{time.time()-t:.1f}s")
    if dp or da:
        d=[i for i in range(n) if a.pieces[i]!=b.pieces[i] or a.attrs[i]!=b.attrs[i]][:4]
        for i in d: print("   ", i, a.pieces[i], b.pieces[i], a.attrs[i], b.attrs[i])
    if a.eog_ids!=b.eog_ids: print("   eog", sorted(a.eog_ids)[:8], sorted(b.eog_ids)[:8])
    if a.special_ids!=b.special_ids: print("   sp", {k:(a.special_ids[k], b.special_ids.get(k)) for k in a.special_ids if a.special_ids[k]!=b.special_ids.get(k)})
