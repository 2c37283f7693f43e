"""GGUF export end to end on the embedded SmolLM2 (slow tier): a run exported, read back by an independent reader.

`python -m toolkit eval --model out.gguf` loads the file with transformers' GGUF reader (not the writer), so
the perplexity it gives checks names, layouts, the q/k permutation and the blocks at once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gguf import GGUFReader

from toolkit.cli.main import main

pytestmark = pytest.mark.slow

QUICK = ["--model", "smollm2-135m", "--protocol", "quick", "--save-model"]


def _prune(out: Path, *extra: str) -> tuple[Path, float]:
    before = set(out.iterdir()) if out.exists() else set()
    assert main(["prune", *QUICK, "--out", str(out), *extra]) == 0
    (run,) = set(out.iterdir()) - before
    return run, float(re.search(r'"wiki": ([0-9.]+)', (run / "result.json").read_text()).group(1))  # type: ignore[union-attr]


def _gguf_ppl(path: Path, capsys: pytest.CaptureFixture[str]) -> float:
    capsys.readouterr()
    assert main(["eval", "--model", str(path), "--seqlen", "128", "--windows", "16", "--dtype", "float32"]) == 0
    return float(capsys.readouterr().out.split("tokens): ")[-1].split()[0])


@pytest.mark.parametrize(("extra", "qtype"), [
    (("--method", "rtn", "--quant", "int4:g32"), "Q4_1"),
    (("--method", "depth", "--sparsity", "structured:4 layers"), "F16")])
def test_an_exported_run_reads_back_at_its_perplexity(extra: tuple[str, ...], qtype: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run, reported = _prune(tmp_path / "runs", *extra)
    out = tmp_path / "out.gguf"
    assert main(["export", str(run), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    kinds = {t.name: t.tensor_type.name for t in GGUFReader(out).tensors}
    assert kinds["blk.0.attn_q.weight"] == qtype and kinds["blk.0.attn_norm.weight"] == "F32"
    if qtype == "Q4_1":
        assert "210 quantized linears written code for code" in said
    else:
        assert sum(name.endswith("attn_q.weight") for name in kinds) == 26  # 30 layers, 4 removed
    assert _gguf_ppl(out, capsys) == pytest.approx(reported, rel=0.01)
