"""Text ↔ token ids: a thin wrapper over HF tokenizers plus a byte codec for tiny test models."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Protocol


class TextCodec(Protocol):
    """What the data module needs from a tokenizer.

    ``name`` is for people; ``fingerprint`` identifies what decides the ids (two GGUF files in
    one folder share a name but not a fingerprint), so caches key on it.
    """

    @property
    def name(self) -> str:
        """The tokenizer's name, for people."""
        ...

    @property
    def bos_id(self) -> int | None:
        """The BOS id put at the start of every window where the model needs one, else None."""
        ...

    @property
    def fingerprint(self) -> str:
        """A hash of the tokenizer's definition: equal fingerprints give equal ids."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        ...


class ByteCodec:
    """UTF-8 bytes as tokens (vocab 257, id 256 = BOS): tokenizer of the tiny random models."""

    vocab_size = 257
    name = "bytes"
    bos_id = 256
    fingerprint = "bytes:utf-8:bos=256"

    def encode(self, text: str) -> list[int]:
        """One id per UTF-8 byte."""
        return list(text.encode("utf-8"))


class HFCodec:
    """A Hugging Face tokenizer, used without special tokens (BOS added per window if needed)."""

    def __init__(self, tokenizer) -> None:  # noqa: ANN001 - any PreTrainedTokenizer
        self.tokenizer = tokenizer
        self.name = getattr(tokenizer, "name_or_path", "hf")
        self.bos_id = tokenizer.bos_token_id

    # A plain property over a cached one: pyright does not accept a cached_property for the protocol's
    # read-only property (https://github.com/microsoft/pyright/issues/4343).
    @property
    def fingerprint(self) -> str:
        """Sha256 of the tokenizer's definition, plus the BOS id (computed once, see :attr:`_fingerprint`)."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        """Sha256 of the tokenizer's definition, plus the BOS id.

        The full definition of a fast tokenizer (its tokenizer.json: vocabulary, merges, normalizer,
        pre-tokenizer), else its class and sorted vocabulary.
        """
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            definition = backend.to_str()
        else:
            definition = json.dumps([type(self.tokenizer).__name__, sorted(self.tokenizer.get_vocab().items())])
        return hashlib.sha256(f"{definition}|bos={self.bos_id}".encode()).hexdigest()

    def encode(self, text: str) -> list[int]:
        """Token ids, no special tokens, tokenized once for the whole text."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


BYTES_MARKER = "prunelab_byte_tokenizer.json"
