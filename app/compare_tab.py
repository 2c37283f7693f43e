"""The Compare tab: overlays of any number of finished runs of one model, and their keep-masks side by side.

Overlays (any number of runs, one model; mixing models is refused in one line): the layer output
error and the fraction zeroed per layer, one line per run, and perplexity and mean zero-shot
accuracy vs achieved sparsity, one curve per method (with allocation and refinement); runs of
one configuration over several calibration seeds are one point with ± std error bars. Runs are
named by method, target, allocation and refinement (:mod:`toolkit.compare.names`).

For the chosen linear: the whole matrix as kept fraction per block (fixed 0–1 scale), a tile at
native resolution (one cell per weight; the tile picker gives its top-left row, column and size),
the four-way difference of the first two runs on that tile (kept by A only / B only / both /
pruned by both, counted over the whole linear), and the IoU of kept weights against chance.

Structured runs (whole heads and channels removed) are compared by their kept units instead:
layer × unit maps side by side, the overlap of the kept sets per kind, and where they differ.

The handlers are plain functions of the form values returning ``{output name: value}`` (the tests
call them); a user mistake (runs of different models, a damaged run folder) comes back as a
``message``, never an exception.
"""

import logging
import math
from pathlib import Path
from typing import Any

from app import howto
from app.howto import Plot
from toolkit.api import list_runs, open_run
from toolkit.compare import diff as mask_diff
from toolkit.compare import masks as compare
from toolkit.compare import names as run_names
from toolkit.compare import overlay as compare_overlay
from toolkit.compare import structure as compare_structure
from toolkit.errors import ToolkitError
from toolkit.figures import mask_tiles as viz_mask_tiles
from toolkit.figures import masks as viz_masks
from toolkit.figures import overlay as viz_overlay
from toolkit.figures import run as viz
from toolkit.figures import structure as viz_structure
from toolkit.store.runs import RunRecord

log = logging.getLogger(__name__)


def run_choices(runs_dir: str) -> list[tuple[str, str]]:
    """(label, run id) of every run whose compression finished, newest first: ``model · FISTAPruner 50% · OWL``.

    That is a finished run, or one whose later step (evaluation) failed or was cancelled: its
    result and masks are whole. Runs of one model with the same name are told apart by seed, then
    by start time (:func:`toolkit.compare.names.run_names`).
    """
    whole = [record for record in list_runs(runs_dir) if record.status == "finished"
             or (record.status in ("failed", "cancelled") and record.result is not None)]
    by_model: dict[str, list[RunRecord]] = {}
    for record in whole:
        config = record.config if isinstance(record.config, dict) else {}
        by_model.setdefault(str(config.get("model", "?")), []).append(record)
    label_of = {}
    for model, records in by_model.items():
        for name, record in zip(run_names.run_names(records), records, strict=True):
            after = "" if record.status == "finished" else f" ({record.status} after pruning)"
            label_of[record.run_id] = f"{model} · {name}{after}"
    return [(label_of[record.run_id], record.run_id) for record in whole]


def open_records(run_ids: list[str], runs_dir: str) -> list[RunRecord]:
    """The run records of ``run_ids`` (a missing or damaged one raises ToolkitError)."""
    records = []
    for run_id in run_ids or []:
        path = Path(runs_dir) / str(run_id)
        if not path.is_dir():
            raise ToolkitError(f"run {run_id} is not in {runs_dir}; press Refresh")
        records.append(open_run(path))
    return records


def linear_choices(run_ids: list[str], runs_dir: str) -> dict[str, Any]:
    """Layers and linears stored by the first selected run (for the two dropdowns)."""
    try:
        records = open_records(run_ids[:1], runs_dir)
    except ToolkitError as exc:
        return {"message": f"**⚠ {exc}**", "layers": [], "linears": []}
    names = records[0].mask_names() if records else []
    layers = sorted({layer for layer, _ in names})
    linears = list(dict.fromkeys(name for _, name in names))
    return {"message": "", "layers": [str(layer) for layer in layers], "linears": linears}


PANELS = ("masks", "tile", "difference", "overlap", "histograms", "all_linears")  # of the chosen linear's masks
OVERLAYS = ("overlay_error", "overlay_sparsity", "overlay_ppl", "overlay_accuracy")  # of the runs, whatever the linear
DEFAULT_TILE = (0, 0, 128)  # top-left row, top-left column, side (weights)


