"""One run from config to result: load, calibrate, compress, evaluate, account, record (behind :mod:`toolkit.api`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from toolkit.data.text import eval_windows, load_tokens
from toolkit.engine.block.driver import check_block_budget
from toolkit.engine.device_report import devices_label, gpu_peak_mb, reset_gpu_peak, used_devices
from toolkit.engine.parallel import resolve_devices
from toolkit.engine.prune import check_targets, prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.engine.stream import check_streamable, prune_streaming
from toolkit.engine.stream_eval import streamed_perplexity
from toolkit.errors import MachineFailure, RunCancelled, ToolkitError
from toolkit.evaluation.perplexity import perplexity
from toolkit.evaluation.tasks import TaskSpec, resolve_tasks
from toolkit.evaluation.zeroshot import check_task_tokens
from toolkit.events import EvalPoint, Event, RunFailed, RunFinished, RunStarted, RunWarning
from toolkit.methods import MethodSpec, get_method
from toolkit.methods.base import Scope
from toolkit.methods.quant_grid import QuantState
from toolkit.models.layers import decoder_layers
from toolkit.models.lineage import write_lineage
from toolkit.models.load import LoadedModel, bos_id, load_model
from toolkit.models.quant_checkpoint import StateCollector, check_savable, save_run_checkpoint
from toolkit.models.shrunk import save_shrunk
from toolkit.models.sources import is_shrunk
from toolkit.models.stream import StreamedModel, open_streamed
from toolkit.models.stream_quant import streamed_report
from toolkit.run.accounting import Accounting, account, folder_bytes, linear_shapes
from toolkit.run.bought import DensePrice, bought, dense_price, measures_speed
from toolkit.run.calibration import calibration_of
from toolkit.run.checks import check_context
from toolkit.run.config import CancelToken, RunConfig
from toolkit.run.evals import (
    DenseEvals,
    ProgressEvents,
    generate_texts,
    generations_entry,
    score_tasks,
    zero_shot_entry,
)
from toolkit.run.inputs import check_input_files, check_plan_fits
from toolkit.run.lineage import held_zeros, output_lineage
from toolkit.run.outcome import failure_error, failure_message, kept_message, stopped_message
from toolkit.run.preflight import check_writable_dir
from toolkit.run.provenance import cached_dense_ppl, dense_ppl_key, git_head, peak_rss_mb, store_dense_ppl
from toolkit.run.record import result_record, stored_quant
from toolkit.run.zero_pattern import input_zeros, zero_pattern
from toolkit.runtime.devices import resolve_device
from toolkit.runtime.placement import storage_dtype
from toolkit.runtime.precision import DTYPE_NAMES
from toolkit.spec.allocation import parse_allocation
from toolkit.spec.refine import parse_refine
from toolkit.store.runs import RunWriter

Progress = Callable[[str, int, int], None]


@dataclass
class Prepared:
    """Everything a run needs once the input is checked, the model loaded and the windows cut."""

    config: RunConfig  # as given, with a quantization group given by no one fitted to the model (int4 → int4:g64)
    spec: MethodSpec
    method_cfg: Any
    engine_cfg: EngineConfig
    device: torch.device
    loaded: LoadedModel
    linears: list[str]
    calibration: torch.Tensor
    test: torch.Tensor | None
    protocol: dict[str, Any]
    tasks: tuple[TaskSpec, ...] = ()
    streamed: StreamedModel | None = None  # --stream: layers on meta, read from the shards one at a time
    note: str = ""  # why the group is smaller than asked, recorded as a warning ("" when it is not)


def execute(config: RunConfig, emit: Callable[[Event], None], cancel: CancelToken,
            on_progress: Progress | None) -> dict[str, Any]:
    """Run ``config`` (a :class:`toolkit.api.RunConfig`) and return the result dict.

    Bad input raises :class:`ToolkitError` before the run store is touched; once the run is
    recorded, any failure is recorded too (RunFailed, status failed/cancelled) and re-raised.
    """
    run = prepare(config)
    config = run.config  # a quantization group fitted to the model is what the run records
    try:
        writer = RunWriter(config.out_dir, config.to_dict())
    except OSError as exc:
        raise ToolkitError(f"cannot create the run record in {config.out_dir!r} ({exc.strerror or exc}); "
                           "free disk space or give another --out") from None
    stage = Stage()
    ticks = ProgressEvents(emit, on_progress or (lambda stage, done, total: None), lambda: cancel.cancelled)

    def record(event: Event) -> None:
        writer.event(event)
        emit(event)

    try:
        return _run(config, run, writer, record, ticks, stage)
    except BaseException as exc:
        cancelled = isinstance(exc, RunCancelled | KeyboardInterrupt)
        message = failure_message(exc, run.device)
        if stage.compressed:  # never lose a finished compression to a later step
            kept = " and the model" if config.save_model and stage.name == "evaluation" else ""
            why = "" if cancelled else f" ({message})"
            message = (f"{stage.name} {'cancelled' if cancelled else 'failed'} after the compression finished"
                       f"{why}; {kept_message(writer.path)}{kept} are saved in {writer.path}")
        try:
            record(RunFailed(error=message, cancelled=cancelled))
        except OSError:
            pass  # the disk that failed the run cannot take its last event; status.json still says why
        finally:
            writer.fail(message, cancelled, keep_result=stage.compressed)
        if cancelled:  # the message says what the run record holds (the CLI prints it)
            raise RunCancelled(message if stage.compressed else stopped_message(stage.name, writer.path)) from None
        if stage.compressed or isinstance(exc, torch.OutOfMemoryError):  # a machine's failure exits 1, input 2
            raise failure_error(exc, message) from None
        raise


@dataclass
class Stage:
    """Where a run is: the step under way, and whether the compression (masks, weights) is complete."""

    name: str = "loading"
    compressed: bool = False


def prepare(config: RunConfig) -> Prepared:
    """Check the input, load the model, fit the quantization group to it, cut the windows.

    Devices and task data are checked before ``--out`` is created, ``--out`` before the model loads.
    """
    git_head()  # the code this run imported, before a later commit can rename it
    spec = get_method(config.method)
    method_cfg = spec.make_config(config.options)
    engine_cfg = engine_config(config)
    device = resolve_device(config.device)
    resolve_devices(config.devices, device, config.propagate or spec.propagate, resolve_device)  # before any work
    tasks = resolve_tasks(config.tasks, config.task_data) if config.tasks else ()  # before the model loads
    check_writable_dir(config.out_dir)  # before the model loads: a read-only --out fails now, not after the run
    check_input_files(config)  # an allocation file against the layers the model's files describe
    if config.threads:
        torch.set_num_threads(config.threads)
    streamed = open_streamed(config.model, dtype=config.dtype) if config.stream else None
    loaded = streamed.loaded if streamed is not None else load_model(config.model, dtype=config.dtype)
    check_context(loaded, config.seqlen, config.eval_seqlen if config.eval_data else None)
    if tasks:
        check_task_tokens(loaded.model, loaded.codec, tasks)
    method_cfg = held_zeros(method_cfg, loaded)
    linears = check_targets(loaded.model, spec, config.compression)
    check_plan_fits(loaded.model, config)  # the exact layer sizes, still before the run folder exists
    config, note = config.fit_quant_group({cols for _, cols in linear_shapes(loaded.model).values()})
    if spec.scope is Scope.BLOCK:  # family, unit and budget, before the run folder and any scoring

        check_block_budget(loaded.model, spec, config.compression, method_cfg)
    if config.save_model and config.quant is not None:
        check_savable(loaded.model, config.quant)
    bos = bos_id(loaded)
    calibration, calibrated = calibration_of(config, loaded.codec, bos)  # none read by a data-free run
    test = None
    if config.eval_data:
        test = eval_windows(load_tokens(config.eval_data, "test", loaded.codec, config.encoding), config.eval_seqlen,
                            config.eval_windows, bos)
    protocol = {
        "model_label": loaded.label,
        "threads": torch.get_num_threads(),
        "calibration": calibrated,
        "evaluation": None if test is None else {
            "dataset": config.eval_data, "split": "test", "seqlen": config.eval_seqlen,
            "windows": int(test.shape[0]), "tokens": int(test.numel()), "all_windows": config.eval_windows is None},
    }
    if tasks:
        protocol["zero_shot"] = {"tasks": [t.name for t in tasks], "source": tasks[0].source, "shots": 0,
                                 "limit": config.task_limit, "splits": {t.name: t.split for t in tasks}}
    if streamed is not None:
        check_streamable(spec, engine_cfg)
    return Prepared(config, spec, method_cfg, engine_cfg, device, loaded, linears, calibration, test, protocol, tasks,
                    streamed, note)


def engine_config(config: RunConfig) -> EngineConfig:
    """The engine options of a :class:`toolkit.api.RunConfig`."""
    same = ("propagate", "sequential", "batch_size", "device", "fused", "error_windows", "error", "calibrate",
            "devices", "forward_dtype", "distributed")  # RunConfig's fields of the same names
    return EngineConfig(**{name: getattr(config, name) for name in same},
                        allocation=parse_allocation(config.allocation), refine=parse_refine(config.refine))


def _bought(run: Prepared, price: DensePrice, accounting: Accounting, checkpoint: dict[str, Any] | None,
            ticks: ProgressEvents) -> dict[str, Any]:
    """The run's ``bought`` record; while it times the compressed model the status line says so."""
    tick = ticks.callback("pruned", "speed") if measures_speed(price) else None
    if tick is not None:
        tick(0, 1)
    found = bought(price, run.loaded.model, run.device, accounting, checkpoint, quantized=run.config.quant is not None)
    if tick is not None:
        tick(1, 1)
    return found


