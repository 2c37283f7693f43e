"""Terminal view of a run: tqdm bars fed by events (an adapter, CONTRIBUTING.md R7) and the layer table.

Each bar opens when its phase starts and times only that phase: the pruning bar at the first
``LayerStarted`` (not at ``RunStarted``, which precedes the dense evaluation), the scoring bar of a
block-scope method at its first ``LayerScored``, an evaluation bar at its first progress report,
counting from the units already done then (``initial``), so its first rate is never the speed of
an empty interval.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TextIO

from tqdm.auto import tqdm

from toolkit.events import (
    DepthScored,
    EvalProgress,
    Event,
    LayerDone,
    LayerScored,
    LayerStarted,
    RunStarted,
    RunWarning,
    SublayerPruned,
    UnitsRemoved,
)
from toolkit.store.runs import RunRecord
from toolkit.store.safe_text import terminal

UNITS = {"perplexity": "window", "generation": "prompt", "speed": "timing"}  # EvalProgress.what → bar unit


class ProgressView:
    """A bar over decoder layers, one per evaluation stage (EvalProgress), Warning events printed above.

    Each bar opens when its phase starts (see the module docstring). ``file`` is where the bars are
    drawn (None: tqdm's default, stderr).
    """

    def __init__(self, file: TextIO | None = None) -> None:
        self._file = file
        self._what = ""  # "wanda 50%", from RunStarted
        self._num_layers = 0
        self._layers: tqdm | None = None
        self._scored: tqdm | None = None
        self._eval: dict[str, tqdm] = {}
        self.depth: DepthScored | None = None  # a depth run's layer scores and choice, for its table
        self.units: list[UnitsRemoved] = []  # a block-scope run's heads and channels removed, for its table

    def on_event(self, event: Event) -> None:
        """Advance the bars from engine events."""
        if isinstance(event, RunStarted):  # remembered only: the dense evaluation comes before any layer
            self._what, self._num_layers = f"{event.method} {event.sparsity}", event.num_layers
        elif isinstance(event, LayerScored):
            if self._scored is None:  # the first layer is scored already: count from it
                self._scored = self._bar(event.num_layers, f"score {self._what}", "layer", initial=1)
            else:
                self._scored.update(1)
            _close_when_full(self._scored)
        elif isinstance(event, LayerStarted):
            self._layer_bar(event.num_layers, 0).set_postfix_str(f"layer {event.layer}")
        elif isinstance(event, SublayerPruned) and self._layers is not None:
            what, error = ("err", event.rel_error) if math.isfinite(event.rel_error) else \
                ("weight err", event.weight_rel_error)
            self._layers.set_postfix_str(f"layer {event.layer} {event.name}" +
                                         (f" {what} {error:.3f}" if math.isfinite(error) else ""))
        elif isinstance(event, LayerDone):
            if self._layers is None:  # no LayerStarted came first: this layer is done already
                self._layer_bar(event.num_layers, 1)
            else:
                self._layers.update(1)
            _close_when_full(self._layers)  # the evaluation bars after it draw below, not nested
        elif isinstance(event, EvalProgress):
            stage = f"eval {event.phase}" if event.what == "perplexity" else f"{event.what} {event.phase}"
            advance_bar(self._eval, stage, event.done, event.total, UNITS.get(event.what, "req"), self._file)
        elif isinstance(event, DepthScored):
            self.depth = event
        elif isinstance(event, UnitsRemoved):
            self.units.append(event)
        elif isinstance(event, RunWarning):
            where = f" (layer {event.layer} {event.name})" if event.layer >= 0 else ""
            tqdm.write(f"warning: {event.message}{where}", file=self._file)

    def on_progress(self, stage: str, done: int, total: int) -> None:
        """Evaluation progress (windows scored)."""
        advance_bar(self._eval, stage, done, total, "window", self._file)

    def _layer_bar(self, num_layers: int, initial: int) -> tqdm:
        if self._layers is None:
            self._layers = self._bar(num_layers or self._num_layers, f"prune {self._what}", "layer", initial=initial)
        return self._layers

    def _bar(self, total: int, desc: str, unit: str, initial: int) -> tqdm:
        return tqdm(total=total, desc=desc, unit=unit, initial=initial, leave=True, file=self._file)

    def close(self) -> None:
        """Close every bar."""
        for bar in (self._scored, self._layers, *self._eval.values()):
            if bar is not None:
                bar.close()


def _close_when_full(bar: tqdm | None) -> None:
    if bar is not None and bar.total and bar.n >= bar.total:
        bar.close()


def depth_table(depth: DepthScored) -> str:
    """A depth run's table: every decoder layer's scores, the removed ones marked and named above."""
    removed = sorted(depth.removed)
    score = {"bi": "block influence 1 − E[cos(x_in, x_out)]", "angular": f"angular distance of {depth.block} layers"}
    lines = [f"decoder layers removed: {', '.join(map(str, removed)) or 'none'} ({len(removed)} of {depth.num_layers}; "
             f"scored by {score.get(depth.score, depth.score)} on {depth.tokens:,} tokens)",
             "layer  influence  skip error" + ("   angular" if depth.angular else "") + "  removed"]
    for layer in range(depth.num_layers):
        angular = f"{depth.angular[layer]:>10.4f}" if layer < len(depth.angular) else " " * 10 * bool(depth.angular)
        lines.append(f"{layer:>5} {depth.influence[layer]:>10.4f} {depth.identity_error[layer]:>11.4f}{angular}"
                     f"  {'removed' if layer in removed else ''}".rstrip())
    return "\n".join(lines)


def units_table(units: Sequence[UnitsRemoved]) -> str:
    """A block-scope run's table: per decoder layer, the units of each kind kept of all, and the output error.

    The error is ‖ΔY‖/‖Y‖ of o_proj (heads) or down_proj (channels) after compensation (plain removal in
    brackets), as :class:`~toolkit.events.UnitsRemoved` records it.
    """
    kinds = list(dict.fromkeys(u.unit for u in units))
    rows: dict[int, dict[str, UnitsRemoved]] = defaultdict(dict)
    for event in units:
        rows[event.layer][event.unit] = event
    lines = ["units kept of all per decoder layer, and the output error after compensation (plain removal)",
             "layer " + "".join(f"{kind:>26}" for kind in kinds)]
    for layer in sorted(rows):
        cells = []
        for kind in kinds:
            e = rows[layer].get(kind)
            cells.append(f"{'–':>26}" if e is None else
                         f"{f'{e.kept}/{e.kept + e.removed} {e.rel_error:.4f} ({e.rel_error_uncompensated:.4f})':>26}")
        lines.append(f"{layer:>5} " + "".join(cells))
    return "\n".join(lines)


def _finite(value: Any) -> float:
    """A number from a result record (JSON null, a missing key → nan)."""
    return float(value) if isinstance(value, int | float) else math.nan


def layer_table(result: dict[str, Any], depth: DepthScored | None = None,
                units: Sequence[UnitsRemoved] = ()) -> str:
    """A table with one row per decoder layer.

    The relative reconstruction error of every linear (columns), the sparsity (from the keep-masks) and,
    when quantized, the mean bits per weight. A depth run (whole layers removed, ``depth`` its scores)
    gets :func:`depth_table` instead, a run that removed heads or channels (``units``) :func:`units_table`.
    """
    if depth is not None:
        return depth_table(depth)
    if units and not result["layers"]:
        return units_table(units)
    by_layer: dict[int, dict[str, float]] = defaultdict(dict)
    sparsity: dict[int, list[float]] = defaultdict(list)
    bits: dict[int, list[tuple[float, int]]] = defaultdict(list)  # (bits, weights) of each quantized linear
    names: list[str] = []
    weight: dict[int, dict[str, float]] = defaultdict(dict)  # ‖ΔW‖/‖W‖ of a data-free run (no input to weigh it)
    for row in result["layers"]:
        short = row["name"].split(".")[-1]
        if short not in names:
            names.append(short)
        by_layer[row["layer"]][short] = _finite(row.get("rel_error"))
        weight[row["layer"]][short] = _finite(row.get("weight_rel_error"))
        sparsity[row["layer"]].append(row["sparsity"])
        if row.get("bits") is not None:
            bits[row["layer"]].append((row["bits"], math.prod(row.get("shape") or [1])))
    header = "layer " + " ".join(f"{n[:9]:>9}" for n in names) + "  sparsity" + ("  bits" if bits else "")
    title = "relative reconstruction error ‖ΔW X‖/‖W X‖ per linear"
    if by_layer and all(math.isnan(v) for row in by_layer.values() for v in row.values()):
        if any(math.isfinite(v) for row in weight.values() for v in row.values()):
            title, by_layer = "relative weight error ‖ΔW‖/‖W‖ per linear (no calibration data)", weight
        else:
            title = "per linear: no reconstruction error measured"
    lines = [title, header]
    for layer in sorted(by_layer):
        cells = " ".join(f"{by_layer[layer].get(n, math.nan):>9.4f}" for n in names)
        mean_bits = f"  {sum(b * n for b, n in bits[layer]) / sum(n for _, n in bits[layer]):.3f}" \
            if bits.get(layer) else ""  # the layer's bits per weight: the accounting's figure, per layer
        lines.append(f"{layer:>5} {cells}  {sum(sparsity[layer]) / len(sparsity[layer]):.4f}{mean_bits}")
    return "\n".join(lines)


def advance_bar(bars: dict[str, tqdm], key: str, done: int, total: int, unit: str,
                file: TextIO | None = None) -> None:
    """Set ``bars[key]`` to ``done`` of ``total``; close it when complete.

    The bar is created on the first report, counting from ``done`` (tqdm's ``initial``): its rate
    is measured over the units scored after it opened, never ``done`` over the microseconds since.
    """
    bar = bars.get(key)
    if bar is None:
        bar = bars[key] = tqdm(total=total, desc=key, unit=unit, initial=done, leave=False, file=file)
    bar.n = done
    bar.refresh()
    if done >= total:
        bar.close()


def summary(result: dict[str, Any], not_saved: str = "") -> None:
    """The run's closing lines: compression achieved, time, memory, devices, accounting, perplexities, run folder.

    One line says where the checkpoint was saved and its size, or that the model was not saved and
    why: ``not_saved`` (a method whose states no checkpoint holds), else that --save-model writes one.
    """
    print(f"method {result['method']}  compression {result['compression']['label']}  "
          f"achieved sparsity {result['achieved_sparsity']:.4f}  prune {result['prune_seconds']:.1f} s  "
          f"peak RSS {result['peak_rss_mb']:.0f} MiB")
    peak = result.get("gpu_peak_mb")
    print(f"ran on {result['devices']}  GPU memory peak {'n/a' if peak is None else f'{peak:.0f} MiB'}")
    acct = result["accounting"]
    on_disk = f"  checkpoint {acct['checkpoint_bytes'] / 2**20:.2f} MiB on disk" if acct["checkpoint_bytes"] else ""
    print(f"linear weights {acct['params_before']:,} → {acct['params_after']:,}  kept {acct['nonzeros_kept']:,}  "
          f"{acct['bits_per_weight']:.3f} bits/weight{_counted(acct)}  "
          f"estimated {acct['estimated_bytes'] / 2**20:.2f} MiB{on_disk}")
    if result.get("bought"):
        print(bought_line(result["bought"]))
    if result.get("zero_pattern"):  # a quantizer on a pruned input: its zeros kept, or how far they broke
        print(result["zero_pattern"]["message"])
    checkpoint_summary(result.get("checkpoint"))
    precision_summary(result)
    for line in plan_lines(result):
        print(line)
    for name, value in result["dense_ppl"].items():
        print(f"dense  ppl ({name}): {value:.3f}" + (" (cached)" if name in result.get("dense_ppl_cached", []) else ""))
    for name, value in result["ppl"].items():
        print(f"pruned ppl ({name}): {value:.3f}")
    print(saved_line(result.get("checkpoint"), not_saved))
    print(f"run record: {result['run_dir']}")


def _counted(acct: dict[str, Any]) -> str:
    """" (what the figure counts)" from result.json ``accounting.bits_counted``; "" for older runs."""
    return f" ({acct['bits_counted']})" if acct.get("bits_counted") else ""


def bought_line(bought: dict[str, Any]) -> str:
    """What the compression bought (result.json ``bought``): weights kept, bytes as saved, decode speed."""
    how = "measured" if bought["bytes_measured"] else "computed"
    line = (f"bought: {bought['kept_weights']:,} of {bought['params_before']:,} weights kept  stored "
            f"{bought['stored_as']} {bought['bytes_stored'] / 2**20:.2f} MiB ({how}) vs dense "
            f"{bought['bytes_dense'] / 2**20:.2f} MiB")
    if not bought["smaller_as_saved"]:
        line += (": not smaller or faster as saved (pruned weights are stored as zeros in a dense checkpoint and "
                 "multiplied like any other)")
    speed = bought.get("speed")
    if speed:
        line += (f"  decode {speed['dense_tokens_per_s']:.1f} → {speed['tokens_per_s']:.1f} tokens/s "
                 f"({speed['device']}, batch {speed['batch']}, {speed['new_tokens']} new tokens)")
        for dense, shrunk in zip(speed.get("dense_by_batch", []), speed.get("by_batch", []), strict=False):
            line += (f"  batch {shrunk['batch']}: prefill {dense['prefill_tokens_per_s']:.1f} → "
                     f"{shrunk['prefill_tokens_per_s']:.1f}, decode {dense['decode_tokens_per_s']:.1f} → "
                     f"{shrunk['decode_tokens_per_s']:.1f} tokens/s")
    return line


def plan_lines(result: dict[str, Any]) -> list[str]:
    """The per-layer allocation (when not uniform) and DSnoT's refinement, one line each; [] for a plain run."""
    lines = []
    plan = result.get("allocation") or {}
    ratios = plan.get("ratios") or []
    if plan.get("kind", "uniform") != "uniform" and ratios:
        seconds = (result.get("phases") or {}).get("plan")
        took = f", plan {seconds:.1f} s" if seconds else ""
        lines.append(f"allocation {plan['label']}: layer sparsity {min(ratios):.3f} to {max(ratios):.3f} over "
                     f"{len(ratios)} layers{took}")
    refine = result.get("refine") or {}
    if refine:
        before, after = refine.get("rel_error_before_mean"), refine.get("rel_error_after_mean")
        errors = f", mean error {before:.4f} → {after:.4f}" if before is not None and after is not None else ""
        lines.append(f"refine {refine['label']}: {refine.get('swaps', 0):,} swaps{errors}")
    return lines


def saved_line(checkpoint: dict[str, Any] | None, not_saved: str = "") -> str:
    """Where the checkpoint is and its size on disk, or why there is none."""
    if checkpoint:
        return f"model saved: {checkpoint['folder']} ({checkpoint['bytes'] / 2**20:.2f} MiB on disk)"
    if not_saved:
        return f"model not saved: {not_saved}"
    return "model not saved (add --save-model to write a loadable checkpoint)"


def write_json(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON to ``path`` and say so."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    print(f"result written to {path}")


def precision_summary(result: dict[str, Any]) -> None:
    """The dtypes the run used, and where the compression's time went (seconds per phase, all layers)."""
    precision = result.get("precision") or {}
    words = (("storage", "model stored in"), ("layer_on_device", "layers on the device in"), ("forward", "passes"),
             ("statistics", "statistics and solves"), ("saved", "saved in"))
    said = [f"{label} {precision[key]}" for key, label in words if precision.get(key) is not None]
    if said:  # a block-scope run records fewer of them: say only what it recorded
        print("precision: " + ", ".join(said))
    phases = result.get("phases") or {}
    if phases:
        layers = len([r for r in result.get("phase_layers", []) if r.get("layer", -1) >= 0]) or 1
        cells = "  ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())
        print(f"seconds per phase ({layers} layers): {cells}")
    line = layer_error_line(result)
    if line:
        print(line)


def calibration_note(config: Any) -> str:
    """One line when the run computes no calibration input (a data-free method), naming what it ignores; else ""."""
    if config.uses_calibration():
        return ""
    given = f" (--calib {config.calib} is not used)" if config.calib != type(config).calib else ""
    return (f"no calibration: {config.method} reads the weights alone, so no calibration input is computed (capture, "
            f"statistics and propagation skipped; the per-layer figure is the weight error ‖ΔW‖/‖W‖){given}")


def layer_error_line(result: dict[str, Any]) -> str:
    """The layer output error in one line: its mean and sample, or that it was not measured ("" in older records)."""
    record = result.get("layer_error") or {}
    if not record:
        return ""
    if not record.get("measured"):
        why = "no calibration: the method reads the weights alone" if record.get("mode") == "no calibration" \
            else "--error none"
        return f"layer output error: not measured ({why})"
    values = [v for v in record.get("per_layer") or [] if v is not None]
    if not values:
        return ""
    windows = f", on {record['windows']} calibration windows" if record.get("windows") else ""
    return (f"layer output error ‖Y* − Y‖/‖Y‖: mean {sum(values) / len(values):.4f}, "
            f"max {max(values):.4f} over {len(values)} layers{windows}")


def checkpoint_summary(checkpoint: dict[str, Any] | None) -> None:
    """The saved checkpoint's format, size and bits per weight (quantized runs), and what it keeps."""
    if not checkpoint or checkpoint.get("format") == "dense":
        return
    c = checkpoint
    print(f"checkpoint {c['format']} (compressed-tensors {c['compressed_tensors']}): {c['bytes'] / 2**20:.2f} MiB "
          f"on disk, weights {c['size_vs_dense_bf16']:.3f} × the dense bf16 {c['dense_bf16_bytes'] / 2**20:.2f} MiB; "
          f"the {c['quantized_linears']} quantized linears' tensors take {c['bits_per_weight']:.3f} bits per weight on "
          "disk (codes packed in int32 words, scales in the checkpoint's dtype, zero points and shapes as stored; "
          "not the bits/weight above)")
    if "sparse_note" in checkpoint:
        print(f"note: {checkpoint['sparse_note']}")


def run_lines(records: Sequence[RunRecord]) -> list[str]:
    r"""``python -m toolkit runs``: one line a run (id, status or ``damaged: <why>``, model, method, label, ppl).

    Every value comes from a run folder, so each passes through :func:`toolkit.store.safe_text.terminal`:
    an escape sequence in a folder name or a config value is printed as ``\x1b[…``, never obeyed.
    """
    lines = []
    for record in records:
        cfg, res = record.config, record.result or {}
        ppl = ", ".join(f"{terminal(k)} {v:.2f}" if v is not None else f"{terminal(k)} –"
                        for k, v in res.get("ppl", {}).items())
        status = f"damaged: {record.error}" if record.status == "damaged" else record.status
        lines.append(f"{terminal(record.run_id):<48} {terminal(status):<11} {terminal(cfg.get('model', '?')):<14} "
                     f"{terminal(cfg.get('method', '?')):<10} {terminal(record.label):<8} {ppl}")
    return lines