def cleared(message: str | None = None, *, overlays: bool = False) -> dict[str, Any]:
    """Every Compare panel emptied (None clears a plot), with ``message`` when given.

    Sent whenever the panels stop matching the selection: a comparison refused, or the runs,
    layer, linear or group size changed since the last Compare. The overlays (which do not depend
    on the layer, linear or group) are emptied too with ``overlays=True``.
    """
    view: dict[str, Any] = dict.fromkeys(PANELS + (OVERLAYS if overlays else ()))
    if message is not None:
        view["message"] = message
    return view


def picked(layer: Any, linear: Any) -> dict[str, Any]:
    """The layer, linear or group size changed: the mask panels emptied, the message no longer the old IoU.

    The overlays stay: they are of the runs, not of a linear.
    """
    where = f"layer {layer} · {linear}" if layer not in (None, "") and linear else "another linear"
    return cleared(f"{where} picked: press **Compare** for its masks and IoU.")


def overlay_view(records: list[RunRecord]) -> dict[str, Any]:
    """The four overlay figures of ``records`` (refused in one line for runs of different models)."""
    runs = compare_overlay.overlay_runs(records)
    return {"overlay_error": viz_overlay.layer_overlay_figure(runs, "layer_error"),
            "overlay_sparsity": viz_overlay.layer_overlay_figure(runs, "layer_sparsity"),
            "overlay_ppl": viz_overlay.quality_figure(runs, "ppl"),
            "overlay_accuracy": viz_overlay.quality_figure(runs, "accuracy")}


def _whole(value: Any, what: str) -> int:
    """A form number as an int; ToolkitError naming the field when it is empty or not whole."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ToolkitError(f"{what} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise ToolkitError(f"{what} must be a whole number, got {value}")
    return int(number)


def pick_tile(shape: tuple[int, ...], tile: tuple[Any, Any, Any]) -> mask_diff.Tile:
    """The tile picker's (row, column, size) as a :class:`~toolkit.compare.diff.Tile` of a matrix of ``shape``."""
    row, col, size = tile
    return mask_diff.tile(shape, _whole(row, "the tile row"), _whole(col, "the tile column"),
                          _whole(size, "the tile size"))


def compare_view(run_ids: list[str], layer: Any, linear: str, m: Any, runs_dir: str,
                 tile: tuple[Any, Any, Any] = DEFAULT_TILE) -> dict[str, Any]:
    """Every Compare figure for the chosen runs, linear and tile, or a ``message`` saying what is wrong.

    The overlays need runs of one model; the mask panels also need two or more runs with masks
    (their refusal empties only them and says why).
    """
    try:
        records = open_records(run_ids, runs_dir)
        overlays = overlay_view(records)
    except (ToolkitError, ValueError) as exc:
        return {**cleared(f"**⚠ {exc}**", overlays=True), "notice": str(exc)}
    except Exception as exc:  # a damaged file we did not foresee: a message, never a traceback
        log.exception("overlay failed")
        return {**cleared(f"**⚠ could not overlay these runs ({type(exc).__name__}: {exc})**", overlays=True),
                "notice": str(exc)}
    return {**_masks_view(records, layer, linear, m, tile), **overlays}


