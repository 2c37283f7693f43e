"""Why AWP's quantization stays near round-to-nearest: per linear, ‖C‖_F/‖C‖₂, the loss per iteration, codes moved.

Runs AWP quantize-only (default ``int4:g128``) on the embedded model with each ``--steps`` variant
(``paper``, ``spectral``, ``backtracking``; ``iterations`` fixed at the paper's 10 unless given), no
evaluation, and prints one JSON object per linear and variant, read from the run's own events (the
SolverSteps AWP emits, the same the app's solver panel draws, and SublayerPruned.info):

- ``c_fro``, ``c_spec``, ``c_ratio``: ‖C‖_F, ‖C‖₂ (power iteration, ``power_iters`` of the run) and
  their ratio, C the Gram matrix XXᵀ/N the engine hands AWP;
- ``eta``: the step (the first trial step of the last iteration for backtracking);
- ``loss``: tr((W − Θ)C(W − Θ)ᵀ) at every emitted iteration (0 = RTN), ``objective`` its relative square
  root ‖(W − Θ)C^½‖_F/‖WC^½‖_F;
- ``codes_changed``: the fraction of codes different from RTN's at every iteration, and the final one;
- ``objective_rtn``: round-to-nearest's objective on the same C where the run started elsewhere
  (``--set quant_init=gptq``: ``objective_init`` is then GPTQ's);
- ``scale_change_trace``: ‖s − s_RTN‖_F/‖s_RTN‖_F of the group scales at every iteration (how far the
  grid itself moved), ``best_loss``/``best_iteration``: the lowest loss of the trace and where.

Protocol: calibration wiki train 32 × 512 seed 0 (``--nsamples`` to shorten, then the JSON says so).

    python -m benchmarks.bench_awp_diagnose --json benchmarks/results/awp_diagnose_cpu.jsonl

``--set KEY=VALUE`` adds AWP options (recorded as ``options``), ``--layers N`` stops the run after its
first N decoder layers (each later layer's inputs then are never computed) and ``--every-step`` emits
every iteration instead of at most 100 per linear. The long-run diagnosis of the grid update
(docs/methods/awp.md)::

    python -m benchmarks.bench_awp_diagnose --quant int3:g128 --layers 4 --every-step --set stop=gradient \
        --json benchmarks/results/awp_grid_cpu.jsonl
    python -m benchmarks.bench_awp_diagnose --quant int3:g128 --layers 4 --every-step --set stop=gradient \
        --set grid_update=nearest --json benchmarks/results/awp_grid_cpu.jsonl

``--from-run DIR ...`` reads the same records from finished AWP quantize runs' ``events.jsonl`` (for
example the full-protocol runs of ``bench_prune``) instead of running again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any

from benchmarks.records import emit
from toolkit.api import RunConfig, prune_model
from toolkit.errors import RunCancelled
from toolkit.events import Event, RunStarted, SolverStep, SublayerPruned, event_from_dict
from toolkit.run.config import CancelToken


def _git() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "toolkit"]).returncode
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


class Collector:
    """The AWP SolverSteps per linear and the SublayerPruned events of one run."""

    def __init__(self, layers: int = 0) -> None:
        self.steps: dict[tuple[int, str], list[SolverStep]] = {}
        self.done: list[SublayerPruned] = []
        self.layers, self.cancel = layers, CancelToken()  # layers > 0: cancel once a later layer starts

    def __call__(self, event: Event) -> None:
        if isinstance(event, SolverStep) and event.solver == "awp":
            if self.layers and event.layer >= self.layers:
                self.cancel.cancel()
                return
            self.steps.setdefault((event.layer, event.name), []).append(event)
        elif isinstance(event, SublayerPruned) and not (self.layers and event.layer >= self.layers):
            self.done.append(event)

    def records(self, args: argparse.Namespace, step: str, protocol: dict[str, Any]) -> list[dict[str, Any]]:
        """One record per linear."""
        return [_record(e, self.steps.get((e.layer, e.name), []), args, step, protocol) for e in self.done]


def from_run(args: argparse.Namespace, run_dir: str) -> list[dict[str, Any]]:
    """The records of a finished run, from its ``events.jsonl``."""
    collect, started = Collector(), None
    with open(f"{run_dir}/events.jsonl", encoding="utf-8") as handle:
        for line in handle:
            event = event_from_dict(json.loads(line))
            started = event if isinstance(event, RunStarted) else started
            collect(event)
    options = started.options if started is not None else {}
    with open(f"{run_dir}/result.json", encoding="utf-8") as handle:  # the commit the run itself recorded
        git = (json.load(handle).get("versions") or {}).get("git")
    protocol = {"calibration": {"source": "wiki", "nsamples": args.nsamples, "seqlen": args.seqlen, "seed": 0},
                "run_dir": run_dir, "git": git}
    return collect.records(args, str(options.get("step", "paper")), protocol)


def diagnose(args: argparse.Namespace, step: str) -> list[dict[str, Any]]:
    """One AWP quantize-only run with ``step``; one record per linear from its events."""
    collect = Collector(args.layers)
    options = {"step": step, **({"iterations": str(args.iterations)} if args.iterations else {}),
               **({"max_events": "1000"} if args.every_step else {}), **dict(args.set)}
    config = RunConfig(model=args.model, method="awp", sparsity=None, quant=args.quant, options=options,
                       nsamples=args.nsamples, seqlen=args.seqlen, seed=0, eval_data=None, out_dir=args.out)
    start = time.perf_counter()
    device = None
    try:
        device = prune_model(config, on_event=collect, cancel=collect.cancel)["device"]
    except RunCancelled:
        if not args.layers:
            raise
    seconds = time.perf_counter() - start
    protocol = {"calibration": {"source": "wiki", "nsamples": args.nsamples, "seqlen": args.seqlen, "seed": 0},
                "device": device or "cpu", "git": _git(), "run_seconds": round(seconds, 1),
                "options": dict(args.set), **({"layers": args.layers} if args.layers else {})}
    return collect.records(args, step, protocol)


def _record(event: SublayerPruned, trace: list[SolverStep], args: argparse.Namespace, step: str,
            protocol: dict[str, Any]) -> dict[str, Any]:
    info = event.info
    losses = [s.values.get("loss") for s in trace]
    finite = [(value, s.step) for value, s in zip(losses, trace, strict=True) if value is not None]
    best = min(finite, default=(None, None))
    return {
        "benchmark": "awp_diagnose", "model": args.model, "quant": args.quant, "step": step,
        "layer": event.layer, "name": event.name, "shape": event.shape,
        "c_fro": info.get("c_fro"), "c_spec": info.get("c_spec"), "c_ratio": info.get("c_ratio"),
        "diag_ratio": info.get("diag_ratio"),
        "eta": info.get("eta"), "eta_last": info.get("eta_last"), "iterations": info.get("iterations"),
        "stop": info.get("stop"), "residuals": info.get("residuals"),
        "iteration": [s.step for s in trace], "loss": losses,
        "objective": [s.objective for s in trace],
        "codes_changed_trace": [s.values.get("codes_changed") for s in trace],
        "scale_change_trace": [s.values.get("scale_change") for s in trace],
        "best_loss": best[0], "best_iteration": best[1], "returned": info.get("returned"),
        "objective_init": info.get("objective_init"), "objective_final": info.get("objective"),
        "objective_rtn": info.get("objective_rtn"),  # RTN's on the same C, where the run started elsewhere
        "codes_changed": info.get("codes_changed"), "rel_error": event.rel_error, "seconds": round(event.seconds, 3),
        **protocol,
    }


def _option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set takes KEY=VALUE, got {text!r}")
    return key, value


def main() -> None:
    """Diagnose every ``--steps`` variant; one JSON line per linear and variant."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--quant", default="int4:g128")
    parser.add_argument("--steps", nargs="+", default=["paper", "spectral", "backtracking"])
    parser.add_argument("--iterations", type=int, default=0, help="0 = the mode's count (the paper's 10)")
    parser.add_argument("--nsamples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=512)
    parser.add_argument("--out", default="runs")
    parser.add_argument("--json", default=None, help="also append the objects to this JSON-lines file")
    parser.add_argument("--set", action="append", default=[], type=_option, metavar="KEY=VALUE",
                        help="an AWP option, e.g. stop=gradient or grid_update=nearest (repeatable)")
    parser.add_argument("--layers", type=int, default=0, help="diagnose the first N decoder layers only (0 = all)")
    parser.add_argument("--every-step", action="store_true", help="one record entry per iteration (max_events 1000)")
    parser.add_argument("--from-run", nargs="*", default=[], help="read finished runs' events instead of running")
    args = parser.parse_args()
    for run_dir in args.from_run:
        for record in from_run(args, run_dir):
            emit(record, args.json)
    for step in [] if args.from_run else args.steps:
        for record in diagnose(args, step):
            emit(record, args.json)


if __name__ == "__main__":
    main()
