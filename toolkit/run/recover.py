"""Recovery fine-tuning of a saved sparse or shrunk run, keeping its masks; a new run linked to its parent.

What :func:`recover` does with the saved model of run ``RUN`` (``RUN/model``):

1. Checks, before any work: the run folder, its status, a float (not quantized) run, a saved model,
   the settings (:mod:`toolkit.run.recover_config`). Then it loads the model and checks the LoRA rank
   (``--train lora``) against every linear and the keep-masks against the weights.
2. Keep-masks: the parent's stored masks (``RUN/masks``, the truth); a linear without a stored mask
   (a block-scope run stores none) keeps its nonzero pattern.
3. Data: ``steps × batch_size`` windows of the parent's calibration length, drawn from its
   calibration text with its seed (:func:`toolkit.data.text.calibration_windows`). The first
   ``nsamples`` of them are the parent's own calibration windows.
4. Perplexity before (the parent's saved model) on the parent's evaluation protocol; the training
   (:mod:`toolkit.run.recover_train`: masked LoRA then the merge, or the linears trained directly with
   their masks kept, ``--train full``); the zeros and the achieved sparsity counted on the trained
   weights (:mod:`toolkit.run.recover_zeros`: every weight a keep-mask drops must be 0; zeros a
   keep-mask keeps train and are reported); the checkpoint, in the parent's format; perplexity after.
5. A new run in the parent's store. Its ``config.json`` has method ``recover``, ``parent`` (the
   parent's run id) and the settings. Its ``masks/`` hold the keep-masks the recovery kept, and
   ``model/`` the merged checkpoint (written as ``model.partial`` and renamed at the end).
   ``result.json`` adds ``ppl_before``, ``ppl`` (after), ``loss``/``lr`` per step, ``seconds``
   per phase, ``zeros`` (measured) and ``parent_achieved_sparsity`` beside the measured
   ``achieved_sparsity``, and ``bought`` as a prune run has it (:mod:`toolkit.run.recover_bought`:
   bytes measured on the saved checkpoint, decode speed timed where the model is shrunk). Its events:
   ``RunStarted`` (options: the settings), a ``RunWarning`` when a
   keep-mask keeps weights that are 0, ``EvalPoint`` "pruned" (before), one ``RecoveryStep`` per
   step, ``EvalPoint`` "recovered" (after), ``RunFinished``.

The parent's folder is only read. A failure or cancel marks the new run failed/cancelled
(``RunFailed``). It removes a half-written ``model.partial``. A checkpoint saved before a later
failure or cancel (in the evaluation after) stays, with its result.json, as in a prune run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.data.text import CalibSpec, calibration_windows, eval_windows, load_tokens
from toolkit.engine.finetune import TrainResult
from toolkit.engine.lora import check_masks, check_rank, linear_names
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.evaluation.perplexity import perplexity
from toolkit.events import EvalPoint, Event, RunFailed, RunFinished, RunStarted, RunWarning
from toolkit.models.layers import decoder_layers, get_weight
from toolkit.models.lineage import run_output, write_lineage
from toolkit.models.load import bos_id, load_model
from toolkit.models.shrunk import save_shrunk
from toolkit.run.accounting import folder_bytes
from toolkit.run.checks import check_context
from toolkit.run.config import CancelToken
from toolkit.run.preflight import check_writable_dir
from toolkit.run.provenance import peak_rss_mb, versions
from toolkit.run.recover_before import recorded_before
from toolkit.run.recover_bought import recovery_bought
from toolkit.run.recover_config import METHOD, ParentRun, RecoverConfig, read_parent, run_config
from toolkit.run.recover_teacher import load_teacher
from toolkit.run.recover_train import Prepared, fine_tune, settings
from toolkit.run.recover_zeros import kept_zeros_warning, measure_zeros, parent_zeros
from toolkit.runtime.devices import resolve_device
from toolkit.store.runs import SCHEMA, RunWriter

Progress = Callable[[str, int, int], None]


@dataclasses.dataclass
class Outcome:
    """What a recovery produced so far (the result dict reads it; a late failure keeps it)."""

    ppl_before: dict[str, float] = dataclasses.field(default_factory=dict)
    ppl: dict[str, float] = dataclasses.field(default_factory=dict)
    trained: TrainResult | None = None
    checkpoint: dict[str, Any] | None = None
    zeros: dict[str, Any] | None = None  # measured on the merged weights (toolkit.run.recover_zeros)
    bought: dict[str, Any] | None = None  # what the recovered model costs (toolkit.run.recover_bought)


def recover(config: RecoverConfig, emit: Callable[[Event], None], cancel: CancelToken,
            on_progress: Progress | None = None) -> dict[str, Any]:
    """Run one recovery (module docstring) and return its result dict (the new run's result.json).

    Bad input raises :class:`ToolkitError` before the run store is touched. Later failures are
    recorded in the new run and re-raised; a cancel raises :class:`RunCancelled` whose message says
    what was kept.
    """
    parent = read_parent(config)
    check_writable_dir(config.store)
    run = prepare(config, parent)
    try:
        writer = RunWriter(config.store, run_config(config, parent, str(run.device)))
    except OSError as exc:
        raise ToolkitError(f"cannot create the run record in {str(config.store)!r} ({exc.strerror or exc}); "
                           "free disk space or give another --out") from None
    progress = on_progress or (lambda stage, done, total: None)

    def record(event: Event) -> None:
        writer.event(event)
        emit(event)

    outcome = Outcome()
    try:
        return _run(run, writer, record, _Ticks(progress, cancel), outcome)
    except BaseException as exc:
        cancelled = isinstance(exc, RunCancelled | KeyboardInterrupt)
        _remove_partial(writer.path)
        kept = outcome.checkpoint is not None
        what = "cancelled" if cancelled else f"failed ({_message(exc)})"
        message = (f"recovery {what}; run {parent.run_id} and its model are unchanged" +
                   (f"; the recovered model is saved in {writer.path / 'model'}" if kept else ""))
        with contextlib.suppress(OSError):
            record(RunFailed(error=message, cancelled=cancelled))
        if kept:
            with contextlib.suppress(OSError):  # the disk that failed the run may refuse this too; status says why
                writer.write_result(_result(run, writer, outcome))
        writer.fail(message, cancelled, keep_result=kept)
        if cancelled:
            raise RunCancelled(message) from None
        if isinstance(exc, ToolkitError):
            raise ToolkitError(message) from None
        raise


class _Ticks:
    """The CLI's progress adapter and the cancel check, as the perplexity loop takes them."""

    def __init__(self, progress: Progress, cancel: CancelToken) -> None:
        self.progress, self.cancel = progress, cancel

    def cancelled(self) -> bool:
        return self.cancel.cancelled

    def stage(self, name: str) -> Callable[[int, int], None]:
        return lambda done, total: self.progress(name, done, total)


def prepare(config: RecoverConfig, parent: ParentRun) -> Prepared:
    """Load the parent's model, check rank (LoRA) and masks, cut the windows; raises :class:`ToolkitError` first."""
    start = time.perf_counter()
    device = resolve_device(config.device)
    loaded = load_model(str(parent.model_dir))
    check_context(loaded, parent.seqlen, parent.eval_seqlen if parent.eval_data else None)
    if config.train == "lora":
        check_rank(loaded.model, config.lora[0])
    masks = keep_masks(loaded.model, parent)
    check_masks(loaded.model, masks, parent.run_id)
    zeros = parent_zeros(linear_names(loaded.model), masks)
    bos = bos_id(loaded)
    tokens = load_tokens(parent.calib, "train", loaded.codec, parent.encoding)
    count = config.steps * parent.batch_size
    if count * (parent.seqlen - (bos is not None)) > len(tokens):
        raise ToolkitError(f"the calibration text {parent.calib!r} has {len(tokens)} tokens, fewer than steps × "
                           f"batch size × seqlen = {config.steps} × {parent.batch_size} × {parent.seqlen}; lower "
                           "--steps, --batch-size or --seqlen")
    windows = calibration_windows(tokens, CalibSpec(parent.calib, count, parent.seqlen, parent.seed), bos)
    test = None
    if parent.eval_data:
        test = eval_windows(load_tokens(parent.eval_data, "test", loaded.codec, parent.encoding),
                            parent.eval_seqlen, parent.eval_windows, bos)
    return Prepared(config, parent, loaded, device, masks, windows, test,
                    {"load": time.perf_counter() - start}, zeros, load_teacher(config, parent, loaded))


def keep_masks(model: nn.Module, parent: ParentRun) -> dict[nn.Module, Tensor]:
    """Every decoder-layer linear's keep-mask: the parent's stored one, else the weight's nonzero pattern.

    Raises :class:`ToolkitError` when the parent stored masks for linears the saved model lacks.
    """
    record = parent.record
    stored = set(record.mask_names())
    linears = linear_names(model)
    unknown = stored - {(index, name) for index, name, _ in linears.values()}
    if unknown:
        layer, name = sorted(unknown)[0]
        raise ToolkitError(f"run {record.run_id} stored a keep-mask for layer {layer} {name}, which its saved model "
                           "does not have; the run folder was changed, pick another run")
    return {module: torch.from_numpy(record.load_mask(index, name)) if (index, name) in stored
            else get_weight(module) != 0
            for module, (index, name, _) in linears.items()}


def _run(run: Prepared, writer: RunWriter, record: Callable[[Event], None], ticks: _Ticks,
         outcome: Outcome) -> dict[str, Any]:
    """RunStarted, perplexity before, training (and merge), checkpoint, perplexity after, RunFinished."""
    parent, model = run.parent, run.loaded.model
    linears = linear_names(model)
    for module, (index, name, _) in linears.items():
        writer.mask(index, name, run.masks[module].numpy())
    record(RunStarted(run_id=writer.run_id, model=str(parent.config.get("model", "?")), method=METHOD,
                      sparsity=parent.record.label, options=settings(run), protocol=_protocol(run),
                      num_layers=len(decoder_layers(model)),
                      linears=list(dict.fromkeys(name for _, name, _ in linears.values())), device=str(run.device),
                      compression=parent.record.compression))
    if warning := kept_zeros_warning(run.zeros):
        record(RunWarning(message=warning))
    outcome.ppl_before = _evaluate(run, "pruned", record, ticks)
    start = time.perf_counter()
    outcome.trained = fine_tune(run, record, ticks.cancelled)
    run.seconds["train"] = time.perf_counter() - start
    start = time.perf_counter()
    outcome.zeros = measure_zeros(linears, run.masks, run.zeros, _params_before(run))
    if outcome.zeros["dropped_nonzero"]:  # an invariant of the masked update (engine/lora.py, engine/full_ft.py)
        raise AssertionError(f"{outcome.zeros['dropped_nonzero']} pruned weights are nonzero after the training")
    outcome.checkpoint = _save(run, writer.path)
    run.seconds["save"] = time.perf_counter() - start
    outcome.bought = recovery_bought(run, _result(run, writer, outcome)["accounting"], outcome.checkpoint,
                                     ticks.stage, lambda line: record(RunWarning(message=line)))
    writer.write_result(_result(run, writer, outcome))
    outcome.ppl = _evaluate(run, "recovered", record, ticks)
    result = _result(run, writer, outcome)
    acct = result["accounting"]
    record(RunFinished(achieved_sparsity=result["achieved_sparsity"], prune_seconds=result["prune_seconds"],
                       ppl=outcome.ppl, dense_ppl=result["dense_ppl"], params_before=acct.get("params_before"),
                       params_after=acct.get("params_after"), nonzeros_kept=acct.get("nonzeros_kept"),
                       bits_per_weight=float(acct.get("bits_per_weight") or float("nan")),
                       estimated_bytes=acct.get("estimated_bytes"), checkpoint_bytes=acct.get("checkpoint_bytes"),
                       devices=str(run.device), bought=outcome.bought))
    result["peak_rss_mb"] = peak_rss_mb()
    writer.finish(result)
    return result


def _evaluate(run: Prepared, which: str, record: Callable[[Event], None], ticks: _Ticks) -> dict[str, float]:
    """Perplexity on the parent's protocol (``which``: "pruned" before, "recovered" after); {} without one."""
    dataset, test = run.parent.eval_data, run.test
    if test is None or not dataset:
        return {}
    start = time.perf_counter()
    stage = "eval before" if which == "pruned" else "eval after"
    known = recorded_before(run.parent.record.result or {}, dataset, run.parent.eval_seqlen, int(test.shape[0]))
    key = stage.replace(" ", "_")
    if which == "pruned" and known is not None:  # the parent's own figure on these windows (recover_before.py)
        value, key = known, "eval_before_from_parent"
    else:
        value = perplexity(run.loaded.model, test, run.device, progress=ticks.stage(stage), cancelled=ticks.cancelled)
    run.seconds[key] = time.perf_counter() - start
    record(EvalPoint(dataset=dataset, which=which, ppl=value, seq_len=run.parent.eval_seqlen,
                     windows=int(test.shape[0]), tokens=int(test.numel())))
    return {dataset: value}


def _save(run: Prepared, folder: Path) -> dict[str, Any]:
    """The merged model into ``folder/model``, through ``model.partial`` renamed at the end.

    :func:`toolkit.models.shrunk.save_shrunk` writes a plain checkpoint whenever the model's config
    describes it (every sparse run) and the per-layer format for a shrunk one, as the parent's was.
    """
    partial, final = folder / "model.partial", folder / "model"
    model = run.loaded.model
    save_shrunk(model, run.loaded.codec, partial)
    write_lineage(partial, run_output(run.loaded.lineage, chose_zeros=False, detail=f"recovered ({folder.name})"))
    partial.rename(final)
    dtype = next(model.parameters()).dtype
    return {"folder": str(final), "format": "dense", "bytes": folder_bytes(final),
            "dtype": str(dtype).removeprefix("torch.")}


def _remove_partial(folder: Path) -> None:
    """Remove a half-written checkpoint (``model.partial`` and save_checkpoint's own ``.partial``)."""
    for name in ("model.partial", "model.partial.partial"):
        shutil.rmtree(folder / name, ignore_errors=True)


def _protocol(run: Prepared) -> dict[str, Any]:
    parent, windows, test = run.parent, run.train_windows, run.test
    stored = len(parent.record.mask_names())
    return {
        "model_label": f"{parent.config.get('model', '?')} after {parent.config.get('method', '?')} "
                       f"{parent.record.label} (run {parent.run_id})",
        "parent": {"run_id": parent.run_id, "method": parent.config.get("method"), "label": parent.record.label,
                   "model_dir": str(parent.model_dir), "masks": "stored" if stored else "nonzero pattern"},
        "calibration": {"source": parent.calib, "split": "train", "nsamples": int(windows.shape[0]),
                        "seqlen": parent.seqlen, "seed": parent.seed, "tokens": int(windows.numel())},
        "evaluation": None if test is None else {
            "dataset": parent.eval_data, "split": "test", "seqlen": parent.eval_seqlen,
            "windows": int(test.shape[0]), "tokens": int(test.numel()), "all_windows": parent.eval_windows is None},
        "threads": torch.get_num_threads(),
    }


def _result(run: Prepared, writer: RunWriter, outcome: Outcome) -> dict[str, Any]:
    """The new run's result.json: the parent's compression and accounting, perplexities, the loss curve, times."""
    parent = run.parent
    parent_result = parent.record.result or {}
    masks = run.masks
    kept, total = sum(int(m.sum()) for m in masks.values()), sum(m.numel() for m in masks.values())
    accounting = dict(parent_result.get("accounting") or {"params_before": total, "params_after": total,
                                                           "nonzeros_kept": kept})
    zeros = outcome.zeros
    if zeros is not None:  # what the recovered weights keep, counted on them (the parent's figure is kept beside)
        accounting["nonzeros_kept"] = zeros["nonzeros"]
    if outcome.checkpoint is not None:
        accounting["checkpoint_bytes"] = outcome.checkpoint["bytes"]
    trained = outcome.trained or TrainResult()
    seconds = {**run.seconds}
    return {
        "schema": SCHEMA, "model": parent.config.get("model", "?"), "method": METHOD, "parent": parent.run_id,
        "parent_method": parent.config.get("method"), "compression": parent.record.compression,
        "sparsity": parent.config.get("sparsity"), "quant": None, "options": settings(run),
        "achieved_sparsity": float(zeros["achieved_sparsity"] if zeros is not None else 1.0 - kept / max(total, 1)),
        "parent_achieved_sparsity": parent_result.get("achieved_sparsity"), "zeros": zeros,
        "accounting": accounting, "ppl_before": outcome.ppl_before, "ppl": outcome.ppl,
        "dense_ppl": dict(parent_result.get("dense_ppl") or {}), "prune_seconds": trained.seconds,
        "seconds": seconds, "bought": outcome.bought, "loss": trained.losses, "lr": trained.lrs,
        "checkpoint": outcome.checkpoint,
        "protocol": _protocol(run), "device": str(run.device), "devices": str(run.device), "layers": [],
        "run_id": writer.run_id, "run_dir": str(writer.path), "masks": writer.masks_written, "versions": versions(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _params_before(run: Prepared) -> int:
    """The parent's linear weights before its compression (its accounting), else the masks' total."""
    accounting = (run.parent.record.result or {}).get("accounting") or {}
    value = accounting.get("params_before")
    return int(value) if isinstance(value, int) else sum(keep.numel() for keep in run.masks.values())


def _message(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if isinstance(exc, ToolkitError) else f"{type(exc).__name__}: {text}"
