"""llama.cpp's vocabulary load rules (``llama_vocab::impl::load`` in src/llama-vocab.cpp), for GGUF metadata.

Three things are reproduced: the token attributes after llama.cpp's load-time fix-ups, the piece of every token as
``llama_token_to_piece(..., lstrip=0, special=True)`` renders it, and the end-of-generation set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sampler.cconv import strtol

from ..errors import VocabularyError

NULL = -1

# llama_token_attr bits
A_UNDEFINED, A_UNKNOWN, A_UNUSED, A_NORMAL, A_CONTROL, A_USER_DEFINED, A_BYTE = 0, 1, 2, 4, 8, 16, 32
_ATTR_OF_TYPE = {2: A_UNKNOWN, 5: A_UNUSED, 1: A_NORMAL, 3: A_CONTROL, 4: A_USER_DEFINED, 6: A_BYTE, 0: A_UNDEFINED}

_EOT_TEXTS = {b"<|eot_id|>", b"<|im_end|>", b"<|end|>", b"<end_of_turn>", b"<|endoftext|>", b"<|end_of_text|>",
              b"<EOT>", b"_<EOT>", b"[EOT]", "<｜end▁of▁sentence｜>".encode(), b"<end_of_utterance>"}
_EOM_TEXTS = {b"<|eom_id|>"}
_FIM_PRE = {b"<|fim_prefix|>", b"<fim-prefix>", b"<fim_prefix>", "<｜fim▁begin｜>".encode(), b"<PRE>",
            "▁<PRE>".encode(), b"<|code_prefix|>", b"<|prefix|>"}
_FIM_SUF = {b"<|fim_suffix|>", b"<fim-suffix>", b"<fim_suffix>", "<｜fim▁hole｜>".encode(), b"<SUF>",
            "▁<SUF>".encode(), b"<|code_suffix|>", b"<|suffix|>"}
_FIM_MID = {b"<|fim_middle|>", b"<fim-middle>", b"<fim_middle>", "<｜fim▁end｜>".encode(), b"<MID>",
            "▁<MID>".encode(), b"<|code_middle|>", b"<|middle|>"}
_FIM_PAD = {b"<|fim_pad|>", b"<fim-pad>", b"<fim_pad>", b"<PAD>", b"[PAD]"}
_FIM_REP = {b"<|fim_repo|>", b"<|repo_name|>", b"<fim-repo>", b"<REPO>", b"<reponame>"}
_FIM_SEP = {b"<|file_sep|>"}
_EOG_TEXTS = {b"<|eot_id|>", b"<|im_end|>", b"<|end|>", b"<|return|>", b"<|call|>", b"<|flush|>", b"<|calls|>",
              b"<end_of_turn>", b"<|endoftext|>", b"</s>", b"<|eom_id|>", b"<EOT>", b"_<EOT>", b"[EOT]", b"[EOS]",
              b"<|end_of_text|>", b"<end_of_utterance>", b"<eos>", b"<turn|>", b"<|tool_response>",
              "<｜end▁of▁sentence｜>".encode(), b"[e~["}
_HARMONY_USER = {b"<|channel|>", b"<|message|>", b"<|start|>", b"<|constrain|>"}
_ESCAPED_PRE = {"gemma4", "granite-embed-multi-311m", "sarvam-moe"}
# BPE pre-tokenizers whose branch in llama_vocab::impl::load sets clean_spaces = false (all others keep true)
_BPE_NO_CLEAN = {"afmoe", "bailingmoe", "bailingmoe2", "chameleon", "cohere2moe", "command-r", "deepseek-coder",
                 "deepseek-llm", "deepseek-r1-qwen", "deepseek-v3", "f2llmv2", "gpt-4o", "granite-docling",
                 "granite-embed-multi-97m", "grok-2", "hunyuan", "hunyuan-dense", "hy_v4", "joyai-llm", "kanana2",
                 "kimi-k2", "kormo", "laguna", "llada-moe", "llama4", "minimax-m2", "poro-chat", "qwen2", "qwen35",
                 "sarvam-moe", "seed-coder", "smollm", "solar-open", "spark2_5", "superbpe", "talkie", "tekken",
                 "tiny_aya", "trillion", "ufakzeka", "viking", "youtu"}
_SPACE = "\u2581".encode()


def _gpt2_unicode_to_byte() -> dict[int, int]:
    """GPT-2's byte-level map, code point → byte (``unicode_utf8_to_byte_map``)."""
    direct = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out = {c: c for c in direct}
    n = 0
    for b in range(256):
        if b not in out:
            out[256 + n] = b
            n += 1
    return out


_U2B = _gpt2_unicode_to_byte()


