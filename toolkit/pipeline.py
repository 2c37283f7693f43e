"""One run from config to result: load, calibrate, compress, evaluate, account, record (behind :mod:`toolkit.api`)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from toolkit.accounting import Accounting, account, folder_bytes, linear_shapes
from toolkit.checks import check_context
from toolkit.data import CalibSpec, calibration_windows, eval_windows, load_tokens
from toolkit.device_report import devices_label, gpu_peak_mb, reset_gpu_peak, used_devices
from toolkit.engine import EngineConfig, EngineResult, check_targets, prune_layers, resolve_device
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.evaluate import perplexity
from toolkit.events import EvalPoint, Event, RunFailed, RunFinished, RunStarted
from toolkit.export import save_checkpoint
from toolkit.methods import MethodSpec, get_method
from toolkit.methods.base import Scope
from toolkit.models import LoadedModel, decoder_layers, load_model
from toolkit.provenance import cached_dense_ppl, dense_ppl_key, peak_rss_mb, store_dense_ppl, versions
from toolkit.quant import QuantState
from toolkit.runs import SCHEMA, RunWriter, StoredQuant
from toolkit.shrunk import save_shrunk

Progress = Callable[[str, int, int], None]
BOS_FAMILIES = ("gemma", "gemma2", "gemma3", "gemma3_text")


def bos_id(loaded: LoadedModel) -> int | None:
    """BOS id for models that need it at the start of every window (Gemma), else None."""
    return loaded.codec.bos_id if getattr(loaded.model.config, "model_type", "") in BOS_FAMILIES else None


@dataclass
class Prepared:
    """Everything a run needs once the input is checked, the model loaded and the windows cut."""

    spec: MethodSpec
    method_cfg: Any
    engine_cfg: EngineConfig
    device: torch.device
    loaded: LoadedModel
    linears: list[str]
    calibration: torch.Tensor
    test: torch.Tensor | None
    protocol: dict[str, Any]


def execute(config: Any, emit: Callable[[Event], None], cancel: Any, on_progress: Progress | None) -> dict[str, Any]:
    """Run ``config`` (a :class:`toolkit.api.RunConfig`) and return the result dict.

    Bad input raises :class:`ToolkitError` before the run store is touched; once the run is
    recorded, any failure is recorded too (RunFailed, status failed/cancelled) and re-raised.
    """
    progress = on_progress or (lambda stage, done, total: None)
    run = prepare(config)
    writer = RunWriter(config.out_dir, config.to_dict())

    def record(event: Event) -> None:
        writer.event(event)
        emit(event)

    try:
        return _run(config, run, writer, record, progress, cancel)
    except BaseException as exc:
        message = _failure_message(exc, run.device)
        try:
            record(RunFailed(error=message, cancelled=isinstance(exc, RunCancelled | KeyboardInterrupt)))
        finally:
            writer.fail(message, isinstance(exc, RunCancelled | KeyboardInterrupt))
        if isinstance(exc, torch.OutOfMemoryError):
            raise ToolkitError(message) from None
        raise


def prepare(config: Any) -> Prepared:
    """Check the input, load the model, cut the calibration and evaluation windows."""
    spec = get_method(config.method)
    method_cfg = spec.make_config(config.options)
    engine_cfg = engine_config(config)
    device = resolve_device(config.device)
    loaded = load_model(config.model)
    check_context(loaded, config.seqlen, config.eval_seqlen if config.eval_data else None)
    linears = check_targets(loaded.model, spec, config.compression)
    bos = bos_id(loaded)
    calib = CalibSpec(config.calib, config.nsamples, config.seqlen, config.seed)
    calibration = calibration_windows(load_tokens(config.calib, "train", loaded.codec), calib, bos)
    test = None
    if config.eval_data:
        test = eval_windows(load_tokens(config.eval_data, "test", loaded.codec), config.eval_seqlen,
                            config.eval_windows, bos)
    protocol = {
        "model_label": loaded.label,
        "calibration": {"source": calib.source, "split": "train", "nsamples": calib.num_samples,
                        "seqlen": calib.seq_len, "seed": calib.seed, "tokens": int(calibration.numel())},
        "evaluation": None if test is None else {
            "dataset": config.eval_data, "split": "test", "seqlen": config.eval_seqlen,
            "windows": int(test.shape[0]), "tokens": int(test.numel()), "all_windows": config.eval_windows is None},
    }
    return Prepared(spec, method_cfg, engine_cfg, device, loaded, linears, calibration, test, protocol)


def engine_config(config: Any) -> EngineConfig:
    """The engine options of a :class:`toolkit.api.RunConfig`."""
    return EngineConfig(propagate=config.propagate, sequential=config.sequential, batch_size=config.batch_size,
                        device=config.device, fused=config.fused, error_windows=config.error_windows,
                        devices=config.devices, forward_dtype=config.forward_dtype, distributed=config.distributed)


def _run(config: Any, run: Prepared, writer: RunWriter, record: Callable[[Event], None], progress: Progress,
         cancel: Any) -> dict[str, Any]:
    """RunStarted, dense evaluation, compression, pruned evaluation, checkpoint, RunFinished."""
    model = run.loaded.model
    record(RunStarted(run_id=writer.run_id, model=run.loaded.name, method=run.spec.name,
                      sparsity=config.compression.label, options=dataclasses.asdict(run.method_cfg),
                      protocol=run.protocol, num_layers=len(decoder_layers(model)), linears=run.linears,
                      device=str(run.device), compression=config.compression.to_dict()))
    dense_ppl = _dense_eval(config, run, record, progress, cancel)
    before = linear_shapes(model)
    devices = used_devices(run.device, run.engine_cfg, config.propagate or run.spec.propagate)
    reset_gpu_peak(devices)
    result = prune_layers(model, run.calibration, run.spec, config.compression, run.method_cfg,
                          cfg=run.engine_cfg, emit=record, cancelled=lambda: cancel.cancelled,
                          on_mask=lambda layer, name, keep: writer.mask(layer, name, keep.numpy()),
                          on_quant=lambda layer, name, state: writer.quant(layer, name, stored_quant(state)),
                          on_structure=writer.structure)
    ppl: dict[str, float] = {}
    if run.test is not None:
        ppl[config.eval_data] = _eval(run.loaded, run.test, run.device, "pruned", progress, cancel)
        record(EvalPoint(dataset=config.eval_data, which="pruned", ppl=ppl[config.eval_data],
                         seq_len=config.eval_seqlen, windows=int(run.test.shape[0]), tokens=int(run.test.numel())))
    accounting = account(model, before, result.kept, result.quant)
    if config.save_model:
        save = save_shrunk if run.spec.scope is Scope.BLOCK else save_checkpoint  # per-layer shapes need their file
        saved = save(model, run.loaded.codec, writer.path / "model")
        accounting = dataclasses.replace(accounting, checkpoint_bytes=folder_bytes(saved))
    summary = _result(config, run, result, accounting, ppl, dense_ppl)
    peak = gpu_peak_mb(devices, result.remote_gpu_peak_mb)
    summary.update(run_id=writer.run_id, run_dir=str(writer.path), gpu_peak_mb=peak,
                   devices=devices_label(run.device, run.engine_cfg, config.propagate or run.spec.propagate))
    record(RunFinished(achieved_sparsity=accounting.sparsity, prune_seconds=result.seconds, ppl=ppl,
                       dense_ppl=dense_ppl, params_before=accounting.params_before,
                       params_after=accounting.params_after, nonzeros_kept=accounting.nonzeros_kept,
                       bits_per_weight=accounting.bits_per_weight, estimated_bytes=accounting.estimated_bytes,
                       checkpoint_bytes=accounting.checkpoint_bytes, devices=summary["devices"],
                       gpu_peak_mb=math.nan if peak is None else peak))
    writer.finish(summary)
    return summary


def stored_quant(state: QuantState) -> StoredQuant:
    """A quantization state as the run store keeps it (numpy, on the CPU)."""
    return StoredQuant(codes=state.codes.cpu().numpy(), scales=state.scales.float().cpu().numpy(),
                       zeros=state.zeros.float().cpu().numpy(), bits=state.spec.bits,
                       group_size=state.spec.group_size, symmetric=state.spec.symmetric)


def _failure_message(exc: BaseException, device: torch.device) -> str:
    if isinstance(exc, torch.OutOfMemoryError):
        return (f"out of memory on {device}: lower --nsamples, --seqlen or --set batch size, "
                "or use --device cpu")
    if isinstance(exc, RunCancelled | KeyboardInterrupt):
        return "cancelled"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if isinstance(exc, ToolkitError) else f"{type(exc).__name__}: {text}"


def _eval(loaded: LoadedModel, windows: torch.Tensor, device: torch.device, which: str, progress: Progress,
          cancel: Any) -> float:
    return perplexity(loaded.model, windows, device, progress=lambda d, t: progress(f"eval {which}", d, t),
                      cancelled=lambda: cancel.cancelled)


def _dense_eval(config: Any, run: Prepared, record: Callable[[Event], None], progress: Progress,
                cancel: Any) -> dict[str, float]:
    """Dense perplexity (with --eval-dense), from the cache when this protocol was measured before."""
    test = run.test
    if test is None or not config.eval_dense:
        return {}
    key = dense_ppl_key(run.loaded, test, run.protocol["evaluation"])
    value = cached_dense_ppl(key)
    if value is None:
        value = _eval(run.loaded, test, run.device, "dense", progress, cancel)
        store_dense_ppl(key, value)
    record(EvalPoint(dataset=config.eval_data, which="dense", ppl=value, seq_len=config.eval_seqlen,
                     windows=int(test.shape[0]), tokens=int(test.numel())))
    return {config.eval_data: value}


LAYER_FIELDS = ("layer", "name", "shape", "sparsity", "rel_error", "rel_error_dense", "seconds", "bits",
                "quant_rel_error", "params_before", "params_after")


def _result(config: Any, run: Prepared, result: EngineResult, accounting: Accounting, ppl: dict,
            dense_ppl: dict) -> dict[str, Any]:
    """The result dict (result.json, the CLI's --json): what was asked, what happened, provenance."""
    engine = dataclasses.asdict(run.engine_cfg)
    engine.update(propagate=config.propagate or run.spec.propagate,
                  sequential=config.sequential or run.spec.sequential)
    return {
        "schema": SCHEMA,
        "model": config.model,
        "method": run.spec.name,
        "options": dataclasses.asdict(run.method_cfg),
        "sparsity": None if config.sparsity is None else str(config.sparsity),
        "quant": None if config.quant is None else config.quant.label,
        "unit": None if config.unit is None else config.unit.value,
        "compression": config.compression.to_dict(),
        "achieved_sparsity": accounting.sparsity,
        "accounting": accounting.to_dict(),
        "ppl": ppl,
        "dense_ppl": dense_ppl,
        "prune_seconds": result.seconds,
        "peak_rss_mb": peak_rss_mb(),
        "device": str(run.device),
        "protocol": run.protocol,
        "engine": engine,
        "layers": [{key: record.get(key) for key in LAYER_FIELDS} for record in result.layers],
        "versions": versions(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
