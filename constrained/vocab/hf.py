"""Hugging Face tokenizers as llama.cpp would load the same model: the arguments of a ``Vocabulary``.

llama.cpp's converter (``convert_hf_to_gguf.py``) turns a Hugging Face tokenizer into GGUF keys: the raw token
strings of every id, a token type per id (added special tokens are control tokens, other added tokens user-defined,
SentencePiece's ``<0xXX>`` byte tokens byte tokens), the tokenizer model (``gpt2`` for byte-level BPE, ``llama``
for SentencePiece-style vocabularies) and the special ids. :func:`hf_vocab_args` builds those keys from the
tokenizer's own ``tokenizer.json`` and runs them through llama.cpp's load rules (:mod:`._load`), so the pieces (the
bytes each id decodes to), the token attributes and the end-of-generation set are the ones ``Vocabulary.from_gguf``
gives for the GGUF of the same model; tests check it id by id on a model converted from a GGUF.

Example:
    >>> from tokenizers import Tokenizer                                     # doctest: +SKIP
    >>> from constrained.vocab import Vocabulary                             # doctest: +SKIP
    >>> v = Vocabulary.from_hf(Tokenizer.from_file("tokenizer.json"), eos_token="</s>")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import VocabularyError
from ._load import load_vocab

__all__ = ["hf_gguf_metadata", "hf_vocab_args"]

# llama_token_type as GGUF stores it
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_ROLES = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "pad": "padding_token_id",
          "sep": "seperator_token_id", "mask": "mask_token_id"}


def _looks_special(text: str) -> bool:
    """The converter's ``does_token_look_special``: ``<|...|>`` and a few well-known bracketed names."""
    return (text.startswith("<|") and text.endswith("|>")) or text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")


def _backend_json(tokenizer: Any) -> dict[str, Any]:
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    to_str = getattr(backend, "to_str", None)
    if to_str is None:
        raise VocabularyError(f"{type(tokenizer).__name__} has no tokenizer.json (a Hugging Face *fast* tokenizer "
                              "or a tokenizers.Tokenizer is needed)")
    return json.loads(to_str())


def _walk(node: Any) -> list[dict[str, Any]]:
    """Every component of a normalizer/pre-tokenizer/decoder tree (Sequence nodes flattened)."""
    if not isinstance(node, dict):
        return []
    out = [node]
    for key in ("normalizers", "pretokenizers", "decoders"):
        for sub in node.get(key) or []:
            out.extend(_walk(sub))
    return out


def _kind(tj: dict[str, Any]) -> tuple[str, bool | None]:
    """llama.cpp's tokenizer model for this tokenizer.json, and add_space_prefix when it can be read off."""
    model = tj.get("model") or {}
    dec = [d.get("type") for d in _walk(tj.get("decoder"))]
    pre = _walk(tj.get("pre_tokenizer"))
    norm = _walk(tj.get("normalizer"))
    if model.get("type") == "WordPiece":
        return "bert", None
    if model.get("type") == "Unigram":
        return "t5", None
    if model.get("type") == "BPE" and ("ByteLevel" in dec or any(p.get("type") == "ByteLevel" for p in pre)):
        return "gpt2", False
    if model.get("type") == "BPE" and ("ByteFallback" in dec or "Metaspace" in dec or model.get("byte_fallback")):
        prepend = any(n.get("type") == "Prepend" for n in norm) or any(
            p.get("type") == "Metaspace" and p.get("prepend_scheme", "always") != "never" for p in pre)
        return "llama", prepend
    raise VocabularyError(f"unsupported Hugging Face tokenizer model {model.get('type')!r} (byte-level BPE, "
                          "SentencePiece-style BPE, WordPiece and Unigram are read)")