def _masks_view(records: list[RunRecord], layer: Any, linear: str, m: Any,
                tile: tuple[Any, Any, Any]) -> dict[str, Any]:
    """The mask panels of :func:`compare_view` (the overlays are drawn apart)."""
    try:
        if any(compare_structure.is_structured(record) for record in records):
            return structure_view(records)
        compare.check_comparable(records)
        if layer in (None, "") or not linear:
            raise ToolkitError("pick a layer and a linear")
        group = int(float(m if m not in (None, "") else 4))
        if group < 1:
            raise ToolkitError(f"the n:m group size m must be a whole number ≥ 1, got {m}")
        masks = compare.load_masks(records, int(layer), str(linear))
        window = pick_tile(next(iter(masks.values())).shape, tile)
        rows = compare.pairwise(masks, group)
        everything = compare.all_linears(records, group)
    except (ToolkitError, ValueError) as exc:
        return {**cleared(f"**⚠ {exc}**"), "notice": str(exc)}
    except Exception as exc:  # a damaged file we did not foresee: a message, never a traceback
        log.exception("compare failed")
        return {**cleared(f"**⚠ could not compare these runs ({type(exc).__name__}: {exc})**"), "notice": str(exc)}
    labels = list(masks)
    first = rows[0]
    note = (f"layer {layer} · {linear}: IoU of kept weights {first['iou']:.3f} (two random masks: "
            f"{first['chance_iou']:.3f}), Hamming {first['hamming']:.3f}, "
            f"{group}-group agreement {_fmt(first['group_agreement'])} ({labels[0]} vs {labels[1]})")
    return {
        "message": note,
        "masks": viz_masks.mask_images_figure(masks, tile=window),
        "tile": viz_mask_tiles.tile_images_figure(masks, window),
        "difference": viz_mask_tiles.category_difference_figure(masks[labels[0]], masks[labels[1]],
                                                                (labels[0], labels[1]), window),
        "overlap": viz_masks.overlap_figure(rows),
        "histograms": viz_masks.sparsity_histograms(masks),
        "all_linears": viz_masks.all_linears_overlap_figure(everything),
    }


def structure_view(records: list[RunRecord]) -> dict[str, Any]:
    """The Compare figures of structured runs: kept units side by side, their overlap, where they differ.

    Raises :class:`ToolkitError` (turned into a message by :func:`compare_view`) for runs that
    cannot be compared.
    """
    runs = compare_structure.load_kept(records)
    rows = compare_structure.kept_overlap(runs)
    labels = list(runs)
    kind = "channels" if all(kept.get("channels") for kept in runs.values()) else "heads"
    first, second = (compare_structure.kept_mask(runs[label], kind) for label in labels[:2])
    summary = "; ".join(f"{row['pair']}: IoU {row['iou']:.3f}, Hamming {row['hamming']:.3f}" for row in rows)
    unused = viz.note_figure("", "keep-masks are for runs that zero weights; structured runs are compared above")
    return {
        "message": f"kept heads and channels · {summary} · the difference map shows {kind} (rows = layers)",
        "masks": viz_structure.kept_compare_figure(runs),
        "difference": viz_masks.mask_difference_figure(first, second, (labels[0], labels[1])),
        "overlap": viz_masks.overlap_figure(rows, title="IoU of kept units with the first run", unit="units"),
        "tile": unused,
        "histograms": unused,
        "all_linears": unused,
    }


def _fmt(value: float) -> str:
    return "n/a (m does not divide the width)" if math.isnan(value) else f"{value:.3f}"


SEEDS_NOTE = ("**Here**: one curve per method (with its allocation and refinement) over the chosen runs' targets. "
              "Runs of one configuration with different calibration seeds are one point at their mean; its bars "
              "are ± one sample standard deviation (n − 1) of the y value and of the achieved sparsity.")
OVERLAY_NOTE = "**Here**: one line per chosen run, named by method, target, allocation and refinement."


def overlay_plots(gr: Any) -> dict[str, Any]:
    """The overlay rows (perplexity vs sparsity and error per layer; sparsity per layer and accuracy), explained."""
    with gr.Row():
        ppl = gr.Plot(show_label=False, elem_id="compare-overlay-ppl")
        error = gr.Plot(show_label=False, elem_id="compare-overlay-error")
    howto.accordions(gr, "compare", Plot.SWEEP, Plot.LAYERS, extra={Plot.SWEEP: SEEDS_NOTE, Plot.LAYERS: OVERLAY_NOTE})
    with gr.Row():
        sparsity = gr.Plot(show_label=False, elem_id="compare-overlay-sparsity")
        accuracy = gr.Plot(show_label=False, elem_id="compare-overlay-accuracy")
    howto.accordions(gr, "compare", Plot.ALLOCATION, Plot.ACCURACY,
                     extra={Plot.ALLOCATION: OVERLAY_NOTE + " Lines, not bars; no target line.",
                            Plot.ACCURACY: SEEDS_NOTE})
    return {"overlay_ppl": ppl, "overlay_accuracy": accuracy, "overlay_error": error, "overlay_sparsity": sparsity}


