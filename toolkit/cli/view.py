"""Terminal view of a run: tqdm bars fed by events (an adapter, CONTRIBUTING.md R7) and the layer table."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tqdm.auto import tqdm

from toolkit.events import EvalProgress, Event, LayerDone, LayerStarted, RunStarted, RunWarning, SublayerPruned

UNITS = {"perplexity": "window", "generation": "prompt"}  # EvalProgress.what → bar unit (a task: requests)


class ProgressView:
    """A bar over decoder layers, one per evaluation stage (EvalProgress), Warning events printed above."""

    def __init__(self) -> None:
        self._layers: tqdm | None = None
        self._eval: dict[str, tqdm] = {}

    def on_event(self, event: Event) -> None:
        """Advance the bars from engine events."""
        if isinstance(event, RunStarted):
            self._layers = tqdm(total=event.num_layers, desc=f"prune {event.method} {event.sparsity}", unit="layer",
                                leave=True)
        elif isinstance(event, LayerStarted) and self._layers is not None:
            self._layers.set_postfix_str(f"layer {event.layer}")
        elif isinstance(event, SublayerPruned) and self._layers is not None:
            self._layers.set_postfix_str(f"layer {event.layer} {event.name} err {event.rel_error:.3f}")
        elif isinstance(event, LayerDone) and self._layers is not None:
            self._layers.update(1)
        elif isinstance(event, EvalProgress):
            stage = f"eval {event.phase}" if event.what == "perplexity" else f"{event.what} {event.phase}"
            advance_bar(self._eval, stage, event.done, event.total, UNITS.get(event.what, "req"))
        elif isinstance(event, RunWarning):
            where = f" (layer {event.layer} {event.name})" if event.layer >= 0 else ""
            tqdm.write(f"warning: {event.message}{where}")

    def on_progress(self, stage: str, done: int, total: int) -> None:
        """Evaluation progress (windows scored)."""
        advance_bar(self._eval, stage, done, total, "window")

    def close(self) -> None:
        """Close every bar."""
        if self._layers is not None:
            self._layers.close()
        for bar in self._eval.values():
            bar.close()


def layer_table(result: dict[str, Any]) -> str:
    """A table with one row per decoder layer.

    The relative reconstruction error of every linear (columns), the sparsity (from the keep-masks) and,
    when quantized, the mean bits per weight.
    """
    by_layer: dict[int, dict[str, float]] = defaultdict(dict)
    sparsity: dict[int, list[float]] = defaultdict(list)
    bits: dict[int, list[float]] = defaultdict(list)
    names: list[str] = []
    for row in result["layers"]:
        short = row["name"].split(".")[-1]
        if short not in names:
            names.append(short)
        by_layer[row["layer"]][short] = row["rel_error"]
        sparsity[row["layer"]].append(row["sparsity"])
        if row.get("bits") is not None:
            bits[row["layer"]].append(row["bits"])
    header = "layer " + " ".join(f"{n[:9]:>9}" for n in names) + "  sparsity" + ("  bits" if bits else "")
    lines = ["relative reconstruction error ‖ΔW X‖/‖W X‖ per linear", header]
    for layer in sorted(by_layer):
        cells = " ".join(f"{by_layer[layer].get(n, float('nan')):>9.4f}" for n in names)
        mean_bits = f"  {sum(bits[layer]) / len(bits[layer]):.3f}" if bits.get(layer) else ""
        lines.append(f"{layer:>5} {cells}  {sum(sparsity[layer]) / len(sparsity[layer]):.4f}{mean_bits}")
    return "\n".join(lines)


def advance_bar(bars: dict[str, tqdm], key: str, done: int, total: int, unit: str) -> None:
    """Set ``bars[key]`` (created on first use) to ``done`` of ``total``; close it when complete."""
    bar = bars.get(key)
    if bar is None:
        bar = bars[key] = tqdm(total=total, desc=key, unit=unit, leave=False)
    bar.n = done
    bar.refresh()
    if done >= total:
        bar.close()


def summary(result: dict[str, Any]) -> None:
    """The run's closing lines: compression achieved, time, memory, devices, accounting, perplexities, run folder."""
    print(f"method {result['method']}  compression {result['compression']['label']}  "
          f"achieved sparsity {result['achieved_sparsity']:.4f}  prune {result['prune_seconds']:.1f} s  "
          f"peak RSS {result['peak_rss_mb']:.0f} MiB")
    peak = result.get("gpu_peak_mb")
    print(f"ran on {result['devices']}  GPU memory peak {'n/a' if peak is None else f'{peak:.0f} MiB'}")
    acct = result["accounting"]
    on_disk = f"  checkpoint {acct['checkpoint_bytes'] / 2**20:.2f} MiB on disk" if acct["checkpoint_bytes"] else ""
    print(f"linear weights {acct['params_before']:,} → {acct['params_after']:,}  kept {acct['nonzeros_kept']:,}  "
          f"{acct['bits_per_weight']:.3f} bits/weight  estimated {acct['estimated_bytes'] / 2**20:.2f} MiB{on_disk}")
    checkpoint_summary(result.get("checkpoint"))
    precision_summary(result)
    for name, value in result["dense_ppl"].items():
        print(f"dense  ppl ({name}): {value:.3f}" + (" (cached)" if name in result.get("dense_ppl_cached", []) else ""))
    for name, value in result["ppl"].items():
        print(f"pruned ppl ({name}): {value:.3f}")
    print(f"run record: {result['run_dir']}")


def precision_summary(result: dict[str, Any]) -> None:
    """The dtypes the run used, and where the compression's time went (seconds per phase, all layers)."""
    precision = result.get("precision") or {}
    if precision:
        print(f"precision: model stored in {precision.get('storage')}, layers on the device in "
              f"{precision.get('layer_on_device')}, passes {precision.get('forward')}, statistics and solves "
              f"{precision.get('statistics')}, saved in {precision.get('saved')}")
    phases = result.get("phases") or {}
    if phases:
        layers = len([r for r in result.get("phase_layers", []) if r.get("layer", -1) >= 0]) or 1
        cells = "  ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())
        print(f"seconds per phase ({layers} layers): {cells}")


def checkpoint_summary(checkpoint: dict[str, Any] | None) -> None:
    """The saved checkpoint's format, size and bits per weight (quantized runs), and what it keeps."""
    if not checkpoint or checkpoint.get("format") == "dense":
        return
    c = checkpoint
    print(f"checkpoint {c['format']} (compressed-tensors {c['compressed_tensors']}): {c['bytes'] / 2**20:.2f} MiB "
          f"on disk, weights {c['size_vs_dense_bf16']:.3f} × the dense bf16 {c['dense_bf16_bytes'] / 2**20:.2f} MiB; "
          f"{c['quantized_linears']} quantized linears at {c['bits_per_weight']:.3f} bits/weight "
          "(codes, scales and zero points as stored)")
    if "sparse_note" in checkpoint:
        print(f"note: {checkpoint['sparse_note']}")
