"""The engine on real-shaped models with random weights: time, host and GPU memory, and the matmul floor.

    python -m benchmarks.bench_scale --shape llama-2-7b --layers 2 --nsamples 2 --seqlen 128 --device cpu
    python -m benchmarks.bench_scale --shape llama-3-8b --device cuda --save-model --json out.jsonl
    python -m benchmarks.bench_scale --shape qwen2.5-7b --floor-only --device cuda

A random-weight checkpoint of the shape (``benchmarks.scale_configs``: the real Hugging Face config values,
no hub access) is written to ``--workdir`` (default a temporary folder, removed at the end unless ``--keep``;
a complete folder from an earlier ``--keep`` run with the same inputs is reused), stored in ``--dtype``, with
the byte-tokenizer marker instead of a tokenizer. It is built in a child process (``--build-only``), so the
build's memory never counts in this process's RSS peak (``VmHWM``, its own high-water mark, excludes children). The
run then goes through ``toolkit.api.prune_model`` in this process: calibration on the embedded ``wiki`` text,
no evaluation, all offline.

One JSON object a run (one line) is printed, and appended to ``--json FILE`` when given: the inputs, the prune
time, the host RSS peak and the RSS before the run (after the checkpoint was written), the peak over the
model's bf16 weight bytes, the GPU peak, the saved checkpoint's bytes and dtypes (``--save-model``), the
result's ``phases`` / ``phase_layers`` when the toolkit reports them, the host memory by phase (sampled RSS:
``rss_by_phase_mib``, ``rss_timeline``, see ``benchmarks.rss_timeline``), and the matmul floor of one layer
(``benchmarks.scale_floor``) with the measured time over it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.records import emit
from benchmarks.rss_timeline import RssTimeline
from benchmarks.scale_configs import (
    DTYPES,
    SHAPES,
    build_checkpoint,
    checkpoint_report,
    is_built,
    param_count,
    shape_config,
)
from benchmarks.scale_floor import floor_ratios, floor_seconds
from toolkit.cli.main import parse_set as cli_parse_set
from toolkit.errors import ToolkitError
from toolkit.runtime.rss import peak_rss_mib

ROOT = Path(__file__).resolve().parents[1]
FORWARD_ASKED = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class ScaleOptions:
    """What one benchmark run asks for; the CLI flags of the same names."""

    stored_dtype: str = "bfloat16"
    method: str = "wanda"
    sparsity: str = "0.5"
    nsamples: int = 128
    seqlen: int = 2048
    device: str = "auto"
    forward_dtype: str = "auto"
    save_model: bool = False
    stream: bool = False
    error: str = "sample"  # the layer output error: sample | none (RunConfig.error)
    options: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    keep: bool = False
    seed: int = 0
    build_in_subprocess: bool = True  # False only in tests: the build's memory then counts in the RSS peak


class BenchError(Exception):
    """A request this benchmark cannot run; the message says what to change."""


def rss_now_mib() -> float | None:
    """Resident memory of this process now (VmRSS of /proc/self/status), MiB; None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def resolve_device(device: str) -> str:
    """``auto`` → cuda when available, else cpu; raises :class:`BenchError` for cuda without a GPU."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BenchError("--device cuda: no CUDA device is available here; use --device cpu")
    return device


def run_config_kwargs(folder: Path, opts: ScaleOptions, device: str, runs_dir: Path) -> dict[str, Any]:
    """The RunConfig keywords of this run (no evaluation; the checkpoint's own dtype)."""
    return {
        "model": str(folder), "method": opts.method, "sparsity": opts.sparsity, "nsamples": opts.nsamples,
        "seqlen": opts.seqlen, "eval_data": None, "device": device, "calib": "wiki", "seed": opts.seed,
        "forward_dtype": opts.forward_dtype, "out_dir": str(runs_dir), "save_model": opts.save_model,
        "options": dict(opts.options), "dtype": "auto", "stream": opts.stream, "error": opts.error,
    }


def build(shape: dict[str, Any], folder: Path, opts: ScaleOptions) -> dict[str, Any]:
    """Write the random checkpoint into ``folder`` (in a child process unless told otherwise); returns its report.

    A folder already complete for the same inputs is reused (``reused: true``).
    """
    if is_built(folder, shape, opts.stored_dtype, opts.seed):
        return {"reused": True, "subprocess": False}
    if not opts.build_in_subprocess:
        return {**build_checkpoint(shape, folder, opts.stored_dtype, opts.seed), "reused": False, "subprocess": False}
    command = [sys.executable, "-m", "benchmarks.bench_scale", "--build-only", "--build-config", json.dumps(shape),
               "--dtype", opts.stored_dtype, "--workdir", str(folder), "--seed", str(opts.seed)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"building the random checkpoint failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {**report, "reused": False, "subprocess": True}


def prune(kwargs: dict[str, Any], device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the method through ``toolkit.api.prune_model``; returns (result, memory measured around it)."""
    import torch

    from toolkit.api import RunConfig, prune_model

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    memory: dict[str, Any] = {"rss_before_run_mib": rss_now_mib()}
    cpu = time.process_time()
    with RssTimeline().running() as timeline:
        result = prune_model(RunConfig(**kwargs))
    memory["run_cpu_seconds"] = time.process_time() - cpu  # this process's CPU time (all threads): load included
    memory["rss_peak_mib"] = peak_rss_mib()  # this process's own high-water mark, children excluded
    memory.update(timeline.report())
    memory["gpu_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    return result, memory


def _round(value: Any, digits: int = 3) -> Any:
    return round(value, digits) if isinstance(value, float) else value


def make_record(name: str, shape: dict[str, Any], opts: ScaleOptions, result: dict[str, Any],
                memory: dict[str, Any]) -> dict[str, Any]:
    """The JSON object of one run (floor fields are added by :func:`measure`)."""
    layers = shape["num_hidden_layers"]
    params = param_count(shape)
    weight_bytes = 2 * params
    checkpoint = result.get("checkpoint") or None
    saved = checkpoint_report(checkpoint["folder"]) if checkpoint else None
    return {
        "benchmark": "scale", "shape": name, "layers": layers, "stored_dtype": opts.stored_dtype,
        "method": opts.method, "sparsity": result.get("sparsity", opts.sparsity), "options": dict(opts.options),
        "nsamples": opts.nsamples, "seqlen": opts.seqlen, "device": result.get("device"),
        "device_asked": opts.device, "forward_dtype": opts.forward_dtype, "stream": opts.stream, "error": opts.error,
        "layer_error": result.get("layer_error"),
        "prune_seconds": _round(result["prune_seconds"]),
        "seconds_per_layer": _round(result["prune_seconds"] / layers, 4),
        "run_cpu_seconds": _round(memory.get("run_cpu_seconds")), "rss_peak_mib": _round(memory["rss_peak_mib"], 1),
        "rss_before_run_mib": _round(memory["rss_before_run_mib"], 1),
        "rss_by_phase_mib": memory.get("rss_by_phase_mib"), "rss_file_peak_mib": memory.get("rss_file_peak_mib"),
        "rss_file_by_phase_mib": memory.get("rss_file_by_phase_mib"),
        "params": params, "bf16_weight_bytes": weight_bytes,
        "rss_peak_over_bf16_weights": _round(memory["rss_peak_mib"] * 2**20 / weight_bytes),
        "gpu_peak_mib": _round(memory["gpu_peak_mib"], 1), "toolkit_gpu_peak_mb": _round(result.get("gpu_peak_mb"), 1),
        "checkpoint_bytes": saved["bytes"] if saved else None, "checkpoint_dtypes": saved["dtypes"] if saved else None,
        "achieved_sparsity": _round(result.get("achieved_sparsity"), 4),
        "phases": result.get("phases"), "phase_layers": result.get("phase_layers"),
        "engine": result.get("engine"), "versions": result.get("versions"),
        "rss_timeline": memory.get("rss_timeline"), "rss_sample_seconds": memory.get("rss_sample_seconds"),
    }


def floor_record(shape: dict[str, Any], opts: ScaleOptions, device: str) -> dict[str, Any]:
    """The matmul floor of one layer of ``shape`` for this run's tokens, device and forward dtype."""
    floor = floor_seconds(shape, opts.nsamples, opts.seqlen, device, opts.forward_dtype)
    floor["floor_seconds_per_layer"] = round(floor["floor_seconds_per_layer"], 6)
    return floor


def add_floor(record: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the floor and the measured time over it."""
    ratios = floor_ratios(floor, record["seconds_per_layer"], record["phases"], record["layers"])
    return {**record, "floor_seconds_per_layer": floor["floor_seconds_per_layer"],
            **{key: _round(value) for key, value in ratios.items()}, "floor": floor}


def _workspace(opts: ScaleOptions, name: str, shape: dict[str, Any]) -> tuple[Path, Path, Path, bool]:
    """(checkpoint folder, runs folder, what to remove at the end, whether that was made here)."""
    made = opts.workdir is None
    base = Path(tempfile.mkdtemp(prefix="bench_scale_")) if made else Path(str(opts.workdir))
    base.mkdir(parents=True, exist_ok=True)
    folder = base / f"{name}-L{shape['num_hidden_layers']}-{opts.stored_dtype}"
    runs = Path(tempfile.mkdtemp(prefix="runs_", dir=base)) if not made else base / "runs"
    return folder, runs, base, made


def _cleanup(folder: Path, runs: Path, base: Path, made: bool) -> None:
    """Remove what this run wrote: the whole temporary base, or the checkpoint and runs inside a given workdir."""
    for path in ([base] if made else [folder, runs]):
        shutil.rmtree(path, ignore_errors=True)


def measure(name: str, shape: dict[str, Any], opts: ScaleOptions) -> dict[str, Any]:
    """Build the checkpoint of ``shape``, prune it, measure; returns the JSON object of the run.

    ``shape`` holds Hugging Face config values (``SHAPES`` or a tiny one in tests), ``name`` labels it.
    Raises :class:`BenchError` for a request this toolkit cannot run.
    """
    device = resolve_device(opts.device)
    folder, runs, base, made = _workspace(opts, name, shape)
    try:
        kwargs = run_config_kwargs(folder, opts, device, runs)  # refuses --stream before the build
        built = build(shape, folder, opts)
        result, memory = prune(kwargs, device)
        record = make_record(name, shape, opts, result, memory)
        record["build"] = {key: built.get(key) for key in ("seconds", "bytes", "reused", "subprocess")}
        return add_floor(record, floor_record(shape, opts, device))
    finally:
        if not opts.keep:
            _cleanup(folder, runs, base, made)


def parse_set(items: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` → dict, as the CLI's ``--set`` reads it; raises :class:`BenchError` on a bad item."""
    try:
        return cli_parse_set(items)
    except ToolkitError as exc:
        raise BenchError(str(exc)) from None


def make_parser() -> argparse.ArgumentParser:
    """The command line (``--build-only`` and ``--build-config`` are the child process's, hidden)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=list(SHAPES), help="the real model whose shape is used (required)")
    parser.add_argument("--layers", type=int, default=None, help="keep the first N decoder layers (default all)")
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="the dtype the checkpoint is stored in")
    parser.add_argument("--method", default="wanda")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--nsamples", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and of the calibration sampling")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--forward-dtype", choices=FORWARD_ASKED, default="auto")
    parser.add_argument("--workdir", default=None, help="where the checkpoint and runs go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and the run store at the end")
    parser.add_argument("--save-model", action="store_true", help="save the pruned checkpoint; report bytes, dtypes")
    parser.add_argument("--stream", action="store_true", help="RunConfig(stream=True), where the toolkit has it")
    parser.add_argument("--error", choices=("sample", "none"), default="sample",
                        help="the layer output error: on 4 calibration windows (sample) or not measured (none)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a method option")
    parser.add_argument("--json", default=None, help="also append each JSON line to this file")
    parser.add_argument("--floor-only", action="store_true", help="print only the matmul floor of one layer")
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--build-config", default=None, help=argparse.SUPPRESS)
    return parser


def options_from(args: argparse.Namespace) -> ScaleOptions:
    """The :class:`ScaleOptions` of parsed arguments."""
    return ScaleOptions(stored_dtype=args.dtype, method=args.method, sparsity=args.sparsity, nsamples=args.nsamples,
                        seqlen=args.seqlen, device=args.device, forward_dtype=args.forward_dtype,
                        save_model=args.save_model, stream=args.stream, error=args.error, options=parse_set(args.set),
                        workdir=args.workdir, keep=args.keep, seed=args.seed)


def floor_only(name: str, shape: dict[str, Any], opts: ScaleOptions) -> dict[str, Any]:
    """The JSON object of ``--floor-only``: the inputs and the floor of one layer."""
    device = resolve_device(opts.device)
    return {"benchmark": "scale_floor", "shape": name, "nsamples": opts.nsamples, "seqlen": opts.seqlen,
            "device": device, "forward_dtype": opts.forward_dtype, **floor_record(shape, opts, device)}


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run: the child's build, the floor only, or one measured run."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.build_only:
        if not (args.build_config and args.workdir):
            parser.error("--build-only needs --build-config and --workdir")
        print(json.dumps(build_checkpoint(json.loads(args.build_config), args.workdir, args.dtype, args.seed)))
        return
    if not args.shape:
        parser.error(f"--shape is required: one of {', '.join(SHAPES)}")
    from toolkit.errors import ToolkitError

    try:
        shape = shape_config(args.shape, args.layers)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        opts = options_from(args)
        record = floor_only(args.shape, shape, opts) if args.floor_only else measure(args.shape, shape, opts)
    except (BenchError, ToolkitError) as exc:
        parser.exit(2, f"bench_scale: error: {exc}\n")
    emit(record, args.json)


if __name__ == "__main__":
    main()