def _run(config: RunConfig, run: Prepared, writer: RunWriter, record: Callable[[Event], None],
         ticks: ProgressEvents, stage: Stage) -> dict[str, Any]:
    """RunStarted, dense evaluations, compression, checkpoint and result.json, pruned evaluations, RunFinished.

    The checkpoint and a result.json without perplexity are written before the pruned perplexity, so
    an evaluation that fails (or is cancelled) leaves the compression on disk (``stage.compressed``);
    the pruned zero-shot and generations come last, and their failure becomes a warning and an
    ``error`` in their result entries.
    """
    model = run.loaded.model
    record(RunStarted(run_id=writer.run_id, model=run.loaded.name, method=run.spec.name,
                      sparsity=config.compression.label, options=dataclasses.asdict(run.method_cfg),
                      protocol=run.protocol, num_layers=len(decoder_layers(model)), linears=run.linears,
                      device=str(run.device), compression=config.compression.to_dict()))
    if run.note:
        record(RunWarning(message=run.note))
    stage.name = "dense evaluation"
    dense_ppl, dense_cached = _dense_eval(config, run, record, ticks)
    dense = _dense_extras(config, run, record, ticks)
    price = dense_price(model, run.device, run.calibration[:1], shrinks=run.spec.scope is Scope.BLOCK,  # before pruning
                        progress=ticks.callback("dense", "speed"))
    stage.name = "compression"
    before = linear_shapes(model)
    devices = used_devices(run.device, run.engine_cfg, config.propagate or run.spec.propagate)
    reset_gpu_peak(devices)
    collected = StateCollector() if config.save_model and config.quant is not None and run.streamed is None else None
    zeros = (input_zeros(model, run.loaded.lineage.sparse)  # a pruned input's: its lineage says whether it is one
             if config.quant is not None and run.streamed is None else None)

    def on_mask(layer: int, name: str, keep: torch.Tensor) -> None:
        writer.mask(layer, name, keep.numpy())
        if collected is not None:
            collected.mask(layer, name, keep)

    def on_quant(layer: int, name: str, state: QuantState) -> None:
        writer.quant(layer, name, stored_quant(state))
        if collected is not None:
            collected.quant(layer, name, state)

    if run.streamed is not None:  # read, pruned and written layer by layer: the checkpoint is the result
        result = prune_streaming(run.streamed, writer.path / "model", run.calibration, run.spec, config.compression,
                                 run.method_cfg, cfg=run.engine_cfg, emit=record, cancelled=ticks.cancelled,
                                 on_mask=on_mask, on_quant=on_quant)
    else:
        result = prune_layers(model, run.calibration, run.spec, config.compression, run.method_cfg,
                              cfg=run.engine_cfg, emit=record, cancelled=ticks.cancelled,
                              on_mask=on_mask, on_quant=on_quant, on_structure=writer.structure)
    stage.name, stage.compressed = "saving the checkpoint", True
    peak = gpu_peak_mb(devices, result.remote_gpu_peak_mb)  # the compression's peak (evaluations not counted)
    accounting = account(model, before, result.kept, result.quant)
    checkpoint = _save(config, run, writer, collected)
    if checkpoint is not None:
        accounting = dataclasses.replace(accounting, checkpoint_bytes=int(checkpoint["bytes"]))
    ppl: dict[str, float] = {}  # the summary holds this dict: filled below, after result.json was written
    summary = result_record(config, run, result, accounting, ppl, dense_ppl)
    summary.update(dense_ppl_cached=dense_cached, run_id=writer.run_id, run_dir=str(writer.path), checkpoint=checkpoint,
                   gpu_peak_mb=peak, bought=_bought(run, price, accounting, checkpoint, ticks),
                   devices=devices_label(run.device, run.engine_cfg, config.propagate or run.spec.propagate),
                   zero_pattern=zero_pattern(model, zeros, run.spec.name))
    writer.write_result(summary)
    stage.name = "evaluation"
    dataset = config.eval_data  # run.test exists only when an evaluation dataset was asked for
    if run.test is not None and dataset:
        ppl[dataset] = _eval(run.loaded, run.test, run.device, ticks.callback("pruned", "perplexity"),
                             ticks.cancelled, None if run.streamed is None else
                             open_streamed(writer.path / "model", dtype=config.dtype))
        record(EvalPoint(dataset=dataset, which="pruned", ppl=ppl[dataset],
                         seq_len=config.eval_seqlen, windows=int(run.test.shape[0]), tokens=int(run.test.numel())))
    extras, cancel = _pruned_extras(config, run, record, ticks, dense)
    summary.update(extras)
    if cancel is not None:  # the result keeps what was scored; the status says cancelled, never finished
        writer.write_result(summary)
        raise cancel
    record(RunFinished(achieved_sparsity=accounting.sparsity, prune_seconds=result.seconds, ppl=ppl,
                       dense_ppl=dense_ppl, params_before=accounting.params_before,
                       params_after=accounting.params_after, nonzeros_kept=accounting.nonzeros_kept,
                       bits_per_weight=accounting.bits_per_weight, estimated_bytes=accounting.estimated_bytes,
                       checkpoint_bytes=accounting.checkpoint_bytes, devices=summary["devices"],
                       gpu_peak_mb=math.nan if peak is None else peak, bought=summary["bought"]))
    summary["peak_rss_mb"] = peak_rss_mb()  # evaluation included
    writer.finish(summary)
    return summary


