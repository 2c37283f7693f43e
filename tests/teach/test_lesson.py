"""The Lesson: plan (reuse + time estimate), running only what is missing, and what it draws (tiny models)."""

from pathlib import Path

import pytest

from app.lesson_tab import lesson_stream, plan_markdown
from tests.helpers.synthetic_runs import write_run
from toolkit.events import LambdaStep, LayerDone
from toolkit.store.runs import list_runs, open_run
from toolkit.teach import lesson
from toolkit.teach.lesson_view import LessonMaterial, MethodMaterial, chance_iou, walkthrough


@pytest.fixture
def two_methods(monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    methods = ("magnitude", "wanda")
    monkeypatch.setattr(lesson, "METHODS", methods)
    return methods


def test_an_empty_store_plans_every_run_with_the_stated_estimate(tmp_path: Path, two_methods):
    plan = lesson.plan_lesson("tiny-llama", str(tmp_path), lesson.METHODS)
    assert [c.method for c in plan.to_run] == list(two_methods)
    assert plan.total_seconds == lesson.STATED_SECONDS["magnitude"] + lesson.STATED_SECONDS["wanda"]
    text = plan_markdown("tiny-llama", str(tmp_path))
    assert "To run: magnitude ≈ 2 min, Wanda ≈ 8 min; about **10 min** in all" in text
    assert "Reused" not in text


def test_the_estimate_scales_a_stored_run_of_the_method(tmp_path: Path):
    write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%", "nsamples": 4, "seqlen": 64})
    config = lesson.lesson_configs("tiny-llama", str(tmp_path), ("wanda",))[0]  # 8 × 128: 4× the tokens
    assert lesson.estimate_seconds(config, list_runs(tmp_path)) == pytest.approx(1.5 * 4 + lesson.OVERHEAD_SECONDS)


def test_a_model_that_cannot_load_ends_in_one_error_line_naming_it(tmp_path: Path, two_methods):
    *_, last = lesson_stream("no-such-model", str(tmp_path))
    assert last["status"].startswith("**⚠ error:** no lesson run finished (magnitude: ")
    assert "no-such-model" in last["status"] and "heatmaps" not in last


def test_the_lesson_runs_what_is_missing_then_reuses_it(tmp_path: Path, two_methods):
    updates = list(lesson_stream("tiny-llama", str(tmp_path)))
    assert "To run: magnitude" in updates[0]["plan"]
    assert any("Running Wanda (2 of 2 to run): layer" in u.get("status", "") for u in updates)
    final = updates[-1]
    assert final["status"].startswith("**✓ lesson ready**") and "2 runs" in final["status"]
    (bars, dense) = final["ppl"].data
    assert list(bars.x) == ["magnitude", "Wanda"] and all(v > 1 for v in bars.y) and "dense" in dense.name
    assert len(final["heatmaps"].data) == 2 and len(final["layers"].data) == 2 and len(final["masks"].data) == 2
    assert "<table id='lesson-generation-table'>" in final["generations"] and "Wanda" in final["generations"]
    assert "**Perplexity**" in final["walkthrough"] and "random masks of this sparsity would give 0.33" in \
        final["walkthrough"]
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert len(folders) == 2 and all(open_run(tmp_path / f).status == "finished" for f in folders)

    again = list(lesson_stream("tiny-llama", str(tmp_path)))
    assert "Every run is in the store" in again[0]["plan"] and "Reused from the run store" in again[0]["plan"]
    assert sorted(p.name for p in tmp_path.iterdir()) == folders  # nothing new ran
    assert list(again[-1]["ppl"].data[0].y) == list(bars.y)


def test_walkthrough_numbers_come_from_the_runs():
    def material(method: str, ppl: float, errors: list[float], lambdas: list[LambdaStep]) -> MethodMaterial:
        done = [LayerDone(layer=i, num_layers=len(errors), output_rel_error=e, seconds=0.1)
                for i, e in enumerate(errors)]
        return MethodMaterial(method=method, run_id=method, layers=done, lambdas=lambdas, ppl=ppl, dense_ppl=17.5)

    rounds = [LambdaStep(layer=0, name="q", round=r, lam=1e-5 / 2 ** r, lam_low=0, lam_high=1e6, e_total=1.0,
                         e_round=0.1, ratio=0.1, xi=0.3, sparsity_before_rounding=0.0, improved=True) for r in range(3)]
    high, low = [0.1] * 12, [0.003] * 18
    text = walkthrough(LessonMaterial([material("magnitude", 300.0, high + low, []),
                                       material("fista", 30.0, [e / 3 for e in high + low], rounds)]))
    assert "FISTAPruner 30.0 < magnitude 300.0 (dense 17.5)" in text
    assert "drops ×33 from layer 11 to layer 12 in every run" in text and "property of the model" in text
    assert "never needed sparsity before rounding" in text
    assert chance_iou(0.5) == pytest.approx(1 / 3)


def test_the_benchmark_times_the_reuse_path_and_refuses_an_incomplete_store(tmp_path: Path, capsys):
    import json

    from benchmarks.bench_lesson import main

    assert main(["--runs", str(tmp_path), "--model", "tiny-llama"]) == 2
    assert "lacks the lesson runs of magnitude, wanda, sparsegpt, fista" in capsys.readouterr().err
    for index, config in enumerate(lesson.lesson_configs("tiny-llama", str(tmp_path))):
        write_run(tmp_path, config.to_dict(), seed=index)
    assert main(["--runs", str(tmp_path), "--model", "tiny-llama"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert set(line["reused"]) == set(lesson.METHODS) and 0 < line["seconds"] < 30


def test_the_lesson_figures_and_notes_load_without_torch():
    import subprocess
    import sys

    code = ("import sys, toolkit.teach.lesson_view, toolkit.teach.figures, toolkit.teach.insights, app.howto; "
            "print('torch' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
