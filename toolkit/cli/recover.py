"""``python -m toolkit recover RUN``: a recovery fine-tune of a saved run, keeping its masks (docs/recover.md).

``--train lora`` (the default) trains masked-LoRA adapters and merges them; ``--train full`` trains the
decoder-layer linears themselves (their keep-masks kept; ``--rank``/``--alpha`` are refused with it).

:func:`add_recover_command` adds the sub-command to the main parser and :func:`run_recover` runs
it. A user's mistake raises :class:`ToolkitError` before any work (the main entry prints it as one
``error:`` line, exit 2); a cancel (Ctrl-C) raises :class:`RunCancelled`, whose message says that the
parent run is unchanged and the new run is marked cancelled (exit 130).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from typing import Any

from tqdm.auto import tqdm

from toolkit.cli.view import bought_line
from toolkit.events import Event, RecoveryStep, RunStarted, RunWarning
from toolkit.run.recover_config import (
    DEFAULT_ALPHA,
    DEFAULT_FULL_LR,
    DEFAULT_LR,
    DEFAULT_RANK,
    DEFAULT_STEPS,
    TOKENS_PER_STEP,
    TRAINS,
)

SMOOTH = 5  # the loss summary compares the mean of the first and of the last SMOOTH steps


def add_recover_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``recover`` to ``subparsers`` (the main parser's ``add_subparsers()``); returns its parser."""
    p = subparsers.add_parser(
        "recover", help="recovery fine-tune of a saved run with its masks kept (masked LoRA or full); a new, "
                        "linked run",
        description="Fine-tune the saved model of a prune run on the run's calibration text, with masked LoRA "
                    "(ΔW = (s·BA) ⊙ M) or, with --train full, the linear weights themselves (gradients masked), so "
                    "every pruned weight stays exactly 0; save and evaluate it as a new run in the same store.")
    p.add_argument("run", metavar="RUN", help="a run folder of the store with a saved model (prune --save-model)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"AdamW steps (default {DEFAULT_STEPS})")
    p.add_argument("--train", default="lora",  # checked by RecoverConfig: one line, not argparse's usage
                   help=f"{' | '.join(TRAINS)}: masked-LoRA adapters, merged (lora), or the decoder-layer linear "
                        "weights themselves (full) (default lora)")
    p.add_argument("--rank", type=int, default=None, help=f"LoRA rank r (default {DEFAULT_RANK}; lora only)")
    p.add_argument("--alpha", type=float, default=None,
                   help=f"LoRA alpha; the update is scaled by alpha/rank (default {DEFAULT_ALPHA:g}; lora only)")
    p.add_argument("--lr", type=float, default=None,
                   help=f"peak learning rate (default {DEFAULT_LR:g} with lora, {DEFAULT_FULL_LR:g} with full)")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"calibration windows per step (default: max(1, {TOKENS_PER_STEP} // seqlen), "
                        f"about {TOKENS_PER_STEP} tokens a step)")
    p.add_argument("--seqlen", type=int, default=None, help="tokens per training window (default: the run's --seqlen)")
    p.add_argument("--seed", type=int, default=None, help="seed of the windows and the adapters (default: the run's)")
    p.add_argument("--eval-windows", type=int, default=None,
                   help="score only the first N evaluation windows (default: the run's protocol)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--out", default=None, help="run store for the new run (default: the one holding RUN)")
    p.add_argument("--loss", default="lm", choices=("lm", "kd", "kd+lm"),
                   help="lm: the language-model loss; kd: distillation from the run's source model (KL at "
                        "--temperature); kd+lm: their sum (default lm)")
    p.add_argument("--temperature", type=float, default=2.0, help="distillation temperature T (default 2)")
    p.add_argument("--json", default=None, help="also write the result to this file")
    return p


def run_recover(args: argparse.Namespace) -> int:
    """Run the ``recover`` sub-command; returns the exit code (0).

    Raises :class:`ToolkitError` for bad input (before any work) and :class:`RunCancelled` on a cancel.
    """
    from toolkit.api import recover_model
    from toolkit.run.preflight import check_writable_file

    if args.json:
        check_writable_file(args.json)
    view = RecoverProgress()
    try:
        result = recover_model(run=args.run, steps=args.steps, rank=args.rank, alpha=args.alpha, lr=args.lr,
                               batch_size=args.batch_size, seqlen=args.seqlen, seed=args.seed,
                               eval_windows=args.eval_windows, device=args.device, out_dir=args.out,
                               loss=args.loss, temperature=args.temperature, train=args.train,
                               on_event=view.on_event, on_progress=view.on_progress)
    finally:
        view.close()
    for line in summary_lines(result):
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
        print(f"result written to {args.json}")
    return 0