def cpts_from_utf8(data: bytes) -> list[int]:
    """Code points as ``unicode_cpts_from_utf8`` decodes them: lenient, each bad byte becomes U+FFFD."""
    out: list[int] = []
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c < 0x80:
            out.append(c)
            i += 1
            continue
        ok = False
        if c & 0x40:
            if not c & 0x20:
                if i + 1 < n and data[i + 1] & 0xC0 == 0x80:
                    out.append(((c & 0x1F) << 6) | (data[i + 1] & 0x3F))
                    i += 2
                    ok = True
            elif not c & 0x10:
                if i + 2 < n and data[i + 1] & 0xC0 == 0x80 and data[i + 2] & 0xC0 == 0x80:
                    out.append(((c & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F))
                    i += 3
                    ok = True
            elif not c & 0x08:
                if i + 3 < n and all(data[i + k] & 0xC0 == 0x80 for k in (1, 2, 3)):
                    out.append(((c & 0x07) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6)
                               | (data[i + 3] & 0x3F))
                    i += 4
                    ok = True
        if not ok:
            out.append(0xFFFD)
            i += 1
    return out


def _cpt_to_utf8(c: int) -> bytes:
    # unicode_cpt_to_utf8 (code points here come from cpts_from_utf8, so at most 0x1FFFFF)
    if c <= 0x7F:
        return bytes([c])
    if c <= 0x7FF:
        return bytes([0xC0 | (c >> 6), 0x80 | (c & 0x3F)])
    if c <= 0xFFFF:
        return bytes([0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)])
    if c <= 0x10FFFF:
        return bytes([0xF0 | (c >> 18), 0x80 | ((c >> 12) & 0x3F), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)])
    raise VocabularyError(f"invalid codepoint {c:#x} in a byte-level BPE token")


def decode_byte_level(text: bytes) -> bytes:
    """``llama_decode_text``: GPT-2 byte-level BPE text → bytes, with its ``[UNK_BYTE_0x..]`` fallback."""
    try:
        return bytes(_U2B[ord(ch)] for ch in text.decode("utf-8"))
    except (UnicodeDecodeError, KeyError):
        pass
    out = bytearray()
    for c in cpts_from_utf8(text):
        b = _U2B.get(c)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + _cpt_to_utf8(c).hex().encode() + text + b"]"
    return bytes(out)


@dataclass
class LoadedVocab:
    vocab_type: str          # "spm", "bpe", "wpm", "ugm"
    texts: list[bytes]
    attrs: list[int]
    pieces: list[bytes]
    eog_ids: set[int]
    special: dict[str, int]  # bos, eos, eot, ... (NULL = -1)
    suppress_tokens: list[int]
    tokenizer_pre: str
    add_space_prefix: bool   # detokenize drops one leading space of the first token
    clean_spaces: bool       # detokenize's clean_up_tokenization_spaces passes


