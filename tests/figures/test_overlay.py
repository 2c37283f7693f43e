"""Overlay figures: one trace per run, and runs repeated over seeds drawn as mean ± sample std error bars."""

from __future__ import annotations

import math
import statistics

import pytest

from toolkit.figures import overlay, sweep


def traces(fig: object) -> list[dict]:
    """The figure's traces as plain dicts."""
    return fig.to_dict()["data"]  # type: ignore[attr-defined]


def run(name: str, series: str, group: str, *, ppl: float, sparsity: float, seed: int = 0) -> dict:
    return {"name": name, "series": series, "group": group, "seed": seed, "ppl": ppl, "dense_ppl": 20.0,
            "achieved_sparsity": sparsity, "accuracy": math.nan, "dense_accuracy": math.nan,
            "layer_error": [0.01 * (seed + 1), 0.02, 0.04], "layer_sparsity": [0.4, 0.5, 0.6]}


def test_layer_overlays_draw_one_line_per_run() -> None:
    runs = [run(f"r{i}", "Wanda", f"Wanda {i}", ppl=25.0, sparsity=0.5, seed=i) for i in range(3)]
    error = overlay.layer_overlay_figure(runs, "layer_error")
    assert [t["name"] for t in traces(error)] == ["r0", "r1", "r2"]
    assert list(traces(error)[0]["y"]) == [0.01, 0.02, 0.04]
    assert error.to_dict()["layout"]["yaxis"]["type"] == "log"
    lines = [t["line"] for t in traces(error)]  # one series (Wanda over seeds): its colour, a dash per run
    assert len({line["color"] for line in lines}) == 1 and [line["dash"] for line in lines] == ["solid", "dash", "dot"]
    assert traces(overlay.quality_figure(runs))[0]["line"]["color"] == lines[0]["color"]
    zeroed = traces(overlay.layer_overlay_figure(runs, "layer_sparsity"))
    assert len(zeroed) == 3 and list(zeroed[2]["y"]) == [0.4, 0.5, 0.6]


def test_seeds_fold_into_a_mean_with_the_sample_std_as_error_bars() -> None:
    ppls = [24.0, 26.0, 31.0]
    runs = [run(f"Wanda 50% · seed {s}", "Wanda", "Wanda 50%", ppl=p, sparsity=0.5 + 0.001 * s, seed=s)
            for s, p in enumerate(ppls)]
    runs.append(run("Wanda 70%", "Wanda", "Wanda 70%", ppl=80.0, sparsity=0.7))
    runs.append(run("SparseGPT 50%", "SparseGPT", "SparseGPT 50%", ppl=22.0, sparsity=0.5))
    wanda, sparsegpt, dense = traces(overlay.quality_figure(runs, "ppl"))
    assert (wanda["name"], sparsegpt["name"]) == ("Wanda", "SparseGPT") and dense["name"].startswith("dense")
    assert list(wanda["y"]) == pytest.approx([statistics.fmean(ppls), 80.0])  # 27.0 and the single 70% run
    assert list(wanda["error_y"]["array"]) == pytest.approx([math.sqrt(13.0), 0.0])  # stdev(24, 26, 31) = √13
    assert wanda["error_y"]["visible"] and not sparsegpt["error_y"]["visible"]  # one run: no spread to draw
    assert wanda["error_x"]["array"][0] == pytest.approx(0.001)
    assert "mean of 3 seeds" in wanda["customdata"][0]


def test_mean_std_and_an_empty_overlay() -> None:
    assert overlay.mean_std([2.0, 4.0]) == (3.0, pytest.approx(math.sqrt(2.0)), 2)
    mean, std, n = overlay.mean_std([5.0])
    assert (mean, n) == (5.0, 1) and math.isnan(std)
    assert "none of these runs" in overlay.quality_figure([run("a", "A", "A", ppl=math.nan, sparsity=0.5)]) \
        .layout.annotations[0].text


def test_the_sweep_curve_draws_seeds_as_error_bars() -> None:
    points = [{"method": "wanda", "sparsity": "50%", "pattern": "unstructured", "achieved_sparsity": 0.5,
               "ppl": p, "seed": s} for s, p in enumerate((30.0, 34.0))]
    points.append({"method": "wanda", "sparsity": "70%", "pattern": "unstructured", "achieved_sparsity": 0.7,
                   "ppl": 90.0, "seed": 0})
    (trace,) = traces(sweep.sweep_figure(points))
    assert list(trace["x"]) == [0.5, 0.7] and list(trace["y"]) == [32.0, 90.0]
    assert list(trace["error_y"]["array"]) == pytest.approx([math.sqrt(8.0), 0.0]) and trace["error_y"]["visible"]
