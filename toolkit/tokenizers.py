"""Text ↔ token ids: a thin wrapper over HF tokenizers plus a byte codec for tiny test models."""

from __future__ import annotations

from typing import Protocol


class TextCodec(Protocol):
    """What the data module needs from a tokenizer."""

    name: str
    bos_id: int | None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        ...


class ByteCodec:
    """UTF-8 bytes as tokens (vocab 257, id 256 = BOS): tokenizer of the tiny random models."""

    vocab_size = 257
    name = "bytes"
    bos_id = 256

    def encode(self, text: str) -> list[int]:
        """One id per UTF-8 byte."""
        return list(text.encode("utf-8"))


class HFCodec:
    """A Hugging Face tokenizer, used without special tokens (BOS added per window if needed)."""

    def __init__(self, tokenizer) -> None:  # noqa: ANN001 - any PreTrainedTokenizer
        self.tokenizer = tokenizer
        self.name = getattr(tokenizer, "name_or_path", "hf")
        self.bos_id = tokenizer.bos_token_id

    def encode(self, text: str) -> list[int]:
        """Token ids, no special tokens, tokenized once for the whole text."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]
