"""The Sweep tab's frontier view: a run store's finished runs drawn by the frontier figure, the front named."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from app import frontier_view
from toolkit.events import RunFinished
from toolkit.figures.frontier import FRONT_NAME
from toolkit.figures.frontier_runs import NOT_MEASURED, speed_ratio, store_frontier
from toolkit.store.runs import RunWriter, list_runs

EVALUATION = {"dataset": "wiki", "split": "test", "seqlen": 64, "windows": 4, "tokens": 256, "all_windows": False}


def _speed(decode: float, dense: float = 20.0) -> dict[str, Any]:
    def throughput(rate: float) -> dict[str, Any]:
        return {"batch": 1, "prompt_tokens": 16, "new_tokens": 32, "repeats": 3, "prefill_tokens_per_s": 200.0,
                "decode_tokens_per_s": rate, "tokens_per_s": rate * 0.9}

    return {"device": "cpu", "batch": 1, "new_tokens": 32, "dense_tokens_per_s": dense * 0.9,
            "tokens_per_s": decode * 0.9, "prompt_tokens": 16, "repeats": 3, "threads": 1,
            "dense_by_batch": [throughput(dense)], "by_batch": [throughput(decode)]}


def _run(root: Path, method: str, sparsity: str, ppl: float, *, speed: dict | None, stored: int,
         stored_as: str = "shrunk", model: str = "tiny-llama") -> str:
    writer = RunWriter(root, {"model": model, "method": method, "sparsity": sparsity})
    writer.event(RunFinished(achieved_sparsity=0.2, prune_seconds=1.0, ppl={"wiki": ppl}, dense_ppl={"wiki": 20.0}))
    writer.finish({"achieved_sparsity": 0.2, "prune_seconds": 1.0, "ppl": {"wiki": ppl}, "dense_ppl": {"wiki": 20.0},
                   "protocol": {"evaluation": EVALUATION}, "versions": {"git": "abc1234"},
                   "bought": {"stored_as": stored_as, "bytes_dense": 1000, "bytes_stored": stored,
                              "bytes_measured": True, "smaller_as_saved": stored < 1000, "speed": speed}})
    time.sleep(1.01)  # run folders are named by the second
    return writer.run_id


def _store(root: Path) -> None:
    _run(root, "numerical", "structured:20%", 25.0, speed=_speed(26.0), stored=800)
    _run(root, "depth", "structured:4 layers", 60.0, speed=_speed(24.0), stored=850)  # slower and worse: behind
    _run(root, "wanda", "50%", 30.0, speed=None, stored=1000, stored_as="dense")


def test_a_store_of_three_runs_gives_the_figure_and_the_right_front(tmp_path: Path) -> None:
    _store(tmp_path)
    frontier = store_frontier(list_runs(tmp_path))
    labels = [p.label for p in frontier.points]
    assert labels == ["dense", "wanda 50%", "depth structured:4 layers", "numerical structured:20%"]
    assert frontier.front() == [True, None, False, True]
    figure, summary = frontier_view.frontier_view(str(tmp_path))
    traces = figure.to_dict()["data"]
    front = next(t for t in traces if t.get("name") == FRONT_NAME)
    assert list(front["x"]) == [1.0, 1.0, 1.3] and list(front["y"]) == [20.0, 25.0, 25.0]
    drawn = {t["text"][0] for t in traces if t.get("text")}
    assert drawn == {"dense", "numerical structured:20%", "depth structured:4 layers"}
    assert "On the perplexity–speed front: dense, numerical structured:20%; behind it: depth structured:4 layers." \
        in summary
    assert "wanda 50% (" in summary and NOT_MEASURED in summary
    assert "wanda 50%" in " ".join(a.text for a in figure.layout.annotations)  # named under the plot, not drawn


def test_runs_of_another_model_are_left_out_and_counted(tmp_path: Path) -> None:
    _run(tmp_path, "numerical", "structured:20%", 25.0, speed=_speed(26.0), stored=800, model="other-model")
    _store(tmp_path)
    frontier = store_frontier(list_runs(tmp_path))
    assert frontier.model == "tiny-llama" and frontier.other == 1 and len(frontier.points) == 4


def test_an_empty_store_says_so(tmp_path: Path) -> None:
    figure, summary = frontier_view.frontier_view(str(tmp_path / "none"))
    assert "No finished run" in summary and not figure.to_dict()["data"]


def test_a_run_from_before_the_per_batch_fields_gives_its_headline_ratio() -> None:
    assert speed_ratio({"dense_tokens_per_s": 10.0, "tokens_per_s": 15.0}) == 1.5
    assert speed_ratio(None) is None


def test_the_sweep_tab_lays_the_view_out(tmp_path: Path) -> None:
    import gradio as gr

    from app import sweep_tab

    _store(tmp_path)
    with gr.Blocks():
        sweep_tab.build(gr, default_model="tiny-llama", runs_dir=str(tmp_path))
    with gr.Blocks() as page:
        parts = frontier_view.build(gr, runs_dir=str(tmp_path))
    assert page is not None and parts["frontier"].elem_id == "sweep-frontier"
    assert "numerical structured:20%" in parts["frontier_summary"].value
