"""Caches are keyed by content: two tokenizers with one name never share tokens, and a replaced
model file or text never reuses a stale dense perplexity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from toolkit.data.text import load_tokens
from toolkit.models.load import load_model
from toolkit.models.save import save_checkpoint
from toolkit.models.tokenizers import HFCodec
from toolkit.run.provenance import cached_dense_ppl, dense_ppl_key, store_dense_ppl, weights_stamp

EVALUATION = {"dataset": "wiki", "split": "test", "seqlen": 32, "windows": 2}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRUNELAB_CACHE", str(tmp_path / "cache"))


def _word_codec(vocabulary: list[str]) -> HFCodec:
    """A word-level tokenizer whose name is the same folder whatever its vocabulary (as two GGUFs in one folder)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"[UNK]": 0, **{word: i + 1 for i, word in enumerate(vocabulary)}}
    backend = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return HFCodec(PreTrainedTokenizerFast(tokenizer_object=backend, name_or_path="models/shared-folder"))


def test_two_tokenizers_with_one_name_do_not_share_cached_tokens() -> None:
    first, second = _word_codec(["the", "of"]), _word_codec(["of", "the"])
    assert first.name == second.name and first.fingerprint != second.fingerprint
    tokens_first = load_tokens("wiki", "test", first)
    tokens_second = load_tokens("wiki", "test", second)
    assert torch.equal(tokens_second, torch.tensor(second.encode(_wiki_test())))
    assert not torch.equal(tokens_first, tokens_second)
    assert torch.equal(load_tokens("wiki", "test", first), tokens_first)  # a cache hit gives the same ids


def _wiki_test() -> str:
    from toolkit.data.text import load_text

    return load_text("wiki", "test")


def test_replacing_a_checkpoint_invalidates_its_dense_perplexity(tmp_path: Path) -> None:
    folder = save_checkpoint(load_model("tiny-llama").model, load_model("tiny-llama").codec, tmp_path / "ckpt")
    windows = torch.zeros(2, 32, dtype=torch.long)
    key = dense_ppl_key(load_model(str(folder)), windows, EVALUATION)
    store_dense_ppl(key, 123.0)
    assert cached_dense_ppl(dense_ppl_key(load_model(str(folder)), windows, EVALUATION)) == 123.0
    torch.manual_seed(1)
    other = load_model("tiny-llama").model
    for parameter in other.parameters():
        parameter.data.normal_()
    other.save_pretrained(folder)  # the same folder, new weights
    assert cached_dense_ppl(dense_ppl_key(load_model(str(folder)), windows, EVALUATION)) is None


def test_a_replaced_file_with_the_same_size_and_mtime_gets_a_new_stamp(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"a" * 5000)
    before = weights_stamp(path)
    stat = path.stat()
    path.write_bytes(b"b" * 5000)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights_stamp(path) != before


def test_other_windows_or_config_give_another_key() -> None:
    loaded = load_model("tiny-llama")
    windows = torch.zeros(2, 32, dtype=torch.long)
    key = dense_ppl_key(loaded, windows, EVALUATION)
    assert dense_ppl_key(loaded, windows + 1, EVALUATION) != key  # another text or tokenizer
    loaded.model.config.rms_norm_eps = 1e-3
    assert dense_ppl_key(loaded, windows, EVALUATION) != key
