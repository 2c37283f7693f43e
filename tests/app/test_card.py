"""The answer of a finished run: the result card, the status line's end and what the page shows, from folded events.

Each view is folded from hand-written events (a pruned-dense, a quantized and a structured run,
and one recorded before the ``bought`` record), with a clock: RunStarted at 0 s, RunFinished at 200 s.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from app import card, views
from toolkit.events import EvalPoint, Event, LambdaStep, RunFinished, RunStarted, SolverStep
from toolkit.live.view import RunView
from toolkit.spec.compression import parse_compression

DENSE_BOUGHT = {"kept_weights": 67_000_000, "params_before": 134_000_000, "params_after": 134_000_000,
                "stored_as": "dense", "bytes_dense": 538_000_000, "bytes_stored": 538_000_000,
                "bytes_measured": False, "smaller_as_saved": False, "speed": None}
PACKED = {**DENSE_BOUGHT, "kept_weights": 134_000_000, "stored_as": "pack-quantized", "bytes_stored": 179_333_334,
          "smaller_as_saved": True}
SHRUNK = {**DENSE_BOUGHT, "params_after": 94_000_000, "kept_weights": 94_000_000, "stored_as": "shrunk",
          "bytes_stored": 400 * 2**20, "bytes_measured": True, "smaller_as_saved": True,
          "speed": {"device": "cpu", "batch": 1, "new_tokens": 32, "dense_tokens_per_s": 45.1,
                    "tokens_per_s": 58.3}}
WANDA = parse_compression("50%").to_dict()
INT4 = parse_compression(None, "int4:g128").to_dict()
STRUCTURED = parse_compression("structured:30%", None, "heads").to_dict()


def folded(method: str, compression: dict[str, Any], bought: dict[str, Any] | None, *, finish: bool = True,
           sparsity: float = 0.5, bits: float = 32.0, extra: tuple[Event, ...] = ()) -> RunView:
    view = RunView()
    protocol = {"model_label": "SmolLM2-135M", "evaluation": {"windows": 16, "seqlen": 128}}
    events: list[tuple[float, Event]] = [
        (0.0, RunStarted(run_id="r1", model="smollm2-135m", method=method, sparsity=compression["label"],
                         options={}, protocol=protocol, num_layers=30, linears=["q_proj"], device="cpu",
                         compression=compression)),
        *((1.0, event) for event in extra),
        (5.0, EvalPoint(dataset="wiki", which="dense", ppl=17.4712, seq_len=128, windows=16, tokens=2048)),
        (190.0, EvalPoint(dataset="wiki", which="pruned", ppl=43.5788, seq_len=128, windows=16, tokens=2048))]
    if finish:
        events.append((200.0, RunFinished(achieved_sparsity=sparsity, prune_seconds=125.0, ppl={"wiki": 43.5788},
                                          dense_ppl={"wiki": 17.4712}, params_before=134_000_000,
                                          params_after=(bought or {}).get("params_after", 134_000_000),
                                          nonzeros_kept=67_000_000, bits_per_weight=bits,
                                          estimated_bytes=538_000_000, bought=bought)))
    for when, event in events:
        view.apply(event, when)
    return view


def test_a_pruned_dense_run_says_its_perplexity_first_and_that_it_is_not_smaller_as_saved() -> None:
    view = folded("wanda", WANDA, DENSE_BOUGHT)
    assert card.headline(view, 999.0) == "ppl 17.47 → 43.58 (+149%) · 3 min 20 s"  # frozen at the end
    status = views.status_markdown(view, 999.0)
    assert status.splitlines()[0] == ("**✓ finished** · wanda 50% on SmolLM2-135M · ppl 17.47 → 43.58 (+149%) · "
                                      "3 min 20 s")
    text = card.card_markdown(view, 999.0)
    header, _, row = text.splitlines()[:3]
    assert header.startswith("| perplexity (wiki, 16 × 128 tokens) | sparsity achieved | linear weights kept |")
    assert row.startswith("| **17.47 → 43.58 (+149%)** | **50.00%** | 67.0 M of 134.0 M | 513.1 MiB (dense 513.1 MiB) "
                          "|")
    assert row.endswith("| 3 min 20 s (pruning 2 min 05 s) |")
    assert "**not smaller as saved: pruned weights are stored as zeros in a dense checkpoint**" in text
    assert "computed; measured when the checkpoint is saved" in text and "bits per weight" not in text


def test_a_quantized_run_gives_bits_per_weight_and_the_packed_bytes() -> None:
    view = folded("rtn", INT4, PACKED, sparsity=0.0, bits=4.25)
    text = card.card_markdown(view, 0.0)
    header = text.splitlines()[0]
    assert "bits per weight" in header and "sparsity" not in header
    assert "**4.25** (scales counted)" in text and "171.0 MiB (dense 513.1 MiB)" in text
    assert "stored packed (codes, scales and zero points), 171.0 MiB: 33% of the dense 513.1 MiB" in text
    assert "not smaller" not in text


def test_a_structured_run_gives_the_shrunk_bytes_and_the_measured_decode_speed() -> None:
    view = folded("numerical", STRUCTURED, SHRUNK, sparsity=0.3)
    text = card.card_markdown(view, 0.0)
    assert "decode tokens/s (cpu, batch 1)" in text and "45.1 → **58.3**" in text
    assert "400.0 MiB, 78% of the dense 513.1 MiB (measured on disk)" in text
    assert "greedy decoding 45.1 → 58.3 tokens/s (×1.29; cpu, batch 1, 32 new tokens" in text


def test_a_run_recorded_before_the_bought_record_says_so() -> None:
    view = folded("wanda", WANDA, None)
    text = card.card_markdown(view, 0.0)
    assert "**17.47 → 43.58 (+149%)**" in text and "size (estimate) | " in text.splitlines()[0] + " | "
    assert "recorded before PruneLab measured what a compression buys" in text


def test_no_card_and_no_answer_before_the_run_ends() -> None:
    view = folded("wanda", WANDA, DENSE_BOUGHT, finish=False)
    assert card.card_markdown(view, 50.0) == "" and "ppl" not in views.status_markdown(view, 50.0).splitlines()[0]
    assert views.visible(view)["card"] is False and views.visible(view)["exports"] is False


@pytest.mark.parametrize(("dense", "compressed", "text"), [
    (17.4712, 43.5788, "+149%"), (10.0, 10.24, "+2.4%"), (10.0, 9.0, "-10%"), (math.nan, 9.0, ""), (0.0, 1.0, "")])
def test_percent_change(dense: float, compressed: float, text: str) -> None:
    assert card.percent_change(dense, compressed) == text


def test_before_a_run_only_the_heatmap_and_the_layer_error_show() -> None:
    shown = views.visible(RunView())
    assert {name for name in views.FIGURES if shown[name]} == {"heatmap", "layers"}
    assert not any(shown[key] for key in ("card", "exports", "files", "result", "warnings", "generations"))


def test_a_run_shows_the_panels_its_method_fills() -> None:
    wanda = views.visible(folded("wanda", WANDA, DENSE_BOUGHT))
    assert wanda["allocation"] and not wanda["solver"] and not wanda["lambda"] and not wanda["ranking"]
    assert wanda["card"] and wanda["exports"] and wanda["result"]
    steps = (SolverStep(layer=0, name="q_proj", solver="fista", step=0, objective=1.0),
             LambdaStep(layer=0, name="q_proj", round=0, lam=1e-5, lam_low=0.0, lam_high=1e6, e_total=1.0,
                        e_round=0.5, ratio=0.5, xi=0.3, sparsity_before_rounding=0.5, improved=True))
    fista = views.visible(folded("fista", WANDA, DENSE_BOUGHT, finish=False, extra=steps))
    assert fista["solver"] and fista["lambda"] and not fista["card"]
    quantized = views.visible(folded("rtn", INT4, PACKED))
    assert not quantized["allocation"]  # no per-layer sparsity to draw


def test_the_solver_panels_sit_beside_the_heatmap() -> None:
    from toolkit.figures.registry import ROWS

    assert ROWS["errors"][:3] == ("heatmap", "solver", "lambda")  # a fourth panel (the layer error) wraps below


def test_a_structured_run_measured_at_several_batches_gives_each_decode_speed() -> None:
    rates = [{"batch": 1, "decode_tokens_per_s": 50.0}, {"batch": 8, "decode_tokens_per_s": 200.0}]
    speed = {**SHRUNK["speed"], "dense_by_batch": rates,
             "by_batch": [{**rates[0], "decode_tokens_per_s": 60.0}, {**rates[1], "decode_tokens_per_s": 260.0}]}
    text = card.card_markdown(folded("numerical", STRUCTURED, {**SHRUNK, "speed": speed}, sparsity=0.3), 0.0)
    assert "decode tokens/s, batch 8 (prefill excluded)" in text and "200.0 → **260.0**" in text
    assert "decode tokens/s, batch 1 (prefill excluded)" not in text  # batch 1 has its column already
