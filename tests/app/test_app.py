"""The app's handlers driven directly (CONTRIBUTING.md R19d): tiny-llama runs, bad input, queue, cancel, tabs.

The Gradio layer itself (build_app, the page) is exercised by tests/browser/test_browser.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import toolkit.methods as methods
from app import compare_tab, forms, run_tab, runs_tab, sweep_tab
from app.jobs import SESSIONS, DeviceQueue, device_queue
from app.run_tab import cancel_message, run_stream
from tests.helpers.gate import Gate
from tests.helpers.synthetic_runs import hand_edit, write_run
from toolkit.api import RunConfig, list_runs
from toolkit.errors import ToolkitError
from toolkit.spec.targets import NM, Structured

ROOT = Path(__file__).resolve().parents[2]
UI_FILES = [*sorted((ROOT / "app").glob("*.py")),
            *(path for package in ("notebook", "figures", "live", "compare") for path in
              sorted((ROOT / "toolkit" / package).glob("*.py")))]
QUICK = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")


def imported_modules(path: Path) -> set[str]:
    """Top-level package of every import statement in ``path``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_ui_never_imports_torch(path: Path) -> None:
    assert "torch" not in imported_modules(path)


def test_figure_and_state_modules_load_without_torch() -> None:
    code = ("import sys, toolkit.live.view, toolkit.figures.run, toolkit.figures.masks, toolkit.figures.quant, "
            "toolkit.compare.masks, toolkit.figures.structure, toolkit.compare.structure; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def settings(**fields: object) -> forms.RunSettings:
    return forms.RunSettings(**{"model": "tiny-llama", "method": "wanda", "protocol": QUICK, **fields})


def drain(stream: object) -> list[dict]:
    return list(stream)  # type: ignore[call-overload]


# -- forms ---------------------------------------------------------------------------------------
def test_form_to_config() -> None:
    config = forms.to_config(settings(method="sparsegpt", pattern="n:m", nm="2:4", options={"block_size": 64.0,
                                      "damp_frac": 0.01}, extra_options="# tuned\ndamp_frac = 0.05"), "runs")
    assert config.sparsity == NM(2, 4) and config.options == {"block_size": 64, "damp_frac": "0.05"}
    assert config.quant is None and config.unit is None and config.compression.label == "2:4"
    assert config.eval_windows == 2 and config.out_dir == "runs"
    structured = forms.to_config(settings(pattern="structured", percent=30), "runs")
    assert structured.sparsity == Structured(0.3) and structured.compression.kind == "structured"
    assert forms.to_config(settings(model_path=" org/some-model ", protocol=forms.Protocol(evaluate=False)),
                           "r").model == "org/some-model"
    with pytest.raises(ToolkitError, match="'/some/dir' does not exist"):  # checked before the run is queued
        forms.to_config(settings(model_path="/some/dir"), "r")
    assert forms.pattern_labels("fista") == ["unstructured", "n:m"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"model": "", "model_path": ""}, "no model given"),
    ({"method": "fista", "extra_options": "fista_iters=abc"}, "must be int"),
    ({"method": "fista", "options": {"fista_iters": 2.5}}, "must be int"),
    ({"method": "wandda"}, "Did you mean: wanda"),
    ({"extra_options": "just words"}, "write key=value"),
    ({"percent": 120}, "outside"),
    ({"method": "fista", "pattern": "structured"}, "fista supports"),
    ({"protocol": forms.Protocol(nsamples=0)}, "nsamples must be"),
])
def test_bad_form_input_is_a_message(tmp_path: Path, fields: dict, message: str) -> None:
    (update,) = drain(run_stream(settings(**fields), runs_dir=str(tmp_path), session="bad"))
    assert message in update["status"] and update["status"].startswith("**⚠") and "notice" not in update
    assert not list_runs(tmp_path)