def hf_gguf_metadata(tokenizer: Any, *, eos_token: str | None = None, pre: str = "") -> dict[str, Any]:
    """The GGUF tokenizer keys llama.cpp's converter writes for ``tokenizer`` (texts as UTF-8 bytes).

    Args:
        tokenizer: a transformers fast tokenizer (``PreTrainedTokenizerFast``/``TokenizersBackend``) or a
            ``tokenizers.Tokenizer``.
        eos_token: the end-of-sequence token's text when the tokenizer object does not carry it.
        pre: the ``tokenizer.ggml.pre`` name (it only decides llama.cpp's detokenize clean-up flag).
    """
    tj = _backend_json(tokenizer)
    model_name, add_space_prefix = _kind(tj)
    vocab: dict[str, int] = dict((tj.get("model") or {}).get("vocab") or {})
    if model_name == "t5":
        vocab = {p[0]: i for i, p in enumerate((tj.get("model") or {}).get("vocab") or [])}
    added = {int(a["id"]): a for a in tj.get("added_tokens") or []}
    by_id: dict[int, str] = {i: t for t, i in vocab.items()}
    for i, a in added.items():
        by_id[i] = a["content"]
    n = max(by_id, default=-1) + 1
    if n == 0:
        raise VocabularyError("the Hugging Face tokenizer has no tokens")
    texts: list[bytes] = []
    types: list[int] = []
    unk = (tj.get("model") or {}).get("unk_token") or getattr(tokenizer, "unk_token", None)
    byte_fallback = model_name == "llama"
    for i in range(n):
        text = by_id.get(i)
        if text is None:                       # a hole in the ids: the converter writes a pad token
            texts.append(f"[PAD{i}]".encode())
            types.append(_UNUSED)
            continue
        a = added.get(i)
        if text == unk and model_name == "llama":  # SentencePiece's own unknown piece, even when listed as added
            types.append(_UNKNOWN)
        elif a is not None:
            types.append(_CONTROL if a.get("special") or _looks_special(text) else _USER_DEFINED)
        elif text == unk:
            types.append(_UNKNOWN)
        elif byte_fallback and _BYTE_TOKEN.fullmatch(text):
            types.append(_BYTE)
        else:
            types.append(_NORMAL)
        texts.append(text.encode("utf-8"))
    meta: dict[str, Any] = {"tokenizer.ggml.model": model_name.encode(), "tokenizer.ggml.pre": pre.encode(),
                            "tokenizer.ggml.tokens": texts, "tokenizer.ggml.token_type": types}
    if add_space_prefix is not None:
        meta["tokenizer.ggml.add_space_prefix"] = add_space_prefix
    text_to_id = {t: i for i, t in enumerate(texts)}
    for role, key in _ROLES.items():
        tid = getattr(tokenizer, f"{role}_token_id", None) if role != "mask" else getattr(tokenizer, "mask_token_id",
                                                                                         None)
        if role == "eos" and tid is None and eos_token is not None:
            tid = text_to_id.get(eos_token.encode())
        if isinstance(tid, int) and 0 <= tid < n:
            meta["tokenizer.ggml." + key] = tid
    return meta


def hf_vocab_args(tokenizer: Any, *, eos_token: str | None = None, eog_ids: Any = (), pre: str = "",
                  name: str | None = None) -> dict[str, Any]:
    """The arguments of the ``Vocabulary`` llama.cpp would load from the GGUF of this Hugging Face tokenizer.

    ``Vocabulary.from_hf(tokenizer, **kw)`` is ``Vocabulary(**hf_vocab_args(tokenizer, **kw))``.

    ``eog_ids`` adds end-of-generation ids beyond llama.cpp's rules (for instance a model's
    ``generation_config.eos_token_id`` list). The vocabulary tokenizes with the Hugging Face tokenizer.

    Raises:
        VocabularyError: a slow tokenizer (no tokenizer.json) or an unsupported tokenizer model.
    """
    meta = hf_gguf_metadata(tokenizer, eos_token=eos_token, pre=pre)
    label = name or str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    lv = load_vocab(meta, label)           # type: ignore[arg-type]  # the path is only used in messages
    eog = set(lv.eog_ids) | {int(i) for i in eog_ids if 0 <= int(i) < len(lv.pieces)}
    return dict(pieces=lv.pieces, eog_ids=eog, attrs=lv.attrs, tokenizer=_hf_tokenize(tokenizer), name=label,
                special_ids=lv.special, suppress_tokens=lv.suppress_tokens, vocab_type=lv.vocab_type,
                add_space_prefix=lv.add_space_prefix, clean_spaces=lv.clean_spaces if pre else None)


def _hf_tokenize(tokenizer: Any) -> Any:
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        return None
    is_transformers = hasattr(tokenizer, "backend_tokenizer")

    def tokenize(text: bytes, parse_special: bool) -> list[int]:
        s = text.decode("utf-8", "replace")
        if is_transformers:
            return list(encode(s, add_special_tokens=False, split_special_tokens=not parse_special))
        return list(encode(s, add_special_tokens=False).ids)

    return tokenize
