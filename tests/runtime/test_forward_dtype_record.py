"""A run records the precision its layer passes ran in: bf16 asked where there is none ran, and is recorded, as fp32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.api import RunConfig, prune_model
from toolkit.events import Event, RunWarning

QUICK = {"model": "tiny-llama", "method": "wanda", "nsamples": 2, "seqlen": 32, "eval_data": None, "device": "cpu"}


def test_bf16_without_support_is_recorded_as_fp32(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("toolkit.runtime.devices.bf16_supported", lambda device: False)
    events: list[Event] = []
    result = prune_model(RunConfig(**QUICK, forward_dtype="bf16", out_dir=str(tmp_path)),  # type: ignore[arg-type]
                         on_event=events.append)
    assert any(isinstance(e, RunWarning) and "no native bf16" in e.message for e in events)
    stored = json.loads(Path(result["run_dir"], "result.json").read_text())
    for record in (result, stored):
        assert record["engine"]["forward_dtype"] == "fp32" and record["engine"]["forward_dtype_asked"] == "bf16"
        assert record["precision"]["forward"] == "fp32"


def test_bf16_with_support_is_recorded_as_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("toolkit.runtime.devices.bf16_supported", lambda device: True)
    result = prune_model(RunConfig(**QUICK, forward_dtype="bf16", out_dir=str(tmp_path)))  # type: ignore[arg-type]
    assert result["engine"]["forward_dtype"] == "bf16" and "forward_dtype_asked" not in result["engine"]
    assert result["precision"]["forward"] == "bf16"


def test_auto_is_recorded_as_what_it_resolved_to(tmp_path: Path) -> None:
    result = prune_model(RunConfig(**QUICK, out_dir=str(tmp_path)))  # type: ignore[arg-type]
    assert result["engine"]["forward_dtype"] == "fp32" and result["engine"]["forward_dtype_asked"] == "auto"
