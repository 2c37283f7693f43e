"""llama.cpp's measurements: the window NLL is PruneLab's, and a GGUF export scores in llama.cpp as in PruneLab.

The end-to-end test needs the optional extra (requirements-llamacpp.txt) and is skipped without it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.helpers.gguf_source import write_source
from toolkit.errors import ToolkitError
from toolkit.evaluation import llamacpp


def test_window_nll_is_the_cross_entropy_of_the_next_token() -> None:
    torch.manual_seed(0)
    logits = torch.randn(12, 50) * 3
    tokens = torch.randint(0, 50, (12,))
    expected = torch.nn.functional.cross_entropy(logits[:-1], tokens[1:]).item()
    assert llamacpp.window_nll(logits.numpy(), tokens.tolist()) == pytest.approx(expected, rel=1e-6)


def test_without_the_extra_one_line_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # any import of it raises ImportError, installed or not
    with pytest.raises(ToolkitError, match=r"requirements-llamacpp\.txt"):
        llamacpp.llama_cpp()


def test_an_export_scores_in_llama_cpp_as_in_prunelab(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from gguf import GGUFReader, GGUFWriter

    from toolkit.evaluation.perplexity import perplexity
    from toolkit.models.gguf_export import ExportTypes, export_gguf
    from toolkit.models.load import load_model

    model: Any = load_model("tiny-llama").model
    source = write_source(model.config, tmp_path / "source.gguf")
    vocab = tmp_path / "vocab.gguf"  # llama.cpp needs a vocabulary type to load: "no_vocab" takes token ids as they are
    writer = GGUFWriter(vocab, "llama")
    for key, field in GGUFReader(source).fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            writer.add_key_value(key, field.contents(), field.types[0])
    writer.add_tokenizer_model("no_vocab")
    writer.add_tensor("placeholder", np.zeros(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = export_gguf(model, {}, vocab, tmp_path / "out.gguf", ExportTypes("f32")).path
    torch.manual_seed(0)
    windows = torch.randint(0, model.config.vocab_size, (4, 64))
    ours = perplexity(model, windows, torch.device("cpu"))
    theirs = llamacpp.perplexity(out, windows.tolist())
    assert theirs == pytest.approx(ours, rel=0.01)
    speed = llamacpp.speed(out, windows[0, :16].tolist(), 8, repeats=1)
    assert speed.prefill_tps > 0 and speed.decode_tps > 0 and speed.threads == 1


def test_measure_llamacpp_refuses_before_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run of a model that is no GGUF (or no llama.cpp installed): one error line before any model loads."""
    from toolkit.cli.main import main

    assert main(["prune", "--model", "tiny-llama", "--method", "magnitude", "--sparsity", "50%", "--protocol",
                 "quick", "--eval", "none", "--save-model", "--out", str(tmp_path)]) == 0
    (run,) = list(tmp_path.iterdir())
    capsys.readouterr()
    assert main(["measure", str(run), "--llamacpp", "--batches", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
    assert "did not come from a GGUF" in err[0] or "requirements-llamacpp.txt" in err[0]
