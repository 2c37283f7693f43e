"""Recovery by distillation (recover --loss kd | kd+lm, toolkit/run/recover_teacher.py) on a tiny pruned run.

The teacher is the parent's source model (tiny-llama); a recovery keeps every pruned weight at 0 and leaves
the parent's folder as it was; a teacher that cannot be found is one line before any run folder exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.recovery import fingerprint, pruned_nonzero
from toolkit.api import recover_model
from toolkit.errors import ToolkitError
from toolkit.run.recover_config import RecoverConfig


@pytest.mark.parametrize("loss", ["kd", "kd+lm"])
def test_a_distillation_recovery_keeps_the_masks_and_the_parent(store: Path, loss: str) -> None:
    (run,) = list(store.iterdir())
    before = fingerprint(run)
    result = recover_model(run=run, steps=3, lr=1e-3, loss=loss, temperature=1.0, device="cpu")
    child = Path(result["run_dir"])
    assert fingerprint(run) == before
    config = json.loads((child / "config.json").read_text())
    assert config["options"]["loss"] == loss and config["options"]["temperature"] == 1.0
    assert len(result["loss"]) == 3 and all(v >= 0 for v in result["loss"])
    stray, dropped = pruned_nonzero(child / "model", child)
    assert dropped > 0 and stray == 0


def test_a_teacher_that_cannot_be_found_is_refused_before_any_run_folder(store: Path) -> None:
    (run,) = list(store.iterdir())
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "model": str(store / "gone")}))
    with pytest.raises(ToolkitError, match=r"cannot be found here.*--loss lm"):
        recover_model(run=run, steps=2, loss="kd", device="cpu")
    assert [p.name for p in store.iterdir()] == [run.name]


@pytest.mark.parametrize(("settings", "message"), [({"loss": "kl"}, "unknown --loss"),
                                                    ({"temperature": 0.0}, "--temperature must be")])
def test_bad_distillation_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ToolkitError, match=message):
        RecoverConfig(run_dir="x", **settings)