# -- runs on tiny-llama ---------------------------------------------------------------------------
def test_run_streams_progress_then_result_and_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_tab, "PERIOD", 0.01)
    monkeypatch.setattr(run_tab, "FIGURE_PERIOD", 0.01)
    gate = Gate(base="wanda")  # holds the run before its first linear until the stream showed it running
    monkeypatch.setitem(methods.METHODS, gate.NAME, gate.spec)
    safety = threading.Timer(60, gate.open)  # a stream that never shows "running" fails instead of hanging
    safety.start()
    line = device_queue("cpu")
    blocker = line.join()
    assert line.try_start(blocker)  # someone else holds the device for half a second
    threading.Timer(0.6, line.leave, args=(blocker,)).start()
    updates = []
    for update in run_stream(settings(method=gate.NAME), runs_dir=str(tmp_path), session="s1"):
        updates.append(update)
        if "▶ running" in update.get("status", ""):
            gate.open()
    safety.cancel()
    statuses = [u["status"] for u in updates]
    assert "queued" in statuses[0] and "position 1" in statuses[0]
    assert any("▶ running" in s for s in statuses), statuses
    figures = [u["heatmap"] for u in updates if "heatmap" in u]
    assert any(len(f.data) and any(v is not None for row in f.data[0].z for v in row) for f in figures)
    final = updates[-1]
    assert "✓ finished" in final["status"] and "perplexity (wiki" in final["result"]
    assert "bits per weight (scales counted) | | 32.000" in final["result"]
    names = sorted(Path(f).name.rsplit("-", 1)[-1] for f in final["files"])
    assert names == ["masks.zip", "result.json"] and all(Path(f).exists() for f in final["files"])
    (record,) = list_runs(tmp_path)
    assert record.status == "finished" and final["run_id"] == record.run_id


@pytest.mark.parametrize(("fields", "message"), [
    ({"pattern": "n:m", "nm": "3:7"}, "divisible by 7"),
    ({"model": "nobody/not-a-model"}, "hub"),
])
def test_refused_runs_are_messages_and_the_app_keeps_serving(tmp_path: Path, fields: dict, message: str) -> None:
    updates = drain(run_stream(settings(**fields), runs_dir=str(tmp_path), session="s2"))
    assert message in updates[-1]["status"] and all("notice" not in update for update in updates)  # no toast
    assert not device_queue("cpu").busy  # the device was given back


def _slow(**fields: object) -> forms.RunSettings:
    return settings(method="fista", extra_options="max_rounds=100000\npatience=100000\neps=1e-12", **fields)


def test_cancel_button_marks_the_run_cancelled(tmp_path: Path) -> None:
    stream = run_stream(_slow(), runs_dir=str(tmp_path), session="s3")
    updates: list[dict] = []
    worker = threading.Thread(target=lambda: updates.extend(stream))
    worker.start()
    deadline = time.monotonic() + 60
    while not any("▶ running" in u.get("status", "") for u in updates) and time.monotonic() < deadline:
        time.sleep(0.05)
    message = cancel_message("s3", str(tmp_path))
    worker.join(30)
    assert "cancelled" in message and "marked **cancelled**" in message
    assert "■ cancelled" in updates[-1]["status"]
    (record,) = list_runs(tmp_path)
    assert record.status == "cancelled"
    assert "marked **cancelled**" in cancel_message("s3", str(tmp_path))  # asking again says the same


def test_closing_the_stream_cancels_the_run(tmp_path: Path) -> None:
    stream = run_stream(_slow(), runs_dir=str(tmp_path), session="s4")
    for update in stream:
        if "▶ running" in update.get("status", ""):
            break
    stream.close()  # what Gradio does on Cancel or a closed tab
    job = SESSIONS.get("s4", "run")
    assert job is not None and job.finished.wait(30)
    (record,) = list_runs(tmp_path)
    assert record.status == "cancelled"


def test_device_queue_positions() -> None:
    line = DeviceQueue()
    first, second, third = line.join(), line.join(), line.join()
    assert not line.try_start(second) and line.try_start(first)
    assert [line.position(t) for t in (first, second, third)] == [0, 1, 2]
    line.leave(second)
    assert line.position(second) == -1 and line.position(third) == 1
    line.leave(first)
    assert line.try_start(third) and line.busy


def test_closed_tab_cancels_its_jobs() -> None:
    job = SESSIONS.begin("tab", "run")
    job.state = "running"
    assert SESSIONS.close_session("tab") == 1 and job.token.cancelled and SESSIONS.get("tab", "run") is None


