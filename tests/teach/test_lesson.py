"""The Lesson: plan (reuse, generations), running only what is missing, and what it draws (tiny models)."""

import json
from pathlib import Path
from typing import Any

import pytest

from app.lesson_tab import lesson_stream, plan_markdown
from tests.helpers.synthetic_runs import write_run
from toolkit.events import LambdaStep, LayerDone
from toolkit.store.runs import open_run
from toolkit.teach import lesson
from toolkit.teach.lesson_clock import Profile
from toolkit.teach.lesson_view import LessonMaterial, MethodMaterial, chance_iou, walkthrough

TINY_SHAPES = {"self_attn.q_proj": (64, 64), "mlp.down_proj": (64, 128)}  # two of tiny-llama's linears


def stored_lesson_run(root: Path, config: dict[str, Any], *, seed: int = 0, ppl: float = 25.0,
                      texts: bool = True, shapes: dict[str, tuple[int, int]] | None = None) -> Path:
    """A finished synthetic run of a lesson config, with the pruned model's generations unless ``texts`` is False."""
    path = write_run(root, config, seed=seed, ppl=ppl, shapes=shapes or TINY_SHAPES)
    if texts:
        result = json.loads((path / "result.json").read_text(encoding="utf-8"))
        result["generations"] = {"max_new_tokens": 32, "decoding": "greedy", "records": [
            {"prompt": "The capital of France is", "dense": " Paris.", "pruned": f" a city ({config['method']})."}]}
        (path / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return path


@pytest.fixture
def two_methods(monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    methods = ("magnitude", "wanda")
    monkeypatch.setattr(lesson, "METHODS", methods)
    return methods


def test_an_empty_store_plans_every_run_with_the_reference_estimate(tmp_path: Path, two_methods):
    plan = lesson.plan_lesson("tiny-llama", str(tmp_path), lesson.METHODS)
    assert [c.method for c in plan.to_run] == list(two_methods)
    ref = lesson.REFERENCE
    per_run = ref.load + 2 * ref.prompts * ref.prompt + ref.capture + ref.finish + 8 * ref.window  # 8 windows pruned
    expected = 2 * per_run + 8 * ref.window + ref.layers * (ref.layer["magnitude"] + ref.layer["wanda"])
    assert plan.total_seconds == pytest.approx(expected)
    text = plan_markdown("tiny-llama", str(tmp_path))
    duration = lesson.format_duration(expected)
    assert f"To run: magnitude, Wanda; about **{duration}** at the pace of the quiet reference lessons" in text
    assert "16 × 128 calibration tokens, 8 evaluation windows of 128 tokens" in text
    assert "FISTAPruner with at most 2 λ rounds of 10 iterations" in text
    assert "Reused" not in text


def test_the_class_configs_carry_fistas_budget_and_the_class_protocol(tmp_path: Path):
    configs = {c.method: c for c in lesson.lesson_configs("tiny-llama", str(tmp_path))}
    assert configs["fista"].options == lesson.OPTIONS["fista"] and configs["wanda"].options == {}
    assert all((c.nsamples * c.seqlen, c.eval_windows, c.generate, c.eval_dense) == (2048, 8, True, True)
               for c in configs.values())


def test_a_stored_run_without_generations_is_run_again_and_one_with_them_is_reused(tmp_path: Path, two_methods):
    configs = lesson.lesson_configs("tiny-llama", str(tmp_path))
    bare = stored_lesson_run(tmp_path, configs[0].to_dict(), texts=False)
    texts = stored_lesson_run(tmp_path, configs[1].to_dict(), seed=1)
    plan = lesson.plan_lesson("tiny-llama", str(tmp_path), lesson.METHODS)
    assert [c.method for c in plan.to_run] == ["magnitude"] and plan.without_texts == {"magnitude": bare.name}
    assert plan.stored["wanda"] is not None and plan.stored["wanda"].run_id == texts.name
    text = lesson.plan_text(plan)
    assert f"Stored without generations, so run again: magnitude (`{bare.name}`)" in text
    assert f"Reused from the run store: Wanda (`{texts.name}`)" in text

    updates = list(lesson_stream("tiny-llama", str(tmp_path)))
    assert updates[-1]["status"].startswith("**✓ lesson ready**")
    table = updates[-1]["generations"]
    assert "(not stored)" not in table and "a city (wanda)." in table  # the reused run's text, and the new run's
    again = lesson.plan_lesson("tiny-llama", str(tmp_path), lesson.METHODS)
    assert not again.to_run and again.stored["magnitude"] is not None and again.stored["magnitude"].run_id != bare.name


def test_a_model_that_cannot_load_ends_in_one_error_line_naming_it(tmp_path: Path, two_methods):
    *_, last = lesson_stream("no-such-model", str(tmp_path))
    assert last["status"].startswith("**⚠ error:** no lesson run finished (magnitude: ")
    assert "no-such-model" in last["status"] and "heatmaps" not in last


def test_the_lesson_runs_what_is_missing_then_reuses_it(tmp_path: Path, two_methods):
    updates = list(lesson_stream("tiny-llama", str(tmp_path)))
    assert "To run: magnitude" in updates[0]["plan"]
    assert any("Wanda (2 of 2 to run) · pruning layer" in u.get("status", "") and "left" in u["status"]
               for u in updates)
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
        stored_lesson_run(tmp_path, config.to_dict(), seed=index)
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


def test_the_reference_profile_is_the_quiet_measured_lessons_in_units_of_their_window() -> None:
    lines = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cpu_lesson_class.jsonl"
    quiet = [json.loads(line) for line in lines.read_text(encoding="utf-8").splitlines()[2:4]]
    assert all(q["load_mean"] < 7 and q["dense_cache"] == "empty" for q in quiet)  # the two quietest, from empty stores
    derived = Profile.from_measured([q["measured"] for q in quiet], default_layer="sparsegpt")
    ref, measured = lesson.REFERENCE, lesson.MEASURED
    for kind in ("load", "window", "prompt", "capture", "finish"):
        assert getattr(measured, kind) == pytest.approx(getattr(derived, kind), abs=1e-3)
    assert measured.layer == pytest.approx(derived.layer, abs=1e-3)
    assert ref.prompt == pytest.approx(measured.prompt * lesson.GENERATE_TOKENS / lesson.MEASURED_TOKENS)
    assert ref.window == pytest.approx(measured.window * 16 / 40)  # those lessons counted 16 of their 40 windows
    assert ref.layer["fista"] / ref.window > 2.0  # a FISTAPruner layer costs more than two windows when quiet
