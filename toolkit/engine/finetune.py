"""The recovery fine-tune: AdamW steps on calibration windows (behind :mod:`toolkit.run.recover`).

One step takes ``batch_size`` windows (in order: step i uses windows i·b … i·b + b − 1). It computes
the causal-LM loss, the mean NLL of every token but the first of each window given the tokens before
it (transformers' ``labels=input_ids``), or ``TrainSettings.loss_fn``'s loss (distillation). Then it clips
the global gradient norm of the trained parameters at :data:`CLIP_NORM` and takes one AdamW step (no
weight decay) on them only: the masked-LoRA adapters (:mod:`toolkit.engine.lora`) or, for a full
fine-tune, the decoder-layer linear weights (:mod:`toolkit.engine.full_ft`, whose
``TrainSettings.after_step`` re-applies the keep-masks after every step).

The learning rate warms up linearly over the first ``max(1, steps // 10)`` steps, then decays
linearly to ``lr / (steps − warmup + 1)`` at the last step. Each step emits a
:class:`~toolkit.events.RecoveryStep` and is a cancellation point. The model trains in train mode
(dropout where the family has it, drawn from the seeded generator) and is back in eval mode on
return.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from toolkit.engine.lora import trainable_parameters
from toolkit.errors import NumericalError, RunCancelled
from toolkit.events import Event, RecoveryStep

CLIP_NORM = 1.0  # the trained parameters' global gradient norm is clipped here


@dataclass(frozen=True)
class TrainSettings:
    """What the loop needs: ``steps`` AdamW steps of ``batch_size`` windows at peak learning rate ``lr``."""

    steps: int
    batch_size: int
    lr: float
    loss_fn: Callable[[nn.Module, Tensor], Tensor] | None = None  # (model, batch) → loss; None: the LM loss
    after_step: Callable[[], None] | None = None  # called after every optimizer step (full_ft: the masks)


@dataclass
class TrainResult:
    """The loss and learning rate of every step (index 0 is step 1), and the seconds the loop took."""

    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    seconds: float = 0.0


def warmup_steps(steps: int) -> int:
    """The warm-up length: a tenth of the steps, at least one."""
    return max(1, steps // 10)


def learning_rate(step: int, settings: TrainSettings) -> float:
    """The learning rate of 1-based ``step``: linear warm-up to ``lr``, then linear decay (module docstring)."""
    warm = warmup_steps(settings.steps)
    return settings.lr * min(step / warm, (settings.steps - step + 1) / (settings.steps - warm + 1))


def train(model: nn.Module, windows: Tensor, settings: TrainSettings, device: torch.device,
          emit: Callable[[Event], None], cancelled: Callable[[], bool]) -> TrainResult:
    """Run the recovery steps on ``model``'s parameters that require gradients.

    ``model`` is a peft model from :func:`toolkit.engine.lora.add_masked_lora` (the adapters train) or a
    model prepared by :func:`toolkit.engine.full_ft.start_full` (its linears train).
    ``windows`` is (steps · batch_size, seq_len) int64. The parameters are updated in place, on
    ``device``; the model is moved there and left there. Raises :class:`RunCancelled` at the first
    step after ``cancelled()`` turns true, and :class:`NumericalError` when the loss is not finite.
    """
    params = trainable_parameters(model)
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    model.to(device)
    model.train()
    result, start = TrainResult(), time.perf_counter()
    try:
        for step in range(1, settings.steps + 1):
            if cancelled():
                raise RunCancelled("cancelled")
            rate = learning_rate(step, settings)
            for group in optimizer.param_groups:
                group["lr"] = rate
            batch = windows[(step - 1) * settings.batch_size: step * settings.batch_size].to(device)
            loss = model(input_ids=batch, labels=batch).loss if settings.loss_fn is None else \
                settings.loss_fn(model, batch)  # e.g. distillation (toolkit.engine.distill.step_loss)
            value = float(loss.detach())
            if not math.isfinite(value):
                raise NumericalError(f"the recovery loss is not finite at step {step}; lower --lr")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
            optimizer.step()
            if settings.after_step is not None:
                settings.after_step()
            result.losses.append(value)
            result.lrs.append(rate)
            emit(RecoveryStep(step=step, loss=value, lr=rate))
    finally:
        model.eval()
        optimizer.zero_grad(set_to_none=True)
    result.seconds = time.perf_counter() - start
    return result