def build(gr: Any, *, runs_dir: str, history: Any) -> dict[str, Any]:
    """Lay out the Compare tab inside the current Blocks and wire it."""
    with gr.Row():
        runs = gr.Dropdown(choices=[], value=[], multiselect=True, scale=4, elem_id="compare-runs",
                           label="Finished runs of one model (two or more for masks; any number to overlay)")
        refresh = gr.Button("Refresh", scale=1, elem_id="compare-refresh")
    with gr.Row():
        layer = gr.Dropdown(choices=[], label="Layer", elem_id="compare-layer")
        linear = gr.Dropdown(choices=[], label="Linear", elem_id="compare-linear")
        group = gr.Number(value=4, precision=0, minimum=1, label="n:m group size m")
    with gr.Row():  # the tile zoomed to native resolution
        tile_row = gr.Number(value=DEFAULT_TILE[0], precision=0, minimum=0, label="Tile: first row",
                             elem_id="compare-tile-row")
        tile_col = gr.Number(value=DEFAULT_TILE[1], precision=0, minimum=0, label="Tile: first column",
                             elem_id="compare-tile-col")
        tile_size = gr.Dropdown(list(mask_diff.TILE_SIZES), value=DEFAULT_TILE[2], label="Tile size (weights)",
                                elem_id="compare-tile-size")
        go = gr.Button("Compare", variant="primary", elem_id="compare-button")
    message = gr.Markdown("Pick two or more finished runs of one model.", elem_id="compare-message")
    overlays = overlay_plots(gr)
    masks = gr.Plot(show_label=False, elem_id="compare-masks")
    howto.accordions(gr, "compare", Plot.MASKS)
    tile = gr.Plot(show_label=False, elem_id="compare-tile")
    howto.accordions(gr, "compare", Plot.TILE)
    with gr.Row():
        difference = gr.Plot(show_label=False, elem_id="compare-difference", scale=3)
        overlap = gr.Plot(show_label=False, elem_id="compare-overlap", scale=2)
    howto.accordions(gr, "compare", Plot.DIFFERENCE, Plot.OVERLAP)
    histograms = gr.Plot(show_label=False, elem_id="compare-histograms")
    howto.accordions(gr, "compare", Plot.HISTOGRAMS)
    all_linears = gr.Plot(show_label=False, elem_id="compare-all")
    howto.accordions(gr, "compare", Plot.ALL_LINEARS)
    outputs = {"message": message, "masks": masks, "tile": tile, "difference": difference, "overlap": overlap,
               "histograms": histograms, "all_linears": all_linears, **overlays}

    def on_refresh(mine: list[str] | None) -> Any:
        choices = run_choices(runs_dir)
        ids = {value for _, value in choices}
        preselect = [run_id for run_id in (mine or [])[-2:] if run_id in ids]
        return gr.update(choices=choices, value=preselect if len(preselect) == 2 else [])

    def on_runs(run_ids: list[str]) -> dict:
        found = linear_choices(run_ids or [], runs_dir)
        layers, linears = found["layers"], found["linears"]
        panels = {outputs[key]: value for key, value in cleared(found["message"], overlays=True).items()}
        return {layer: gr.update(choices=layers, value=layers[0] if layers else None),
                linear: gr.update(choices=linears, value=linears[0] if linears else None), **panels}

    def on_pick(layer_value: Any, linear_value: Any) -> dict:  # the drawn masks are of another selection now
        return {outputs[key]: value for key, value in picked(layer_value, linear_value).items()}

    def on_compare(run_ids: list[str], layer_value: Any, linear_value: str, m: Any, *window: Any) -> dict:
        view = compare_view(run_ids or [], layer_value, linear_value, m, runs_dir, (window[0], window[1], window[2]))
        notice = view.pop("notice", None)
        if notice:
            gr.Warning(notice)
        return {outputs[key]: value for key, value in view.items()}

    refresh.click(on_refresh, inputs=history, outputs=runs)
    runs.change(on_runs, inputs=runs, outputs=[layer, linear, *outputs.values()])
    for picker in (layer, linear, group, tile_row, tile_col, tile_size):
        picker.change(on_pick, inputs=[layer, linear], outputs=[outputs[key] for key in ("message", *PANELS)])
    go.click(on_compare, inputs=[runs, layer, linear, group, tile_row, tile_col, tile_size],
             outputs=list(outputs.values()),
             concurrency_limit=4)
    return {"runs": runs, "refresh": on_refresh}
