"""Token vocabularies exactly as llama.cpp's grammar sampler sees them.

A :class:`Vocabulary` holds, for every token id, the bytes that ``llama_token_to_piece(vocab, id, ..., lstrip=0,
special=True)`` renders, and the end-of-generation set that llama.cpp builds at load time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import IntFlag
from pathlib import Path
from typing import Any

from ..errors import VocabularyError
from . import _ext


class TokenAttr(IntFlag):
    """llama.cpp's ``llama_token_attr`` bits, as set at load time."""

    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5


_SPECIAL_ATTRS = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN


Tokenizer = Callable[[bytes, bool], list[int]]
"""``tokenize(text, parse_special) -> ids``, with add_special off, as ``llama_tokenize`` does."""


class Vocabulary:
    """The pieces and end-of-generation ids of a model's vocabulary.

    Args:
        pieces: the piece of every token id, as bytes (``special=True`` rendering).
        eog_ids: the end-of-generation token ids.
        attrs: optional ``llama_token_attr`` bits of every id (see :class:`TokenAttr`).
        tokenizer: optional ``tokenize(text, parse_special)``; needed by DRY's sequence breakers and by grammar
            token references that are not a single special token's text.
        name: a label for messages.

    Example:
        >>> v = Vocabulary([b"a", b"b", b""], eog_ids=[2])
        >>> len(v), v.piece(1), v.is_eog(2)
        (3, b'b', True)
    """

    def __init__(self, pieces: Sequence[bytes], eog_ids: Iterable[int] = (), *,
                 attrs: Sequence[int] | None = None, tokenizer: Tokenizer | None = None,
                 name: str = "vocabulary", special_ids: dict[str, int] | None = None,
                 suppress_tokens: Iterable[int] = (), vocab_type: str = "", add_space_prefix: bool | None = None,
                 clean_spaces: bool | None = None) -> None:
        if type(pieces) is tuple and set(map(type, pieces)) <= {bytes}:
            self.pieces: tuple[bytes, ...] = pieces       # already what the loop below makes (from_llama's kernel)
        else:
            self.pieces = tuple(bytes(p) for p in pieces)
        n = len(self.pieces)
        eog = frozenset(int(i) for i in eog_ids)
        bad = [i for i in eog if not 0 <= i < n]
        if bad:
            raise VocabularyError(f"{name}: end-of-generation ids out of range: {sorted(bad)}")
        self.eog_ids: frozenset[int] = eog
        if attrs is not None and len(attrs) != n:
            raise VocabularyError(f"{name}: {len(attrs)} token attributes for {n} tokens")
        if attrs is None:
            self.attrs: tuple[int, ...] | None = None
        elif type(attrs) is tuple and set(map(type, attrs)) <= {int}:
            self.attrs = attrs
        else:
            self.attrs = tuple(int(t) for t in attrs)
        self.tokenizer = tokenizer
        self.name = name
        #: llama.cpp's special token ids by role ("bos", "eos", "eot", "eom", "unk", "pad", "fim_pre"...); -1 = none
        self.special_ids: dict[str, int] = dict(special_ids or {})
        #: ``tokenizer.ggml.suppress_tokens`` (llama-server biases them to -inf)
        self.suppress_tokens: tuple[int, ...] = tuple(int(t) for t in suppress_tokens)
        #: "spm", "bpe", "wpm" or "ugm" when known
        self.vocab_type = vocab_type
        #: llama.cpp's detokenize flags (DRY renders tokens with ``detokenize``); None when unknown
        self.add_space_prefix = add_space_prefix
        self.clean_spaces = clean_spaces
        self._special_index: dict[bytes, int] | None = None

    def __len__(self) -> int:
        return len(self.pieces)

    def __repr__(self) -> str:
        return f"Vocabulary({self.name!r}, n_tokens={len(self)}, eog={sorted(self.eog_ids)})"

    def _check(self, token: int) -> int:
        t = int(token)
        if not 0 <= t < len(self.pieces):
            raise ValueError(f"token id {token} out of range for {self.name} ({len(self.pieces)} tokens)")
        return t

    def piece(self, token: int) -> bytes:
        """The bytes of ``token`` as ``llama_token_to_piece(..., special=True)`` renders them."""
        return self.pieces[self._check(token)]

    @property
    def bos_id(self) -> int:
        """The beginning-of-sequence id, or -1."""
        return self.special_ids.get("bos", -1)

    @property
    def eos_id(self) -> int:
        """The end-of-sequence id, or -1."""
        return self.special_ids.get("eos", -1)

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation (``llama_vocab_is_eog``)."""
        return self._check(token) in self.eog_ids

    def is_special(self, token: int) -> bool:
        """Whether ``token`` is a control, user-defined or unknown token (matched whole when parsing specials)."""
        if self.attrs is None:
            return False
        return bool(self.attrs[self._check(token)] & _SPECIAL_ATTRS)

    def special_token_id(self, text: bytes | str) -> int | None:
        """The id of the special (control, user-defined, unknown) token whose text is exactly ``text``, if any."""
        if isinstance(text, str):
            text = text.encode()
        if self._special_index is None:
            idx: dict[bytes, int] = {}
            if self.attrs is not None:
                for i, (p, a) in enumerate(zip(self.pieces, self.attrs, strict=True)):
                    if a & _SPECIAL_ATTRS:
                        idx.setdefault(p, i)
            self._special_index = idx
        return self._special_index.get(text)

    def tokenize(self, text: bytes | str, *, parse_special: bool = False) -> list[int]:
        """Tokenize ``text`` as ``llama_tokenize(..., add_special=False, parse_special)`` does.

        Needs a tokenizer (vocabularies from :meth:`from_llama` and :meth:`from_gguf` have llama.cpp's). Without
        one, only a text that is exactly one special token's text can be tokenized with ``parse_special=True``.

        Raises:
            VocabularyError: no tokenizer is available for this text.
        """
        if isinstance(text, str):
            text = text.encode()
        tid = self.special_token_id(text) if parse_special else None
        if self.tokenizer is not None:
            try:
                return list(self.tokenizer(text, parse_special))
            except VocabularyError:
                if tid is None:            # llama.cpp's tokenizer is missing: only a special token's text resolves
                    raise
        if tid is not None:
            return [tid]
        raise VocabularyError(
            f"{self.name}: cannot tokenize {text!r} without a tokenizer; load the vocabulary with "
            "Vocabulary.from_llama(...) to get llama.cpp's tokenizer")

    # ------------------------------------------------------------------ loaders

    @classmethod
    def from_gguf(cls, path: str | Path) -> Vocabulary:
        """Read a model's vocabulary from a GGUF file, without llama-cpp-python.

        Pieces and end-of-generation ids follow llama.cpp's load rules (``llama_vocab::impl::load``), so they equal
        what ``llama_token_to_piece(..., special=True)`` and ``llama_vocab_is_eog`` report for the same file.
        :meth:`tokenize` is llama.cpp's own tokenizer, loaded on first use through llama-cpp-python's
        vocabulary-only load (:class:`constrained.vocab.tokenizer.GgufTokenizer`); without llama-cpp-python it
        raises a VocabularyError naming the extra to install (a special token's exact text still resolves).

        Raises:
            VocabularyError: the file is missing, is not GGUF, or has no tokenizer.

        Example:
            >>> v = Vocabulary.from_gguf("ggml-vocab-gpt-2.gguf")  # doctest: +SKIP
            >>> len(v), v.piece(50256), sorted(v.eog_ids)  # doctest: +SKIP
            (50257, b'<|endoftext|>', [50256])
        """
        from ._load import load_vocab
        from .gguf_meta import read_metadata
        from .tokenizer import GgufTokenizer

        p = Path(path)
        meta = read_metadata(p, skip={"tokenizer.ggml.merges", "tokenizer.ggml.scores", "tokenizer.chat_template",
                                      "tokenizer.ggml.precompiled_charsmap", "tokenizer.huggingface.json"})
        lv = load_vocab(meta, p)
        return cls(lv.pieces, lv.eog_ids, attrs=lv.attrs, name=p.name, special_ids=lv.special,
                   suppress_tokens=lv.suppress_tokens, vocab_type=lv.vocab_type,
                   add_space_prefix=lv.add_space_prefix, clean_spaces=lv.clean_spaces,
                   tokenizer=GgufTokenizer(p))

    @classmethod
    def from_hf(cls, tokenizer: Any, **kwargs: Any) -> Vocabulary:
        """The vocabulary llama.cpp would load from the GGUF of a Hugging Face (fast) tokenizer.

        Pieces, attributes, special ids and end-of-generation ids follow llama.cpp's converter and load rules
        (see :func:`constrained.vocab.hf.hf_vocab_args` for the keyword arguments).

        Example:
            >>> from transformers import AutoTokenizer  # doctest: +SKIP
            >>> v = Vocabulary.from_hf(AutoTokenizer.from_pretrained("model_dir"))  # doctest: +SKIP
        """
        from .hf import hf_vocab_args

        return cls(**hf_vocab_args(tokenizer, **kwargs))

    @classmethod
    def from_llama(cls, llm: Any) -> Vocabulary:
        """The vocabulary of a loaded ``llama_cpp.Llama`` (or a ``llama_vocab`` pointer), read through its C API.

        The result has llama.cpp's own tokenizer, so :meth:`tokenize` works for any text.

        Example:
            >>> from llama_cpp import Llama  # doctest: +SKIP
            >>> v = Vocabulary.from_llama(Llama("model.gguf", vocab_only=True, verbose=False))  # doctest: +SKIP
        """
        import ctypes

        try:
            from llama_cpp import llama_cpp as L
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise VocabularyError("Vocabulary.from_llama needs llama-cpp-python: pip install 'constrained[llama]'") \
                from err
        model = getattr(llm, "_model", None)
        vocab = model.vocab if model is not None else llm
        name = Path(getattr(llm, "model_path", "") or "llama").name
        n = L.llama_vocab_n_tokens(vocab)
        pieces, attrs, eog = _read_tokens(L, vocab, n)
        n_sup = ctypes.c_int32(0)
        sup_ptr = L.llama_vocab_get_suppress_tokens(vocab, ctypes.byref(n_sup))
        suppress = [sup_ptr[i] for i in range(n_sup.value)] if n_sup.value > 0 else []
        special = {"bos": L.llama_vocab_bos(vocab), "eos": L.llama_vocab_eos(vocab), "eot": L.llama_vocab_eot(vocab)}
        vtype = {1: "spm", 2: "bpe", 3: "wpm", 4: "ugm"}.get(int(L.llama_vocab_type(vocab)), "")

        from .tokenizer import c_tokenize

        def tokenize(text: bytes, parse_special: bool) -> list[int]:
            return c_tokenize(L, vocab, text, False, parse_special, name)

        v = cls(pieces, eog, attrs=attrs, tokenizer=tokenize, name=name, special_ids=special,
                suppress_tokens=suppress, vocab_type=vtype)
        v._llama_owner = llm  # keep the model (and so the vocab pointer) alive
        return v


def _read_tokens(L: Any, vocab: Any, n: int) -> tuple[Any, Any, list[int]]:
    """Every token's piece (``llama_token_to_piece(..., lstrip=0, special=True)``), attribute bits and whether it
    ends generation, from llama.cpp's C API: the compiled loop (:mod:`constrained.vocab._read`, ~30x faster) where it
    is built and ``CONSTRAINED_PURE_PYTHON`` is unset, else :func:`_read_tokens_python` (the reference)."""
    import ctypes

    if _read_ext is not None:
        def addr(f: Any) -> int:
            return int(ctypes.cast(f, ctypes.c_void_p).value or 0)

        va = vocab if isinstance(vocab, int) else vocab.value if isinstance(vocab, ctypes.c_void_p) else addr(vocab)
        if va:
            return _read_ext.read_vocab(va, n, addr(L.llama_token_to_piece), addr(L.llama_vocab_is_eog),
                                        addr(L.llama_vocab_get_attr))
    return _read_tokens_python(L, vocab, n)


def _read_tokens_python(L: Any, vocab: Any, n: int) -> tuple[list[bytes], list[int], list[int]]:
    """The reference of :func:`_read_tokens`: one ctypes call per token and question."""
    import ctypes

    buf = ctypes.create_string_buffer(256)
    pieces: list[bytes] = []
    for i in range(n):
        k = L.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
        if k < 0:
            buf = ctypes.create_string_buffer(-k + 16)
            k = L.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
        pieces.append(buf.raw[:k])
    eog = [i for i in range(n) if L.llama_vocab_is_eog(vocab, i)]
    attrs = [int(L.llama_vocab_get_attr(vocab, i)) for i in range(n)]
    return pieces, attrs, eog


PURE = _ext.PURE
"""``CONSTRAINED_PURE_PYTHON=1``: :meth:`Vocabulary.from_llama` runs its Python loop even where the compiled one is
built."""
_read_ext: Any = _ext.read_ext