def _save(config: RunConfig, run: Prepared, writer: RunWriter,
          collected: StateCollector | None) -> dict[str, Any] | None:
    """Save the model into the run's ``model/`` folder (with --save-model); returns the checkpoint report.

    Quantized runs are written as compressed-tensors pack-quantized (:mod:`toolkit.models.quant_checkpoint`),
    the others as float weights; the format follows the model's shapes, not the method (per-layer
    shapes get their structure file: :mod:`toolkit.models.shrunk`). A failed write leaves no partial
    folder, and its ``OSError`` becomes a :class:`ToolkitError` saying so.
    """
    if not config.save_model:
        return None
    model, codec, folder = run.loaded.model, run.loaded.codec, writer.path / "model"
    try:
        if run.streamed is not None:  # written by the streamed run, layer by layer
            report = streamed_report(folder, model, sparse=config.sparsity is not None)
        elif collected is not None:
            report = save_run_checkpoint(model, codec, folder, collected)
        else:
            report = _dense_report(save_shrunk(model, codec, folder), model)
        write_lineage(folder, output_lineage(run.loaded.lineage, config, run.spec, writer.run_id))  # for its children
    except OSError as exc:  # a full disk: the save removed its partial folder
        where = f" writing {exc.filename}" if exc.filename else ""
        raise MachineFailure(f"{exc.strerror or exc}{where}; no model folder was kept (the partial one was removed): "
                           "free disk space and rerun with --save-model") from None
    return report