# -- sweep, runs, compare tabs ---------------------------------------------------------------------
def test_sweep_reuses_stored_runs_and_runs_the_rest(tmp_path: Path) -> None:
    base = RunConfig(model="tiny-llama", method="magnitude", sparsity="50%", nsamples=4, seqlen=32, eval_seqlen=32,
                     eval_windows=2, device="cpu", out_dir=str(tmp_path))
    for method, sparsity in (("magnitude", "50%"), ("wanda", "50%"), ("wanda", "2:4")):
        config = {**base.to_dict(), "method": method, "sparsity": sparsity, "eval_dense": True}
        write_run(tmp_path, config, ppl=30.0 if sparsity == "2:4" else 25.0)
    sweep = sweep_tab.SweepSettings(model="tiny-llama", methods=["magnitude", "wanda"],
                                    sparsities=["30%", "50%", "2:4"], protocol=QUICK)
    updates = drain(sweep_tab.sweep_stream(sweep, runs_dir=str(tmp_path), session="sw"))
    final = updates[-1]
    assert "sweep done" in final["status"] and "6 of 6 points" in final["status"]
    reused = {(row[0], row[1]): row[7] for row in final["table"]}
    assert sum(reused.values()) == 3 and not reused[("magnitude", "30%")]
    assert len(final["curve"].data) == 5  # magnitude, magnitude n:m, wanda, wanda n:m, dense
    csv = Path(final["csv"]).read_text().splitlines()
    assert csv[0].startswith("method,sparsity,achieved_sparsity,ppl") and len(csv) == 7
    assert len(list_runs(tmp_path)) == 6


def test_sweep_bad_input() -> None:
    (update,) = drain(sweep_tab.sweep_stream(sweep_tab.SweepSettings(methods=[]), runs_dir="runs"))
    assert "at least one method" in update["status"]


def test_runs_table_survives_hand_edits(tmp_path: Path) -> None:
    good = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%", "options": {"a": 1}})
    broken = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "60%"})
    hand_edit(broken, "config.json", "{not json")
    odd = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "70%"})
    hand_edit(odd, "config.json", json.dumps(["a", "list"]))
    weird = write_run(tmp_path, {"model": "tiny-llama", "method": "magnitude", "sparsity": "50%"})
    hand_edit(weird, "result.json", json.dumps({"ppl": "high", "achieved_sparsity": "half"}))
    table = runs_tab.runs_table(str(tmp_path))
    assert "3 damaged" in table["message"] and len(table["rows"]) == 4
    rows = {row[runs_tab.COLUMNS.index("run id")]: dict(zip(runs_tab.COLUMNS, row, strict=True))
            for row in table["rows"]}
    assert rows[good.name]["options"] == "a=1" and rows[good.name]["perplexity"] == 25.0
    assert runs_tab.COLUMNS[-1] == "options"  # any length, last: perplexity stays on screen
    assert rows[odd.name]["status"].startswith("damaged")
    assert rows[weird.name]["achieved"] is None and rows[weird.name]["perplexity"] is None
    assert rows[broken.name]["status"].startswith("damaged: config.json is not valid JSON")
    assert rows[weird.name]["status"] == "damaged: result.json 'ppl' is a string, not an object"


def test_replay_a_stored_run(tmp_path: Path) -> None:
    path = write_run(tmp_path, {"model": "tiny-llama", "method": "fista", "sparsity": "50%"})
    with open(path / "events.jsonl", "a", encoding="utf-8") as handle:
        handle.write("this line was typed by hand\n")
    view = runs_tab.replay_view(path.name, str(tmp_path))
    assert "✓ finished" in view["status"] and "unreadable" in view["warnings"]
    assert "4 of 4 linears" in view["heatmap"].layout.title.text and view["lambda"].data
    assert view["traces"][-1] == "1 · mlp.down_proj"
    trace = runs_tab.trace_view(path.name, "0 · self_attn.q_proj", str(tmp_path))
    assert "layer 0 · self_attn.q_proj" in trace["solver"].layout.title.text
    assert "⚠" in runs_tab.replay_view("no-such-run", str(tmp_path))["status"]
    assert "⚠" in runs_tab.trace_view(path.name, "garbage", str(tmp_path))["status"]


