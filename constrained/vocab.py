"""Token vocabularies exactly as llama.cpp's grammar sampler sees them.

A :class:`Vocabulary` holds, for every token id, the bytes that ``llama_token_to_piece(vocab, id, ..., lstrip=0,
special=True)`` renders, and the end-of-generation set that llama.cpp builds at load time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum

from .errors import VocabularyError


class TokenAttr(IntEnum):
    """GGUF ``tokenizer.ggml.token_type`` values (llama.cpp's ``llama_token_type``)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


Tokenizer = Callable[[bytes, bool], list[int]]
"""``tokenize(text, parse_special) -> ids``, with add_special off, as ``llama_tokenize`` does."""


class Vocabulary:
    """The pieces and end-of-generation ids of a model's vocabulary.

    Args:
        pieces: the piece of every token id, as bytes (``special=True`` rendering).
        eog_ids: the end-of-generation token ids.
        token_types: optional GGUF token type of every id (see :class:`TokenAttr`).
        tokenizer: optional ``tokenize(text, parse_special)``; needed by DRY's sequence breakers and by grammar
            token references that are not a single special token's text.
        name: a label for messages.

    Example:
        >>> v = Vocabulary([b"a", b"b", b""], eog_ids=[2])
        >>> len(v), v.piece(1), v.is_eog(2)
        (3, b'b', True)
    """

    def __init__(self, pieces: Sequence[bytes], eog_ids: Iterable[int] = (), *,
                 token_types: Sequence[int] | None = None, tokenizer: Tokenizer | None = None,
                 name: str = "vocabulary", bos_id: int | None = None, eos_id: int | None = None,
                 eot_id: int | None = None) -> None:
        self.pieces: tuple[bytes, ...] = tuple(bytes(p) for p in pieces)
        n = len(self.pieces)
        eog = frozenset(int(i) for i in eog_ids)
        bad = [i for i in eog if not 0 <= i < n]
        if bad:
            raise VocabularyError(f"{name}: end-of-generation ids out of range: {sorted(bad)}")
        self.eog_ids: frozenset[int] = eog
        if token_types is not None and len(token_types) != n:
            raise VocabularyError(f"{name}: {len(token_types)} token types for {n} tokens")
        self.token_types: tuple[int, ...] | None = tuple(int(t) for t in token_types) if token_types is not None else None
        self.tokenizer = tokenizer
        self.name = name
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.eot_id = eot_id
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

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation (``llama_vocab_is_eog``)."""
        return self._check(token) in self.eog_ids

    def is_special(self, token: int) -> bool:
        """Whether ``token`` is a control or user-defined token (matched whole when parsing specials)."""
        if self.token_types is None:
            return False
        return self.token_types[self._check(token)] in (TokenAttr.CONTROL, TokenAttr.USER_DEFINED)

    def special_token_id(self, text: bytes | str) -> int | None:
        """The id of the control/user-defined token whose text is exactly ``text``, if any."""
        if isinstance(text, str):
            text = text.encode()
        if self._special_index is None:
            idx: dict[bytes, int] = {}
            if self.token_types is not None:
                for i, (p, t) in enumerate(zip(self.pieces, self.token_types)):
                    if t in (TokenAttr.CONTROL, TokenAttr.USER_DEFINED):
                        idx.setdefault(p, i)
            self._special_index = idx
        return self._special_index.get(text)

    def tokenize(self, text: bytes | str, *, parse_special: bool = False) -> list[int]:
        """Tokenize ``text`` as ``llama_tokenize(..., add_special=False, parse_special)`` does.

        Needs a tokenizer (vocabularies from :meth:`from_llama` have one). Without one, only a text that is
        exactly one special token's text can be tokenized with ``parse_special=True``.

        Raises:
            VocabularyError: no tokenizer is available for this text.
        """
        if isinstance(text, str):
            text = text.encode()
        if self.tokenizer is not None:
            return list(self.tokenizer(text, parse_special))
        if parse_special:
            tid = self.special_token_id(text)
            if tid is not None:
                return [tid]
        raise VocabularyError(
            f"{self.name}: cannot tokenize {text!r} without a tokenizer; load the vocabulary with "
            "Vocabulary.from_llama(...) to get llama.cpp's tokenizer")