def _dense_report(saved: Path, model: torch.nn.Module) -> dict[str, Any]:
    return {"folder": str(saved), "format": "dense", "bytes": folder_bytes(saved), "per_layer": is_shrunk(saved),
            "dtype": DTYPE_NAMES.get(storage_dtype(model), str(storage_dtype(model)))}


def _eval(loaded: LoadedModel, windows: torch.Tensor, device: torch.device, progress: Callable[[int, int], None],
          cancelled: Callable[[], bool], streamed: StreamedModel | None = None) -> float:
    if streamed is not None:  # --stream: the checkpoint's decoder layers are read from its shards one at a time
        return streamed_perplexity(streamed, windows, device, progress=progress, cancelled=cancelled)
    return perplexity(loaded.model, windows, device, progress=progress, cancelled=cancelled)


def _dense_extras(config: RunConfig, run: Prepared, record: Callable[[Event], None],
                  ticks: ProgressEvents) -> DenseEvals:
    """Zero-shot scores (cached per task) and greedy texts of the dense model, when the run asks for them."""
    dense = DenseEvals()
    if run.tasks:
        scores, cached = score_tasks(run.loaded, run.tasks, config.task_limit, run.device, ticks, "dense")
        for event in scores.scores("dense"):
            record(event)
        dense.zero_shot, dense.cached = scores, tuple(cached)
    if config.generate:
        dense.texts = tuple(generate_texts(run.loaded, run.device, ticks, "dense", record,
                                                   config.generate_tokens))
    return dense