def _str(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def load_vocab(meta: dict[str, Any], path: Path) -> LoadedVocab:
    """Apply llama.cpp's load rules to GGUF metadata (see module docstring)."""
    if "tokenizer.ggml.model" not in meta:
        raise VocabularyError(f"{path}: GGUF has no tokenizer (no tokenizer.ggml.model key)")
    model = _str(meta["tokenizer.ggml.model"])
    pre = _str(meta.get("tokenizer.ggml.pre", b""))
    sp: dict[str, int] = {k: NULL for k in ("bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask", "fim_pre",
                                            "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep")}
    if model == "llama":
        vtype = "spm"
        sp.update(bos=1, eos=2, unk=0)
    elif model == "bert":
        vtype = "wpm"
        sp.update(bos=101, unk=100, sep=102, pad=0, mask=103)
    elif model in ("gpt2", "hybriddna", "whitespace"):
        vtype = "bpe"
        sp.update(bos=11, eos=11)
    elif model == "t5":
        vtype = "ugm"
        sp.update(eos=1, unk=2, pad=0)
    elif model == "gemma4":
        vtype = "bpe"
        pre = "gemma4"
    elif model in ("no_vocab", "none"):
        raise VocabularyError(f"{path}: GGUF has no tokenizer (tokenizer.ggml.model = {model!r})")
    else:
        raise VocabularyError(f"{path}: tokenizer model {model!r} is not supported (llama, gpt2, bert, t5, gemma4)")
    escape_ws = vtype != "bpe" or pre in _ESCAPED_PRE
    add_space_prefix = vtype == "spm"
    clean_spaces = vtype == "wpm" or (vtype == "bpe" and pre not in _BPE_NO_CLEAN)
    if "tokenizer.ggml.add_space_prefix" in meta:
        add_space_prefix = bool(meta["tokenizer.ggml.add_space_prefix"])

    texts = meta.get("tokenizer.ggml.tokens")
    if not isinstance(texts, list):
        raise VocabularyError(f"{path}: GGUF has no tokenizer vocabulary (tokenizer.ggml.tokens)")
    n = len(texts)
    texts = [t if t else b"[EMPTY_%d]" % i for i, t in enumerate(texts)]
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None and len(types) < n:
        raise VocabularyError(f"{path}: Index out of array bounds for toktypes ({len(types)} < {n})")
    attrs = [A_NORMAL] * n if types is None else [_ATTR_OF_TYPE.get(int(t), A_UNDEFINED) for t in types[:n]]
    token_to_id = {t: i for i, t in enumerate(texts)}
    if len(token_to_id) != n:
        raise VocabularyError(f"{path}: duplicate token texts (llama.cpp refuses this vocabulary)")

    keys = [("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"), ("eom", "eom_token_id"),
            ("unk", "unknown_token_id"), ("sep", "seperator_token_id"), ("pad", "padding_token_id"),
            ("mask", "mask_token_id"), ("fim_pre", "fim_pre_token_id"), ("fim_suf", "fim_suf_token_id"),
            ("fim_mid", "fim_mid_token_id"), ("fim_pad", "fim_pad_token_id"), ("fim_rep", "fim_rep_token_id"),
            ("fim_sep", "fim_sep_token_id"), ("fim_pre", "prefix_token_id"), ("fim_suf", "suffix_token_id"),
            ("fim_mid", "middle_token_id")]
    for name, key in keys:
        if sp[name] >= n:
            sp[name] = NULL
        v = meta.get("tokenizer.ggml." + key)
        if v is not None and 0 <= int(v) < n:
            sp[name] = int(v)

    suppress = [int(i) for i in meta.get("tokenizer.ggml.suppress_tokens", []) if 0 <= int(i) < n]

    # Text-based fix-ups. llama.cpp walks token_to_id, an unordered_map, and takes the first candidate text it
    # meets for each unset role: where a vocabulary has several (qwen2: <|endoftext|> and <|im_end|> for EOT), the
    # map's iteration order decides, so it is reproduced (_stdhash).
    roles = [("eot", _EOT_TEXTS), ("eom", _EOM_TEXTS), ("fim_pre", _FIM_PRE), ("fim_suf", _FIM_SUF),
             ("fim_mid", _FIM_MID), ("fim_pad", _FIM_PAD), ("fim_rep", _FIM_REP), ("fim_sep", _FIM_SEP)]
    walk_pos: dict[int, int] | None = None
    for role, cands in roles:
        if sp[role] != NULL:
            continue
        found = [token_to_id[t] for t in cands if t in token_to_id]
        if len(found) > 1:
            if walk_pos is None:
                from ._stdhash import iteration_order

                order = iteration_order(texts)
                walk_pos = {int(tid): pos for pos, tid in enumerate(order)}
            found.sort(key=walk_pos.__getitem__)
        if found:
            sp[role] = found[0]
            attrs[found[0]] |= A_CONTROL
    for i, t in enumerate(texts):
        if attrs[i] & A_CONTROL and not attrs[i] & A_UNUSED and b"unused" in t.split(b"\0", 1)[0]:
            attrs[i] |= A_UNUSED

    eog: set[int] = set()
    for role in ("fim_pad", "fim_rep", "fim_sep"):
        if sp[role] != NULL:
            eog.add(sp[role])
    for text in _EOG_TEXTS:
        tid = token_to_id.get(text)
        if tid is not None:
            eog.add(tid)
            attrs[tid] |= A_CONTROL
    for text in _HARMONY_USER:
        tid = token_to_id.get(text)
        if tid is not None:
            attrs[tid] = A_USER_DEFINED
    for role in ("eos", "eot", "eom"):
        if sp[role] != NULL:
            eog.add(sp[role])
    in_eog = {texts[t]: t for t in eog if 0 <= t < n}
    has_call = b"<|call|>" in in_eog or b"<|calls|>" in in_eog
    if b"<|end|>" in in_eog and ((b"<|return|>" in in_eog and has_call) or (has_call and b"<|flush|>" in in_eog)):
        end_id = in_eog[b"<|end|>"]
        eog.discard(end_id)
        attrs[end_id] = A_USER_DEFINED
    if b"</s>" in in_eog and (b"<|tool_response>" in in_eog or b"<|plamo:eos|>" in in_eog):
        s_id = in_eog[b"</s>"]
        eog.discard(s_id)
        attrs[s_id] = A_NORMAL

    pieces = [_piece(texts[i], attrs[i], vtype, escape_ws) for i in range(n)]
    return LoadedVocab(vtype, texts, attrs, pieces, eog, sp, suppress, pre, add_space_prefix, clean_spaces)


def _piece(text: bytes, attr: int, vtype: str, escape_ws: bool) -> bytes:
    """``llama_vocab::impl::token_to_piece(token, ..., lstrip=0, special=true)``."""
    if attr & (A_UNKNOWN | A_CONTROL | A_USER_DEFINED):
        return text
    if attr & A_NORMAL:
        if vtype != "bpe" or escape_ws:
            return text.replace(_SPACE, b" ")
        return decode_byte_level(text)
    if attr & A_BYTE:
        if vtype == "wpm":
            raise VocabularyError("WPM vocabulary with a byte token (llama.cpp aborts)")
        return bytes([strtol(text[3:5].decode("latin-1"), 16)[0] & 0xFF])   # token_to_byte: strtol(.., 16)
    return b""
