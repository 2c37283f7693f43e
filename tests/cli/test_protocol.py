"""``prune --protocol``: the named sizes (shared with the app), the overrides, and the line printed before work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toolkit.api
from toolkit.cli.main import build_parser, main
from toolkit.cli.protocol import protocol_line, resolve_sizes
from toolkit.errors import ToolkitError
from toolkit.run.protocols import PROTOCOLS, QUICK


def sizes(*argv: str) -> tuple:
    s = resolve_sizes(build_parser().parse_args(["prune", *argv]))
    return s.preset.name, s.given, s.nsamples, s.seqlen, s.eval_seqlen, s.eval_windows


def test_the_default_protocol_keeps_the_sizes_of_the_recorded_results() -> None:
    assert sizes() == ("cpu", (), 32, 512, 512, None)


def test_quick_is_the_apps_quick_preset() -> None:
    from app import forms

    assert sizes("--protocol", "quick") == ("quick", (), 16, 128, 128, 16)
    label, values = next(iter(forms.PRESETS.items()))  # the app's default preset
    assert label == "quick (16 × 128, 16 eval windows)" and values == (16, 128, 128, 16)
    default = forms.Protocol()
    assert (default.nsamples, default.seqlen, default.eval_seqlen, default.eval_windows) == values
    assert list(forms.PRESETS) == [p.label for p in PROTOCOLS.values()]


def test_given_sizes_override_the_preset() -> None:
    assert sizes("--protocol", "quick", "--nsamples", "4", "--eval-windows", "all") == (
        "quick", ("--nsamples", "--eval-windows"), 4, 128, 128, None)
    assert sizes("--protocol", "paper", "--seqlen", "256") == ("paper", ("--seqlen",), 128, 256, 2048, None)
    with pytest.raises(ToolkitError, match="--eval-windows takes a number or 'all'"):
        sizes("--eval-windows", "some")
    with pytest.raises(SystemExit):
        sizes("--protocol", "fast")


def test_the_line_names_the_protocol_its_sizes_and_the_other_one() -> None:
    args = build_parser().parse_args(["prune", "--protocol", "quick"])
    line = protocol_line(resolve_sizes(args), "wiki")
    assert line.startswith("protocol quick: 16 × 128 calibration tokens, perplexity on the first 16 windows of "
                           "128 tokens (a preview; --protocol cpu for the numbers of docs/results.md: 32 × 512")
    assert "min quick, about" in line and "min cpu on a busy 2-core CPU" in line and "\n" not in line
    cpu = protocol_line(resolve_sizes(build_parser().parse_args(["prune"])), "wiki")
    assert cpu.startswith("protocol cpu: 32 × 512 calibration tokens, perplexity on every window of 512 tokens, "
                          "as in docs/results.md (--protocol quick for a preview: 16 × 128, 16 windows of 128")
    given = resolve_sizes(build_parser().parse_args(["prune", "--eval-windows", "3"]))
    assert protocol_line(given, None).startswith("protocol cpu (--eval-windows given): 32 × 512 calibration "
                                                 "tokens, no perplexity")
    custom = build_parser().parse_args(["prune", "--nsamples", "2", "--seqlen", "8", "--eval-seqlen", "8",
                                        "--eval-windows", "1"])
    assert protocol_line(resolve_sizes(custom), "wiki") == ("protocol custom: 2 × 8 calibration tokens, "
                                                            "perplexity on the first window of 8 tokens")


def test_the_line_is_printed_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def prune_model(config: object, **kwargs: object) -> dict:
        assert capsys.readouterr().out.startswith("protocol quick: 16 × 128")  # already on the terminal
        raise ToolkitError("stopped before the run")

    monkeypatch.setattr(toolkit.api, "prune_model", prune_model)
    assert main(["prune", "--model", "tiny-llama", "--protocol", "quick", "--out", str(tmp_path)]) == 2
    assert "stopped before the run" in capsys.readouterr().err


def test_a_quick_run_records_the_quick_sizes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "r.json"
    assert main(["prune", "--model", "tiny-llama", "--protocol", "quick", "--eval-windows", "2", "--out",
                 str(tmp_path / "runs"), "--json", str(out)]) == 0
    protocol = json.loads(out.read_text())["protocol"]
    assert (protocol["calibration"]["nsamples"], protocol["calibration"]["seqlen"]) == (QUICK.nsamples, QUICK.seqlen)
    assert (protocol["evaluation"]["seqlen"], protocol["evaluation"]["windows"]) == (QUICK.eval_seqlen, 2)
    assert capsys.readouterr().out.startswith("protocol quick (--eval-windows given): 16 × 128 calibration tokens")