class RecoverProgress:
    """A bar over the training steps (loss and learning rate beside it) and one per evaluation (an adapter, R7)."""

    def __init__(self) -> None:
        self._steps: tqdm | None = None
        self._eval: dict[str, tqdm] = {}
        self._total, self._label = 0, ""

    def on_event(self, event: Event) -> None:
        """Advance the step bar (opened at the first RecoveryStep) and print warnings above it."""
        if isinstance(event, RunStarted):
            self._total, self._label = int(event.options.get("steps", 0)), f"recover {event.sparsity}"
        elif isinstance(event, RecoveryStep):
            if self._steps is None:
                self._steps = tqdm(total=self._total, desc=self._label, unit="step", leave=True)
            self._steps.set_postfix_str(f"loss {event.loss:.4f} lr {event.lr:.2e}", refresh=False)
            self._steps.update(event.step - self._steps.n)
        elif isinstance(event, RunWarning):
            tqdm.write(f"warning: {event.message}")

    def on_progress(self, stage: str, done: int, total: int) -> None:
        """Progress of ``stage``: windows scored ("eval before" / "eval after") or a timing ("… speed")."""
        bar = self._eval.get(stage)
        if bar is None:
            unit = "model" if stage.endswith("speed") else "window"
            bar = self._eval[stage] = tqdm(total=total, desc=stage, unit=unit, leave=False)
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()

    def close(self) -> None:
        """Close every bar."""
        if self._steps is not None:
            self._steps.close()
        for bar in self._eval.values():
            bar.close()


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The closing lines: what was trained, the loss, perplexity before → after, time, the new run's folder."""
    options = result.get("options") or {}
    losses = [float(x) for x in result.get("loss") or []]
    if options.get("train") == "full":
        what = (f"full fine-tune, lr {options.get('lr'):g}, {options.get('trainable', 0):,} weights trained "
                f"directly on {options.get('linears')} linears")
    else:
        what = (f"rank {options.get('rank')}, alpha {options.get('alpha'):g}, lr {options.get('lr'):g}, "
                f"{options.get('trainable', 0):,} adapter weights on {options.get('linears')} linears")
    lines = [f"recovered run {result['parent']} ({result.get('parent_method')} {result['compression'].get('label')}):"
             f" {options.get('steps')} steps × {options.get('batch_size')} windows of {options.get('seqlen')} "
             f"tokens, {what}"]
    if losses:
        first = sum(losses[:SMOOTH]) / len(losses[:SMOOTH])
        last = sum(losses[-SMOOTH:]) / len(losses[-SMOOTH:])
        lines.append(f"loss (mean of the first / last {min(SMOOTH, len(losses))} steps): {first:.4f} → {last:.4f}")
    evaluation = (result.get("protocol") or {}).get("evaluation") or {}
    for name, after in (result.get("ppl") or {}).items():
        before = (result.get("ppl_before") or {}).get(name, math.nan)
        change = f" ({after / before - 1:+.1%})" if before and math.isfinite(before) else ""
        lines.append(f"ppl ({name}, {evaluation.get('windows')} × {evaluation.get('seqlen')} tokens): "
                     f"before {before:.3f} → after {after:.3f}{change}")
    if not result.get("ppl"):
        lines.append("no perplexity: the parent run evaluated nothing (--eval none)")
    zeros, parent = result.get("zeros"), result.get("parent_achieved_sparsity")
    lines.append(zeros_line(zeros, parent if isinstance(parent, int | float) else None) if zeros else
                 "masks: not measured (the recovery ended before the merge)")
    if result.get("bought"):
        lines.append(bought_line(result["bought"]))
    seconds = result.get("seconds") or {}
    cells = "  ".join(f"{name.replace('_', ' ')} {value:.1f} s" for name, value in seconds.items())
    lines.append(f"seconds: {cells}  on {result.get('device')}")
    lines.append(f"run record: {result['run_dir']} (parent {result['parent']})")
    return lines


def zeros_line(zeros: Mapping[str, Any], parent_sparsity: float | None) -> str:
    """The summary's line on the zeros, from result.json ``zeros`` (:func:`toolkit.run.recover_zeros.measure_zeros`).

    Every number is counted on the recovered weights; a keep-mask that kept pruned weights (they
    trained) makes the line say so, with the linears where it happened.
    """
    before, still, lost = zeros["parent_zeros"], zeros["still_zero"], zeros["parent_zeros"] - zeros["still_zero"]
    parent = f", the parent's {parent_sparsity:.4f}" if parent_sparsity is not None else ""
    sparsity = f"achieved sparsity {zeros['achieved_sparsity']:.4f} (counted on the recovered weights{parent})"
    if not lost and not zeros["dropped_nonzero"]:
        return f"masks kept: all {still:,} weights that were exactly 0 in the parent's model are still 0; {sparsity}"
    rows = zeros.get("trained") or []
    where = "; ".join(f"layer {r['layer']} {r['name']}: {r['nonzero_after']:,}" for r in rows[:3])
    return (f"masks NOT kept: {lost:,} of the {before:,} weights that were exactly 0 in the parent's model are "
            f"nonzero after recovery ({where}{'; …' if len(rows) > 3 else ''}): the stored keep-masks keep them, so "
            f"they trained; {sparsity}")
