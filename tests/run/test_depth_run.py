"""A depth run end to end on tiny-llama: the shorter checkpoint, its ``bought`` record, its reload and its replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app import runs_tab
from toolkit.cli.main import main
from toolkit.events import DepthScored
from toolkit.models.layers import decoder_layers
from toolkit.store.runs import list_runs

TINY = ["--model", "tiny-llama", "--nsamples", "4", "--seqlen", "64", "--eval-seqlen", "64", "--eval-windows", "3"]


@pytest.fixture(scope="module")
def depth_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    root = tmp_path_factory.mktemp("depth")
    code = main(["prune", *TINY, "--method", "depth", "--sparsity", "structured:1 layer", "--save-model",
                 "--out", str(root / "runs"), "--json", str(root / "r.json")])
    assert code == 0
    return json.loads((root / "r.json").read_text()), root


def test_the_saved_model_is_one_layer_shorter_and_bought_says_shrunk(depth_run: tuple[dict, Path]) -> None:
    from transformers import AutoModelForCausalLM

    result, _ = depth_run
    bought = result["bought"]
    assert bought["stored_as"] == "shrunk" and bought["params_after"] * 2 == bought["params_before"]
    assert bought["bytes_measured"] and bought["smaller_as_saved"] and bought["bytes_stored"] < bought["bytes_dense"]
    assert result["achieved_sparsity"] == pytest.approx(0.5) and result["compression"]["unit"] is None
    assert result["compression"]["sparsity"]["layers"] == 1
    folder = Path(result["run_dir"]) / "model"
    assert not (folder / "prunelab_structure.json").exists()  # a standard checkpoint
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert len(decoder_layers(model)) == 1 and model.config.num_hidden_layers == 1
    assert model.dtype == torch.float32  # the source's dtype


def test_the_reloaded_model_scores_the_reported_perplexity(depth_run: tuple[dict, Path]) -> None:
    result, root = depth_run
    folder = Path(result["run_dir"]) / "model"
    assert main(["eval", "--model", str(folder), "--seqlen", "64", "--windows", "3",
                 "--json", str(root / "eval.json")]) == 0
    again = json.loads((root / "eval.json").read_text())
    assert again["ppl"]["wiki"] == pytest.approx(result["ppl"]["wiki"], rel=1e-5)


def test_the_replay_draws_the_layer_scores(depth_run: tuple[dict, Path]) -> None:
    _, root = depth_run
    (record,) = list_runs(root / "runs")
    (scored,) = [e for e in record.events() if isinstance(e, DepthScored)]
    assert scored.num_layers == 2 and len(scored.removed) == 1
    assert record.structure()[0]["removed_layers"] == scored.removed
    view = runs_tab.replay_view(record.run_id, str(root / "runs"))
    assert view["visible"]["depth"] and not view["visible"]["ranking"]
    bars = {trace.name: list(trace.x) for trace in view["depth"].data}
    assert bars["removed layer"] == scored.removed


@pytest.mark.parametrize(("argv", "message"), [
    (["--sparsity", "structured:2 layers"], "would remove 2 of the model's 2 decoder layers"),
    (["--sparsity", "structured:0 layers"], "cannot remove 0 layers"),
    (["--sparsity", "2:4"], "depth supports structured (structured:30%), not 2:4"),
    (["--sparsity", "structured:1 layer", "--unit", "heads"], "use --unit layers"),
    (["--sparsity", "structured:1 layer", "--quant", "int4"], "depth only prunes"),
])
def test_bad_depth_input_is_one_line_and_writes_no_run(tmp_path: Path, argv: list[str], message: str,
                                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs"
    assert main(["prune", *TINY, "--method", "depth", "--out", str(out), *argv]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and message in lines[-1], lines[-1]
    assert not list_runs(out)


def test_comparing_kept_heads_of_a_depth_run_says_it_removed_layers(depth_run: tuple[dict, Path]) -> None:
    from toolkit.compare.structure import load_kept
    from toolkit.errors import ToolkitError

    _, root = depth_run
    (record,) = list_runs(root / "runs")
    with pytest.raises(ToolkitError, match="removed whole decoder layers"):
        load_kept([record, record])


def test_depth_with_stream_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from toolkit.models.load import load_model
    from toolkit.models.shrunk import save_shrunk

    loaded = load_model("tiny-llama")
    folder = save_shrunk(loaded.model, loaded.codec, tmp_path / "tiny")
    argv = ["prune", *TINY[:6], "--model", str(folder), "--method", "depth", "--sparsity", "structured:1 layer",
            "--stream", "--out", str(tmp_path / "runs")]  # no perplexity flags: --stream scores none by default
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1].startswith("error: --stream runs linear-scope methods; depth changes the layers' shapes")
    assert not list_runs(tmp_path / "runs")


def test_the_cli_names_the_removed_layers_and_prints_every_layers_scores(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    assert main(["prune", *TINY[:6], "--method", "depth", "--sparsity", "structured:1 layer", "--eval", "none",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    (run,) = list_runs(tmp_path)
    (scored,) = [e for e in run.events() if isinstance(e, DepthScored)]
    head = out.index(next(line for line in out if line.startswith("decoder layers removed: ")))
    assert out[head].startswith(f"decoder layers removed: {scored.removed[0]} (1 of 2; scored by block influence")
    rows = out[head + 2:head + 4]
    assert [row.split()[0] for row in rows] == ["0", "1"]
    assert [row.endswith("removed") for row in rows] == [layer in scored.removed for layer in (0, 1)]
    assert float(rows[1].split()[1]) == pytest.approx(scored.influence[1], abs=1e-4)
    assert "relative reconstruction error" not in "\n".join(out)  # no empty per-linear table