def _pruned_extras(config: RunConfig, run: Prepared, record: Callable[[Event], None], ticks: ProgressEvents,
                   dense: DenseEvals) -> tuple[dict[str, Any], BaseException | None]:
    """``zero_shot`` and ``generations`` entries of the pruned model, and the cancel that stopped them (or None).

    A failure is a warning and an ``error`` in the entries, never lost work; a cancel (the run's
    token, Ctrl-C) marks the entries the same way and is handed back, so the run ends cancelled.
    """
    extras: dict[str, Any] = {}
    scores, texts, error, cancel = None, [], "", None
    try:
        if dense.zero_shot is not None:
            scores = score_tasks(run.loaded, run.tasks, config.task_limit, run.device, ticks, "pruned")[0]
            for event in scores.scores("pruned"):
                record(event)
        if config.generate:
            texts = generate_texts(run.loaded, run.device, ticks, "pruned", record, config.generate_tokens)
    except (Exception, KeyboardInterrupt) as exc:  # the pruning is finished and recorded: keep it, report this
        if isinstance(exc, RunCancelled | KeyboardInterrupt):
            cancel, error = exc, "cancelled before it completed"
        else:
            error = failure_message(exc, run.device)
            record(RunWarning(layer=-1, name="", message=f"evaluation of the pruned model failed: {error}"))
    if dense.zero_shot is not None:
        extras["zero_shot"] = zero_shot_entry(dense, scores, error if scores is None else "")
    if config.generate:
        extras["generations"] = generations_entry(dense.texts, texts, error if len(texts) < len(dense.texts) else "",
                                                  config.generate_tokens)
    return extras, cancel


def _dense_eval(config: RunConfig, run: Prepared, record: Callable[[Event], None],
                ticks: ProgressEvents) -> tuple[dict[str, float], list[str]]:
    """Dense perplexity (with --eval-dense), from the cache when this protocol was measured before.

    Also returns the datasets whose value came from the cache (the result and the views say so).
    """
    test, dataset = run.test, config.eval_data
    if test is None or not dataset or not config.eval_dense:
        return {}, []
    key = dense_ppl_key(run.loaded, test, run.protocol["evaluation"])
    value = cached_dense_ppl(key)
    cached = value is not None
    if value is None:
        value = _eval(run.loaded, test, run.device, ticks.callback("dense", "perplexity"), ticks.cancelled,
                      run.streamed)
        store_dense_ppl(key, value)
    record(EvalPoint(dataset=dataset, which="dense", ppl=value, seq_len=config.eval_seqlen,
                     windows=int(test.shape[0]), tokens=int(test.numel()), cached=cached))
    return {dataset: value}, [dataset] if cached else []
