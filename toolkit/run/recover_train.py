"""A recovery's training: masked LoRA or a full fine-tune, chosen by ``--train`` (behind :mod:`toolkit.run.recover`).

- ``lora`` (the default): masked-LoRA adapters on every decoder-layer linear
  (:mod:`toolkit.engine.lora`), trained, then merged into the weights.
- ``full``: the decoder-layer linear weights themselves train, their gradients masked and their
  dropped entries set to 0 after every step (:mod:`toolkit.engine.full_ft`). A shrunk model trains
  in its own shapes.

Either way the loop is :func:`toolkit.engine.finetune.train` (the same schedule, clipping, data and
loss) and the model comes back plain, on the CPU, in its stored dtype, in ``run.loaded.model``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.engine.finetune import TrainResult, TrainSettings, train, warmup_steps
from toolkit.engine.full_ft import start_full
from toolkit.engine.lora import add_masked_lora, merge_masked_lora
from toolkit.events import Event
from toolkit.models.load import LoadedModel
from toolkit.run.recover_config import ParentRun, RecoverConfig
from toolkit.run.recover_teacher import teacher_loss
from toolkit.run.recover_zeros import ParentZeros


@dataclasses.dataclass
class Prepared:
    """Everything a recovery needs once checked: the parent, the model, its keep-masks and the windows."""

    config: RecoverConfig
    parent: ParentRun
    loaded: LoadedModel
    device: torch.device
    masks: dict[nn.Module, Tensor]  # every decoder-layer linear → (out, in) bool keep-mask
    train_windows: Tensor  # (steps · batch_size, seqlen) int64
    test: Tensor | None  # evaluation windows, or None when the parent evaluated nothing
    seconds: dict[str, float]
    zeros: ParentZeros  # the parent's zeros, counted on its saved weights before training
    teacher: nn.Module | None = None  # the parent's source model for --loss kd | kd+lm (run/recover_teacher.py)


def fine_tune(run: Prepared, record: Callable[[Event], None], cancelled: Callable[[], bool]) -> TrainResult:
    """Train ``run.loaded.model`` as ``run.config.train`` says; the trained plain model replaces it (on the CPU).

    Seeds torch's generator with the parent's seed inside a forked state (the caller's is left alone).
    Raises :class:`~toolkit.errors.RunCancelled` on a cancel, :class:`~toolkit.errors.NumericalError`
    when the loss or the update is not finite.
    """
    config = run.config
    with torch.random.fork_rng(devices=[]):  # seeded adapters and dropout
        torch.manual_seed(run.parent.seed)
        loss_fn = teacher_loss(run.teacher, config, run.device)
        if config.train == "full":
            full = start_full(run.loaded.model, run.masks)
            settings = TrainSettings(steps=config.steps, batch_size=run.parent.batch_size, lr=config.peak_lr,
                                     loss_fn=loss_fn, after_step=full.after_step)
            try:
                result = train(run.loaded.model, run.train_windows, settings, run.device, record, cancelled)
            finally:
                run.loaded.model = full.finish().to("cpu")
            return result
        rank, alpha = config.lora
        peft_model = add_masked_lora(run.loaded.model, run.masks, rank, alpha)
        settings = TrainSettings(steps=config.steps, batch_size=run.parent.batch_size, lr=config.peak_lr,
                                 loss_fn=loss_fn)
        result = train(peft_model, run.train_windows, settings, run.device, record, cancelled)
    run.loaded.model = merge_masked_lora(peft_model).to("cpu")
    return result


def settings(run: Prepared) -> dict[str, Any]:
    """The recovery's settings as its RunStarted options and result.json ``options`` record them.

    ``trainable``: the adapter weights (LoRA, r·(out + in) a linear) or the weights that train
    directly (full: every kept entry of every linear).
    """
    config, masks = run.config, run.masks
    common = {"parent": run.parent.run_id, "train": config.train, "steps": config.steps}
    if config.train == "full":
        trainable, lora = sum(int(keep.sum()) for keep in masks.values()), {}
    else:
        rank, alpha = config.lora
        trainable = sum(rank * (keep.shape[0] + keep.shape[1]) for keep in masks.values())
        lora = {"rank": rank, "alpha": alpha}
    return {**common, **lora, "lr": config.peak_lr, "warmup": warmup_steps(config.steps),
            "batch_size": run.parent.batch_size, "seqlen": run.parent.seqlen, "seed": run.parent.seed,
            "linears": len(masks), "trainable": trainable}
