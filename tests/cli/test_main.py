"""The CLI end to end on a tiny model: result keys, run store, export, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.store.runs import list_runs, open_run

RESULT_KEYS = {"model", "method", "options", "sparsity", "achieved_sparsity", "ppl", "dense_ppl", "prune_seconds",
               "peak_rss_mb", "device", "protocol", "layers", "versions", "schema", "compression", "quant", "unit",
               "accounting"}
TINY = ["--model", "tiny-llama", "--nsamples", "4", "--seqlen", "64", "--eval-seqlen", "64", "--eval-windows", "3"]


def test_prune_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs"
    code = main(["prune", *TINY, "--method", "sparsegpt", "--sparsity", "2:4", "--eval-dense", "--set",
                 "block_size=32", "--out", str(out), "--save-model", "--json", str(tmp_path / "r.json")])
    assert code == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result) >= RESULT_KEYS
    assert result["achieved_sparsity"] == pytest.approx(0.5)
    assert result["schema"] == 2 and result["compression"]["kind"] == "nm" and result["quant"] is None
    accounting = result["accounting"]
    assert accounting["sparsity"] == pytest.approx(0.5) and accounting["bits_per_weight"] == 32.0
    assert accounting["params_before"] == accounting["params_after"] == 2 * accounting["nonzeros_kept"]
    assert accounting["checkpoint_bytes"] > accounting["estimated_bytes"] > 0
    assert result["options"]["block_size"] == 32
    assert result["protocol"]["calibration"] == {"source": "wiki", "split": "train", "nsamples": 4, "seqlen": 64,
                                                 "seed": 0, "tokens": 256}
    assert result["protocol"]["evaluation"]["windows"] == 3
    assert set(result["ppl"]) == {"wiki"} and set(result["dense_ppl"]) == {"wiki"}
    assert len(result["layers"]) == 14 and all(r["sparsity"] == pytest.approx(0.5) for r in result["layers"])
    printed = capsys.readouterr().out
    assert "pruned ppl (wiki)" in printed and "q_proj" in printed and "32.000 bits/weight" in printed
    (record,) = list_runs(out)
    assert record.status == "finished" and record.result is not None
    kinds = [e.kind for e in record.events()]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished" and kinds.count("LayerDone") == 2
    mask = record.load_mask(1, "mlp.down_proj")
    assert mask.shape == (64, 128) and mask.mean() == pytest.approx(0.5)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(record.path / "model", use_safetensors=True)
    weight = model.model.layers[1].mlp.down_proj.weight
    assert float((weight == 0).float().mean()) == pytest.approx(0.5)


@pytest.mark.parametrize(("argv", "message"), [
    (["--method", "wandda"], "Did you mean: wanda"),
    (["--sparsity", "1.2"], "outside [0, 1)"),
    (["--sparsity", "4:2"], "0 < n < m"),
    (["--sparsity", "3:7"], "divisible by 7"),
    (["--nsamples", "100000"], "lower --nsamples"),
    (["--calib", "nonexistent-source"], "nonexistent-source"),
    (["--method", "sparsegpt", "--set", "block_size=big"], "must be int"),
    (["--method", "sparsegpt", "--set", "blocksize=3"], "no option"),
    (["--devices", "cpu,cpu"], "--propagate dense"),
    # a spec the method cannot meet: refused before the model loads (there is no such model)
    (["--quant", "int4", "--model", "no-such-model"], "wanda only prunes"),
    (["--method", "magnitude", "--sparsity", "structured:30%", "--unit", "heads", "--model", "no-such-model"],
     "magnitude cannot remove --unit heads; its units: none"),
    (["--quant", "int5"], "use int2, int3, int4 or int8"),
    (["--quant", "int1"], "use int2, int3, int4 or int8"),
    (["--method", "awp", "--sparsity", "structured:30%", "--quant", "int4", "--model", "no-such-model"],
     "awp supports unstructured (50%), n:m (2:4), not structured:30%"),
    (["--method", "awp", "--sparsity", "3:7", "--quant", "int4"], "divisible by 7"),
    (["--method", "awq", "--quant", "int4", "--save-model", "--model", "no-such-model"],
     "awq results cannot be saved as a quantized checkpoint"),
    # tiny-llama's 64- and 128-wide rows are not whole groups of 48: refused before any weight changes
    (["--method", "rtn", "--quant", "int4:g48", "--save-model"], "not a multiple of the group size 48"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs"
    try:
        code = main(["prune", *TINY, "--out", str(out), *argv])
    except SystemExit as exc:  # argparse's own refusals exit like the shell would see them
        code = exc.code
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and message in lines[-1]
    assert "Traceback" not in stderr
    assert not any(r.status == "finished" for r in list_runs(out))


def test_bad_input_from_the_shell_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    """The same refusal through a real ``python -m toolkit`` process: exit code 2, one error line."""
    proc = subprocess.run([sys.executable, "-m", "toolkit", "prune", *TINY, "--out", str(tmp_path / "runs"),
                           "--sparsity", "4:2"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and "0 < n < m" in lines[-1] and "Traceback" not in proc.stderr


def test_out_alone_records_the_run_and_saves_no_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--out chooses the run store only: no checkpoint, and the summary says how to get one."""
    assert main(["prune", *TINY, "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["checkpoint"] is None and not (Path(result["run_dir"]) / "model").exists()
    assert not result["accounting"]["checkpoint_bytes"]
    out = capsys.readouterr().out
    assert "model not saved (add --save-model to write a loadable checkpoint)" in out and "on disk" not in out


def test_a_group_no_checkpoint_can_hold_is_fine_without_save_model(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """tiny-llama's 64-wide rows are not whole groups of 48: only a checkpoint needs whole groups."""
    assert main(["prune", *TINY, "--method", "rtn", "--quant", "int4:g48", "--out", str(tmp_path / "runs")]) == 0
    printed = capsys.readouterr()
    assert "--save-model" not in printed.err
    assert "model not saved (add --save-model to write a loadable checkpoint)" in printed.out
    (record,) = list_runs(tmp_path / "runs")
    assert record.status == "finished" and len(record.quant_names()) == 14 and not (record.path / "model").exists()


def test_save_model_says_where_the_checkpoint_is_and_its_size(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["prune", *TINY[:6], "--eval", "none", "--out", str(tmp_path / "runs"), "--save-model", "--json",
                 str(tmp_path / "r.json")]) == 0
    checkpoint = json.loads((tmp_path / "r.json").read_text())["checkpoint"]
    assert Path(checkpoint["folder"], "config.json").is_file()
    line = f"model saved: {checkpoint['folder']} ({checkpoint['bytes'] / 2**20:.2f} MiB on disk)"
    assert line in capsys.readouterr().out.splitlines()


def test_methods_lists_options(capsys: pytest.CaptureFixture) -> None:
    assert main(["methods", "--json"]) == 0
    methods = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert {"magnitude", "wanda", "sparsegpt"} <= set(methods)
    assert {o["name"] for o in methods["sparsegpt"]["options"]} >= {"block_size", "damp_frac"}


def test_eval_command(capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--model", "tiny-gpt2", "--seqlen", "64", "--windows", "2"]) == 0
    assert "2 windows" in capsys.readouterr().out


def test_failed_run_is_marked_failed(tmp_path: Path) -> None:
    """A failure after the run started (here: a NaN weight) leaves a 'failed' record, no result.json."""
    from toolkit.api import RunConfig
    from toolkit.errors import NumericalError
    from toolkit.run.pipeline import execute

    class Token:
        cancelled = False

    import toolkit.run.pipeline as pipeline

    original = pipeline.load_model

    def broken(name: str, **options: str):
        loaded = original(name, **options)
        loaded.model.model.layers[1].mlp.up_proj.weight.data[0, 0] = float("nan")
        return loaded

    pipeline.load_model = broken
    try:
        with pytest.raises(NumericalError, match="NaN"):
            execute(RunConfig(model="tiny-llama", nsamples=2, seqlen=32, eval_data=None, out_dir=str(tmp_path)),
                    lambda e: None, Token(), None)
    finally:
        pipeline.load_model = original
    (record,) = list_runs(tmp_path)
    assert record.status == "failed" and "NaN" in record.error
    assert not (record.path / "result.json").exists()
    assert open_run(record.path).events()[-1].kind == "RunFailed"


def test_a_cached_dense_perplexity_says_it_was_cached(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from app.views import render
    from toolkit.live.view import fold

    monkeypatch.setenv("PRUNELAB_CACHE", str(tmp_path / "cache"))  # an empty cache: the first run measures
    argv = ["prune", *TINY, "--method", "magnitude", "--eval-dense", "--out", str(tmp_path / "runs")]
    assert main([*argv, "--json", str(tmp_path / "first.json")]) == 0
    assert "dense  ppl (wiki): " in capsys.readouterr().out
    assert json.loads((tmp_path / "first.json").read_text())["dense_ppl_cached"] == []
    assert main([*argv, "--json", str(tmp_path / "second.json")]) == 0
    second = json.loads((tmp_path / "second.json").read_text())
    assert second["dense_ppl_cached"] == ["wiki"]
    assert "(cached)" in capsys.readouterr().out
    events = open_run(second["run_dir"]).events()
    assert any(getattr(e, "cached", False) for e in events)
    update, _ = render(fold(events), 0.0)
    assert "(cached)" in update["result"]


def test_the_summary_names_the_allocation_and_the_refinement(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An OWL + DSnoT run says its layer sparsity range and DSnoT's swaps; a uniform run prints neither line."""
    assert main(["prune", *TINY, "--sparsity", "60%", "--allocation", "owl", "--refine", "dsnot:5",
                 "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    ratios = result["allocation"]["ratios"]
    out = capsys.readouterr().out
    assert f"allocation owl:5,0.08: layer sparsity {min(ratios):.3f} to {max(ratios):.3f} over {len(ratios)} layers" \
        in out
    assert f"refine dsnot:5: {result['refine']['swaps']:,} swaps, mean error " in out
    assert main(["prune", *TINY, "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "allocation" not in out and "refine" not in out
