"""One run from config to result: load, calibrate, prune, evaluate, record (behind :mod:`toolkit.api`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from toolkit.checks import check_context
from toolkit.data import CalibSpec, calibration_windows, eval_windows, load_tokens
from toolkit.engine import EngineConfig, check_targets, prune_layers, resolve_device
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.evaluate import perplexity
from toolkit.events import Event, EvalPoint, RunFailed, RunFinished, RunStarted
from toolkit.export import save_checkpoint
from toolkit.methods import get_method
from toolkit.models import LoadedModel, decoder_layers, load_model
from toolkit.provenance import cached_dense_ppl, dense_ppl_key, peak_rss_mb, store_dense_ppl, versions
from toolkit.runs import RunWriter
from toolkit.sparsity import parse_sparsity

Progress = Callable[[str, int, int], None]
BOS_FAMILIES = ("gemma", "gemma2", "gemma3", "gemma3_text")


def bos_id(loaded: LoadedModel) -> int | None:
    """BOS id for models that need it at the start of every window (Gemma), else None."""
    return loaded.codec.bos_id if getattr(loaded.model.config, "model_type", "") in BOS_FAMILIES else None


def execute(config: Any, emit: Callable[[Event], None], cancel: Any, on_progress: Progress | None) -> dict[str, Any]:
    """Run ``config`` (a :class:`toolkit.api.RunConfig`) and return the result dict."""
    progress = on_progress or (lambda stage, done, total: None)
    spec = get_method(config.method)
    target = parse_sparsity(config.sparsity)
    method_cfg = spec.make_config(config.options)
    engine_cfg = EngineConfig(propagate=config.propagate, sequential=config.sequential,
                              batch_size=config.batch_size, device=config.device, fused=config.fused,
                              error_windows=config.error_windows, devices=config.devices)
    device = resolve_device(config.device)
    loaded = load_model(config.model)
    check_context(loaded, config.seqlen, config.eval_seqlen if config.eval_data else None)
    linears = check_targets(loaded.model, spec, target)
    bos = bos_id(loaded)
    calib = CalibSpec(config.calib, config.nsamples, config.seqlen, config.seed)
    calib_windows = calibration_windows(load_tokens(config.calib, "train", loaded.codec), calib, bos)
    test = None
    if config.eval_data:
        test = eval_windows(load_tokens(config.eval_data, "test", loaded.codec), config.eval_seqlen,
                            config.eval_windows, bos)
    protocol = {
        "model_label": loaded.label,
        "calibration": {"source": calib.source, "split": "train", "nsamples": calib.num_samples,
                        "seqlen": calib.seq_len, "seed": calib.seed, "tokens": int(calib_windows.numel())},
        "evaluation": None if test is None else {
            "dataset": config.eval_data, "split": "test", "seqlen": config.eval_seqlen,
            "windows": int(test.shape[0]), "tokens": int(test.numel()), "all_windows": config.eval_windows is None},
    }
    writer = RunWriter(config.out_dir, config.to_dict())

    def record(event: Event) -> None:
        writer.event(event)
        emit(event)

    try:
        record(RunStarted(run_id=writer.run_id, model=loaded.name, method=spec.name, sparsity=str(config.sparsity),
                          options=dataclasses.asdict(method_cfg), protocol=protocol,
                          num_layers=len(decoder_layers(loaded.model)), linears=linears, device=str(device)))
        dense_ppl = _dense_eval(config, loaded, test, device, protocol, record, progress, cancel)
        result = prune_layers(loaded.model, calib_windows, spec, target, method_cfg, cfg=engine_cfg, emit=record,
                              cancelled=lambda: cancel.cancelled,
                              on_mask=lambda layer, name, keep: writer.mask(layer, name, keep.numpy()))
        ppl: dict[str, float] = {}
        if test is not None:
            ppl[config.eval_data] = _eval(loaded, test, device, "pruned", progress, cancel)
            record(EvalPoint(dataset=config.eval_data, which="pruned", ppl=ppl[config.eval_data],
                             seq_len=config.eval_seqlen, windows=int(test.shape[0]), tokens=int(test.numel())))
        if config.save_model:
            save_checkpoint(loaded.model, loaded.codec, writer.path / "model")
        summary = _result(config, spec.name, dataclasses.asdict(method_cfg), result, ppl, dense_ppl, protocol, device)
        engine = dataclasses.asdict(engine_cfg)
        engine.update(propagate=config.propagate or spec.propagate, sequential=config.sequential or spec.sequential)
        summary.update(run_id=writer.run_id, run_dir=str(writer.path), engine=engine)
        record(RunFinished(achieved_sparsity=result.achieved_sparsity, prune_seconds=result.seconds,
                           ppl=ppl, dense_ppl=dense_ppl))
        writer.finish(summary)
        return summary
    except BaseException as exc:
        cancelled = isinstance(exc, RunCancelled | KeyboardInterrupt)
        message = _failure_message(exc, device)
        try:
            record(RunFailed(error=message, cancelled=cancelled))
        finally:
            writer.fail(message, cancelled)
        if isinstance(exc, torch.OutOfMemoryError):
            raise ToolkitError(message) from None
        raise


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


def _dense_eval(config: Any, loaded: LoadedModel, test: torch.Tensor | None, device: torch.device,
                protocol: dict, record: Callable[[Event], None], progress: Progress, cancel: Any) -> dict[str, float]:
    """Dense perplexity (with --eval-dense), from the cache when this protocol was measured before."""
    if test is None or not config.eval_dense:
        return {}
    key = dense_ppl_key(loaded, test, protocol["evaluation"])
    value = cached_dense_ppl(key)
    if value is None:
        value = _eval(loaded, test, device, "dense", progress, cancel)
        store_dense_ppl(key, value)
    record(EvalPoint(dataset=config.eval_data, which="dense", ppl=value, seq_len=config.eval_seqlen,
                     windows=int(test.shape[0]), tokens=int(test.numel())))
    return {config.eval_data: value}


def _result(config: Any, method: str, options: dict, result: Any, ppl: dict, dense_ppl: dict, protocol: dict,
            device: torch.device) -> dict[str, Any]:
    return {
        "model": config.model,
        "method": method,
        "options": options,
        "sparsity": str(config.sparsity),
        "achieved_sparsity": result.achieved_sparsity,
        "ppl": ppl,
        "dense_ppl": dense_ppl,
        "prune_seconds": result.seconds,
        "peak_rss_mb": peak_rss_mb(),
        "device": str(device),
        "protocol": protocol,
        "layers": [
            {"layer": r["layer"], "name": r["name"], "shape": r["shape"], "sparsity": r["sparsity"],
             "rel_error": r["rel_error"], "rel_error_dense": r["rel_error_dense"], "seconds": r["seconds"]}
            for r in result.layers
        ],
        "versions": versions(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
