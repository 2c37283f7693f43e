"""``--permute`` on the page and in the widgets: offered for n:m with a method that takes it, carried into the
run config, refused otherwise with the command line's rule (in the page's words); the catalogue says who takes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app import forms, run_tab
from app.page_words import page_words
from toolkit.api import list_methods
from toolkit.errors import ToolkitError
from toolkit.methods import METHODS
from toolkit.methods.base import Scope
from toolkit.run.config import RunConfig
from toolkit.spec.targets import NM

QUICK = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")
TAKERS = {name for name, spec in METHODS.items() if spec.scope is Scope.LINEAR and NM in spec.targets}


def settings(**fields: Any) -> forms.RunSettings:
    return forms.RunSettings(**{"model": "tiny-llama", "method": "wanda", "protocol": QUICK, **fields})


def test_the_catalogue_marks_exactly_the_linear_scope_nm_methods() -> None:
    marked = {m["name"] for m in list_methods() if m["permute"]}
    assert marked == TAKERS
    assert {"magnitude", "wanda", "ria", "sparsegpt", "thanos", "fista", "alps", "awp"} <= marked
    assert not {"flap", "numerical", "rtn", "gptq"} & marked  # block scope, or quantize only


def test_methods_command_lists_who_takes_permute() -> None:
    listing = subprocess.run([sys.executable, "-m", "toolkit", "methods", "--json"], capture_output=True, text=True,
                             check=True).stdout
    assert {m["name"] for m in json.loads(listing) if m["permute"]} == TAKERS
    text = subprocess.run([sys.executable, "-m", "toolkit", "methods"], capture_output=True, text=True,
                          check=True).stdout
    lines = text.splitlines()
    for name in ("wanda", "flap"):
        detail = lines[next(i for i, line in enumerate(lines) if line.split()[:1] == [name]) + 1]
        assert ("n:m with --permute" in detail) == (name in TAKERS)


@pytest.mark.parametrize(("method", "pattern", "offered"), [
    ("wanda", "n:m", True), ("alps", "n:m", True), ("sparsegpt", "n:m", True),
    ("wanda", "unstructured", False), ("flap", "structured", False), ("flap", "n:m", False),
    ("rtn", "none", False),
])
def test_the_box_is_offered_only_for_nm_with_a_method_that_takes_it(method: str, pattern: str, offered: bool) -> None:
    assert forms.offers_permute(method, pattern) is offered


def test_the_form_carries_permute_into_the_run_config(tmp_path: Path) -> None:
    config = forms.to_config(settings(pattern="n:m", nm="2:4", permute=True), str(tmp_path))
    assert config.permute is True and config.compression.label == "2:4+perm"
    assert forms.to_config(settings(pattern="n:m", nm="2:4"), str(tmp_path)).permute is False


def _cli_message(**fields: Any) -> str:
    with pytest.raises(ToolkitError) as refused:
        RunConfig(model="tiny-llama", permute=True, **fields)
    return str(refused.value)


@pytest.mark.parametrize(("form", "cli"), [
    ({"pattern": "unstructured", "percent": 50}, {"method": "wanda", "sparsity": "50%"}),
    ({"method": "flap", "pattern": "structured", "percent": 30, "unit": "heads"},
     {"method": "flap", "sparsity": "structured:30%", "unit": "heads"}),
])
def test_permute_without_nm_is_refused_with_the_command_lines_message(tmp_path: Path, form: dict, cli: dict) -> None:
    with pytest.raises(ToolkitError) as refused:
        forms.to_config(settings(permute=True, **form), str(tmp_path))
    assert str(refused.value) == _cli_message(**cli)
    assert "--permute" in str(refused.value)
    assert not list(tmp_path.iterdir())


def test_the_refusal_reaches_the_status_line_in_the_pages_words(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_tab, "device_queue", lambda *a: pytest.fail("a refused input reached the queue"))
    (update,) = run_tab.run_stream(settings(permute=True), runs_dir=str(tmp_path), session="permute")
    assert update["status"].startswith("**⚠") and 'untick "Permute inputs (n:m)"' in update["status"]
    assert "--permute" not in update["status"]
    assert page_words("drop --permute or use a linear-scope method") == \
        'untick "Permute inputs (n:m)" or use a linear-scope method'


class _Gradio:
    """The few gradio calls the handlers make, recorded as plain dicts."""

    @staticmethod
    def update(**fields: Any) -> dict[str, Any]:
        return fields


def test_the_page_reads_the_box_and_unticks_it_where_it_does_not_apply() -> None:
    names = [f for f in run_tab.RunForm.__dataclass_fields__]
    form = run_tab.RunForm(**{name: name for name in names if name not in ("groups", "option_inputs", "protocol",
                                                                           "allocation")},
                           groups={}, option_inputs=[], protocol=_Reader(), allocation=_Reader())
    assert "permute" in form.inputs
    data = {name: None for name in names} | {"method": "sparsegpt", "pattern": "n:m", "nm": "2:4", "permute": True,
                                             "percent": 50, "unit": "", "extra": "", "quant": "none"}
    assert form.read(data).permute is True
    assert run_tab._permute_update(_Gradio, "wanda", "unstructured") == {"visible": False, "interactive": False,
                                                                        "value": False}
    assert run_tab._permute_update(_Gradio, "alps", "n:m") == {"visible": True, "interactive": True}
    updates = run_tab._on_method(forms.method_table(), {}, _Gradio)("flap", "n:m")
    assert {"visible": False, "interactive": False, "value": False} in updates  # block scope: unticked


class _Reader:
    """A stand-in for the protocol and allocation controls: no components, default values."""

    components: tuple = ()
    inputs: tuple = ()

    def read(self, data: dict) -> Any:
        return forms.Protocol()


def test_the_widgets_offer_and_carry_permute(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets")
    from toolkit.notebook.widgets import Dashboard, permute_offered

    assert permute_offered("wanda", "2:4") and not permute_offered("wanda", "50%")
    assert not permute_offered("flap", "2:4") and not permute_offered("wanda", "nonsense")
    dash = Dashboard("tiny-llama", "sparsegpt", "2:4", runs_dir=str(tmp_path))
    assert not dash.permute.disabled
    dash.permute.value = True
    assert dash.config().permute is True
    dash.sparsity.value = "50%"  # not n:m: the box is disabled and unticked
    assert dash.permute.disabled and dash.permute.value is False
    assert dash.config().permute is False