def test_compare_tab(tmp_path: Path) -> None:
    a = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"}, seed=1)
    b = write_run(tmp_path, {"model": "tiny-llama", "method": "magnitude", "sparsity": "50%"}, seed=2)
    other = write_run(tmp_path, {"model": "tiny-opt", "method": "wanda", "sparsity": "50%"}, seed=3)
    assert {value for _, value in compare_tab.run_choices(str(tmp_path))} == {a.name, b.name, other.name}
    found = compare_tab.linear_choices([a.name, b.name], str(tmp_path))
    assert found["layers"] == ["0", "1"] and found["linears"] == ["mlp.down_proj", "self_attn.q_proj"]
    view = compare_tab.compare_view([a.name, b.name], "1", "mlp.down_proj", 4, str(tmp_path))
    assert "IoU" in view["message"] and len(view["masks"].data) == 2 and len(view["all_linears"].data) == 2
    bad = compare_tab.compare_view([a.name, other.name], "0", "mlp.down_proj", 4, str(tmp_path))
    assert "different models" in bad["message"]
    assert all(bad[panel] is None for panel in compare_tab.PANELS)  # the previous comparison is cleared
    assert compare_tab.cleared() == dict.fromkeys(compare_tab.PANELS)  # a new selection: panels emptied
    assert "two or more" in compare_tab.compare_view([a.name], "0", "x", 4, str(tmp_path))["message"]
    assert "not in" in compare_tab.compare_view([a.name, "gone"], "0", "x", 4, str(tmp_path))["message"]
    assert "no mask" in compare_tab.compare_view([a.name, b.name], "7", "x", 4, str(tmp_path))["message"]


def test_replay_of_events_with_wrong_types_is_a_message(tmp_path: Path) -> None:
    path = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"})
    line = {"type": "SublayerPruned", "layer": "first", "name": "q", "shape": [2, 2], "sparsity": 0.5,
            "rel_error": "big", "rel_error_dense": None, "damping": None, "seconds": 0.1, "info": {}}
    with open(path / "events.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
    view = runs_tab.replay_view(path.name, str(tmp_path))
    assert view["status"].startswith("**⚠") and "could not be replayed" in view["status"]


def test_sweep_over_bits_draws_perplexity_against_bits_per_weight(tmp_path: Path) -> None:
    sweep = sweep_tab.SweepSettings(model="tiny-llama", methods=["rtn", "wanda"], sparsities=["none", "50%"],
                                    bits=["int4", "int3", "int2"], protocol=QUICK)
    configs, skipped = sweep_tab.sweep_configs(sweep, str(tmp_path))
    # rtn quantizes only; wanda only prunes, so every wanda (and every rtn 50%) triple is skipped with its reason
    assert [c.quant.bits for c in configs] == [4, 3, 2] and len(skipped) == 9
    final = drain(sweep_tab.sweep_stream(sweep, runs_dir=str(tmp_path), session="bits"))[-1]
    assert "3 of 3 points" in final["status"]
    (curve, dense) = final["bits_curve"].data
    assert list(curve.text) == ["int2:g128", "int3:g128", "int4:g128"] and "dense" in dense.name
    assert list(curve.x) == sorted(curve.x) and 2 < curve.x[0] < curve.x[-1] < 5


def test_out_of_range_numbers_reach_the_status_line(tmp_path: Path) -> None:
    from app.app import build_app

    demo = build_app(default_model="tiny-llama", runs_dir=str(tmp_path))
    bounded = [b for b in demo.blocks.values() if getattr(b, "minimum", None) is not None
               or getattr(b, "maximum", None) is not None]
    percent = next(b for b in bounded if b.elem_id == "run-percent")
    nsamples = next(b for b in bounded if b.elem_id == "run-nsamples")
    assert percent.preprocess(150) == 150 and nsamples.preprocess(0) == 0  # not a Gradio toast before the form
    for block in bounded:
        block.preprocess(-1e9)
        block.preprocess(1e9)
    for fields, message in (({"percent": 150}, "outside"), ({"protocol": forms.Protocol(nsamples=0)}, "nsamples")):
        (update,) = drain(run_stream(settings(**fields), runs_dir=str(tmp_path), session="bounds"))
        assert message in update["status"] and update["status"].startswith("**⚠")
    runs = [write_run(tmp_path, {"model": "tiny-llama", "method": m, "sparsity": "50%"}, seed=i).name
            for i, m in enumerate(("wanda", "magnitude"))]
    refused = compare_tab.compare_view(runs, "0", "mlp.down_proj", -2, str(tmp_path))
    assert "group size m must be a whole number ≥ 1, got -2" in refused["message"]
