"""A run that removes heads and channels prints what each layer kept, not an empty per-linear table."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.events import UnitsRemoved
from toolkit.store.runs import list_runs


def test_the_cli_prints_the_units_kept_per_layer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["prune", "--model", "tiny-llama", "--nsamples", "2", "--seqlen", "32", "--eval", "none",
                 "--method", "numerical", "--sparsity", "structured:30%", "--unit", "heads+channels",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    (run,) = list_runs(tmp_path)
    removed = [e for e in run.events() if isinstance(e, UnitsRemoved)]
    head = out.index("units kept of all per decoder layer, and the output error after compensation (plain removal)")
    assert out[head + 1].split() == ["layer", "heads", "kv_heads", "channels"]
    for layer in (0, 1):
        cells = out[head + 2 + layer].split()
        assert cells[0] == str(layer)
        for kind, start in (("heads", 1), ("channels", 7)):
            (event,) = [e for e in removed if e.layer == layer and e.unit == kind]
            assert cells[start] == f"{event.kept}/{event.kept + event.removed}"
            assert float(cells[start + 1]) == pytest.approx(event.rel_error, abs=1e-4)
    assert sum(e.removed for e in removed) > 0
    assert "relative reconstruction error" not in "\n".join(out)
