"""What a recovery is asked to do, and the parent run it starts from, checked before any work (no torch).

:class:`RecoverConfig` holds the recovery settings, checked when it is built. :func:`read_parent`
checks the parent run folder and reads its protocol. Both raise one :class:`ToolkitError` line
that says what to do. They run before any model loads or any file is written
(:mod:`toolkit.run.recover` does the work).

The defaults are sized for a 2-core CPU and the embedded model (docs/recover.md has the measured
time): 40 AdamW steps of about 512 tokens (max(1, 512 // seqlen) windows of the parent's calibration
length); ``--train lora``: rank 8, alpha 16 (scale s = alpha/rank = 2), peak learning rate 5·10⁻⁴;
``--train full`` (the linears themselves train, no rank or alpha): peak learning rate 5·10⁻⁵, ten
times smaller, as every weight moves instead of a low-rank update. The windows are drawn from the
parent's calibration text with the parent's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.run.preflight import check_window
from toolkit.store.runs import RunRecord, open_run

DEFAULT_STEPS = 40
DEFAULT_RANK = 8
DEFAULT_ALPHA = 16.0
DEFAULT_LR = 5e-4  # --train lora
DEFAULT_FULL_LR = 5e-5  # --train full
TRAINS = ("lora", "full")  # masked-LoRA adapters, or the decoder-layer linears themselves
TOKENS_PER_STEP = 512  # the default batch: max(1, TOKENS_PER_STEP // seqlen) windows a step
METHOD = "recover"  # the method name of a recovery run in the run store
SETTINGS = ("steps", "rank", "alpha", "lr", "batch_size", "seqlen", "seed", "eval_windows", "device", "out_dir",
            "loss", "temperature", "train")
LOSSES = ("lm", "kd", "kd+lm")  # the language-model loss, distillation from the parent's source model, their sum
DEFAULT_TEMPERATURE = 2.0


@dataclass(frozen=True)
class RecoverConfig:
    """One recovery of the saved run in ``run_dir``; ``None`` means the parent's value.

    ``train`` is ``lora`` or ``full``. ``rank`` and ``alpha`` are LoRA's (refused with ``full``);
    left out they are :data:`DEFAULT_RANK` and :data:`DEFAULT_ALPHA` (read them with :attr:`lora`).
    ``lr`` left out is :data:`DEFAULT_LR` (lora) or :data:`DEFAULT_FULL_LR` (full) (:attr:`peak_lr`).
    ``seqlen`` and ``seed`` default to the parent's calibration protocol; ``batch_size`` to
    ``max(1, 512 // seqlen)`` windows, about 512 tokens a step. ``eval_windows`` defaults to
    the parent's evaluation windows; a number keeps only the first N. ``out_dir`` defaults to the
    parent's run store (the folder that holds ``run_dir``).
    """

    run_dir: str
    steps: int = DEFAULT_STEPS
    rank: int | None = None
    alpha: float | None = None
    lr: float | None = None
    batch_size: int | None = None
    seqlen: int | None = None
    seed: int | None = None
    eval_windows: int | None = None
    device: str = "auto"
    out_dir: str | None = None
    loss: str = "lm"  # toolkit/engine/distill.py
    temperature: float = DEFAULT_TEMPERATURE  # of the distillation (kd, kd+lm)
    train: str = "lora"  # toolkit/run/recover_train.py

    def __post_init__(self) -> None:
        self._check_train()
        for name in ("steps", "rank", "batch_size"):
            value = getattr(self, name)
            if name in ("batch_size", "rank") and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                flag = "--" + name.replace("_", "-")
                raise ToolkitError(f"{flag} must be a whole number ≥ 1, got {value!r}")
        for name in ("alpha", "lr"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value <= 0:
                raise ToolkitError(f"--{name} must be a number > 0, got {value!r}")
        if self.seqlen is not None:
            check_window(self.seqlen, None, "--seqlen")
        if self.loss not in LOSSES:
            raise ToolkitError(f"unknown --loss {self.loss!r}: use one of {', '.join(LOSSES)}")
        if not isinstance(self.temperature, int | float) or not math.isfinite(self.temperature) \
                or self.temperature <= 0:
            raise ToolkitError(f"--temperature must be a number > 0, got {self.temperature!r}")
        if self.eval_windows is not None and self.eval_windows < 1:
            raise ToolkitError(f"--eval-windows must be ≥ 1 (leave it out for the parent's), got {self.eval_windows}")

    def _check_train(self) -> None:
        """``train`` is known, and ``rank``/``alpha`` are left out with ``full``."""
        if self.train not in TRAINS:
            raise ToolkitError(f"unknown --train {self.train!r}: use lora (masked-LoRA adapters) or full (the "
                               "linear weights themselves)")
        given = [f"--{name}" for name in ("rank", "alpha") if getattr(self, name) is not None]
        if self.train == "full" and given:
            verb = "does" if len(given) == 1 else "do"
            raise ToolkitError(f"{' and '.join(given)} {verb} not apply to --train full (it trains the weights "
                               "themselves, no low-rank adapters): leave them out, or use --train lora")

    @property
    def lora(self) -> tuple[int, float]:
        """(rank, alpha) of ``--train lora``, the defaults where left out."""
        return (self.rank if self.rank is not None else DEFAULT_RANK,
                float(self.alpha) if self.alpha is not None else DEFAULT_ALPHA)

    @property
    def peak_lr(self) -> float:
        """The peak learning rate: ``lr``, else the default of ``train``."""
        if self.lr is not None:
            return float(self.lr)
        return DEFAULT_FULL_LR if self.train == "full" else DEFAULT_LR

    @property
    def store(self) -> Path:
        """The run store the new run goes to."""
        return Path(self.out_dir) if self.out_dir else Path(self.run_dir).expanduser().resolve().parent


@dataclass(frozen=True)
class ParentRun:
    """The parent run as a recovery needs it: its record, saved model and protocol."""

    record: RunRecord
    model_dir: Path
    calib: str
    seqlen: int
    batch_size: int
    seed: int
    encoding: str
    eval_data: str | None
    eval_seqlen: int
    eval_windows: int | None

    @property
    def run_id(self) -> str:
        """The parent's folder name."""
        return self.record.run_id

    @property
    def config(self) -> dict[str, Any]:
        """The parent's config.json."""
        return self.record.config


def read_parent(config: RecoverConfig) -> ParentRun:
    """Check that ``config.run_dir`` is a run with a saved float model; returns its protocol.

    Raises :class:`ToolkitError` when the folder is not a run folder, is damaged or still running, is
    a quantized run, saved no model, or has no calibration protocol.
    """
    path = Path(config.run_dir).expanduser()
    if not path.is_dir():
        raise ToolkitError(f"{config.run_dir!r} is not a run folder (no such folder); give a folder of the run store, "
                           "e.g. runs/<id> (`python -m toolkit runs --out STORE` lists them)")
    if not (path / "config.json").is_file():
        raise ToolkitError(f"{config.run_dir!r} is not a run folder (it has no config.json); give a folder of the run "
                           "store, e.g. runs/<id> (`python -m toolkit runs --out STORE` lists them)")
    record = open_run(path)
    if record.status == "damaged":
        raise ToolkitError(f"run {record.run_id} is damaged ({record.error}); pick another run")
    if record.status == "running":
        raise ToolkitError(f"run {record.run_id} is still running; recover it once it has finished")
    _check_float(record)
    model_dir = path / "model"
    if not (model_dir / "config.json").is_file():
        raise ToolkitError(f"run {record.run_id} saved no model: re-run prune with --save-model, then recover that "
                           "run (recovery fine-tunes the saved checkpoint)")
    from toolkit.run.config import recorded_source  # here: run.config imports torch, the CLI's parser must not

    cfg = record.config
    missing = [key for key in ("calib", "seqlen", "seed") if key not in cfg]
    if missing:
        raise ToolkitError(f"run {record.run_id} records no calibration protocol ({', '.join(missing)} missing in its "
                           "config.json); recover a run written by `python -m toolkit prune`")
    eval_data = cfg.get("eval_data") or None
    if eval_data is not None:  # a relative file of an older record: where the run started, or one line
        eval_data = recorded_source(str(eval_data), cfg.get("cwd"), "evaluation text", record.run_id)
    seqlen = config.seqlen if config.seqlen is not None else int(cfg["seqlen"])
    windows = config.eval_windows if config.eval_windows is not None else cfg.get("eval_windows")
    batch = config.batch_size if config.batch_size is not None else max(1, TOKENS_PER_STEP // seqlen)
    calib = recorded_source(str(cfg["calib"]), cfg.get("cwd"), "calibration text", record.run_id)
    return ParentRun(record=record, model_dir=model_dir, calib=calib, seqlen=seqlen, batch_size=batch,
                     seed=config.seed if config.seed is not None else int(cfg["seed"]),
                     encoding=str(cfg.get("encoding") or "utf-8"), eval_data=eval_data,
                     eval_seqlen=int(cfg.get("eval_seqlen") or 512), eval_windows=windows)


def _check_float(record: RunRecord) -> None:
    """Refuse a quantized run: the update would leave its quantization grid."""
    quant = record.compression.get("quant")
    if record.config.get("quant") or quant:
        label = quant.get("label") if isinstance(quant, dict) else record.config.get("quant")
        raise ToolkitError(f"run {record.run_id} is quantized ({label}): recovery supports sparse or shrunk float runs "
                           "(a low-rank update would move the weights off the quantization grid); recover a run "
                           "pruned without --quant")


def run_config(config: RecoverConfig, parent: ParentRun, device: str) -> dict[str, Any]:
    """The new run's config.json: the recovery settings, the parent's link, compression and protocol.

    ``options`` repeats the recovery settings, as a prune run's method options, for the run tables.
    """
    cfg = parent.config
    rank, alpha = config.lora
    lora = {"rank": rank, "alpha": alpha} if config.train == "lora" else {}
    settings = {"train": config.train, "steps": config.steps, **lora, "lr": config.peak_lr,
                "batch_size": parent.batch_size, "seqlen": parent.seqlen,
                **({"loss": config.loss, "temperature": config.temperature} if config.loss != "lm" else {})}
    return {"model": cfg.get("model", "?"), "method": METHOD, "parent": parent.run_id,
            "parent_dir": str(Path(config.run_dir).expanduser().resolve()), "parent_method": cfg.get("method"),
            "sparsity": cfg.get("sparsity"), "quant": None, "unit": cfg.get("unit"),
            "compression": parent.record.compression, **settings, "seed": parent.seed, "calib": parent.calib,
            "encoding": parent.encoding, "eval_data": parent.eval_data, "eval_seqlen": parent.eval_seqlen,
            "eval_windows": parent.eval_windows, "device": device, "out_dir": str(config.store),
            "save_model": True, "options": settings}
