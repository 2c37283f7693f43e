"""Input groups shared by the Run and Sweep tabs (Gradio components + how to read them), and bounds handling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import forms


@dataclass
class ProtocolControls:
    """Preset, calibration source / nsamples / seqlen / seed, evaluation, device."""

    preset: Any
    calib: Any
    nsamples: Any
    seqlen: Any
    seed: Any
    evaluate: Any
    eval_seqlen: Any
    eval_windows: Any
    device: Any
    tasks: Any
    task_limit: Any

    @property
    def components(self) -> list[Any]:
        """Every input component of the group."""
        return [self.preset, self.calib, self.nsamples, self.seqlen, self.seed, self.evaluate, self.eval_seqlen,
                self.eval_windows, self.device, self.tasks, self.task_limit]

    def read(self, data: dict[Any, Any]) -> forms.Protocol:
        """The protocol from a Gradio ``{component: value}`` dict."""
        return forms.Protocol(calib=data[self.calib], nsamples=data[self.nsamples], seqlen=data[self.seqlen],
                              seed=data[self.seed], evaluate=bool(data[self.evaluate]), eval_data="wiki",
                              eval_seqlen=data[self.eval_seqlen], eval_windows=data[self.eval_windows],
                              device=data[self.device], tasks=list(data[self.tasks] or []),
                              task_limit=data[self.task_limit])


def protocol_controls(gr: Any, *, evaluate_toggle: bool = True, prefix: str = "run") -> ProtocolControls:
    """Lay out the protocol inputs (quick preset by default) and wire the preset."""
    first = next(iter(forms.PRESETS))
    nsamples, seqlen, eval_seqlen, eval_windows = forms.PRESETS[first]
    preset = gr.Dropdown(choices=list(forms.PRESETS), value=first, label="Protocol preset",
                         info="sets the numbers below; every result carries its protocol")
    with gr.Row():
        calib = gr.Dropdown(choices=list(forms.CALIB_SOURCES), value="wiki", allow_custom_value=True,
                            label="Calibration text", info="wiki is embedded; others need the hub, or a FILE.txt")
        seed = gr.Number(value=0, precision=0, label="Seed", minimum=0)
    with gr.Row():
        nsamples_box = gr.Number(value=nsamples, precision=0, label="nsamples", minimum=1, elem_id=f"{prefix}-nsamples")
        seqlen_box = gr.Number(value=seqlen, precision=0, label="seqlen", minimum=2, elem_id=f"{prefix}-seqlen")
    evaluate = gr.Checkbox(value=True, label="Evaluate perplexity (wiki test split)", visible=evaluate_toggle)
    with gr.Row():
        eval_seqlen_box = gr.Number(value=eval_seqlen, precision=0, label="eval seqlen", minimum=2)
        eval_windows_box = gr.Number(value=eval_windows, precision=0, label="eval windows (0 = all)", minimum=0,
                                     elem_id=f"{prefix}-eval-windows")
    device = gr.Dropdown(choices=["auto", "cpu", "cuda"], value="auto", allow_custom_value=True, label="Device")
    with gr.Row():
        tasks = gr.Dropdown(choices=list(forms.TASK_CHOICES), value=[], multiselect=True, scale=3,
                            label="Zero-shot tasks (dense and pruned; lm-eval, 0 shots)",
                            info="none by default; offline they are scored on the local validation copies",
                            elem_id=f"{prefix}-tasks")
        task_limit = gr.Number(value=forms.Protocol.task_limit, precision=0, minimum=0, scale=1,
                               label="examples per task (0 = all)", elem_id=f"{prefix}-task-limit")
    controls = ProtocolControls(preset, calib, nsamples_box, seqlen_box, seed, evaluate, eval_seqlen_box,
                                eval_windows_box, device, tasks, task_limit)
    preset.change(lambda name: list(forms.PRESETS.get(name, forms.PRESETS[first])), inputs=preset,
                  outputs=[nsamples_box, seqlen_box, eval_seqlen_box, eval_windows_box], queue=False)
    return controls


def model_controls(gr: Any, default_model: str, prefix: str = "run") -> tuple[Any, Any]:
    """The model dropdown (embedded default preselected) and the hub id / local path field."""
    choices = list(dict.fromkeys([default_model, *forms.MODELS]))
    model = gr.Dropdown(choices=choices, value=default_model, allow_custom_value=True, label="Model",
                        info=f"{forms.EMBEDDED_NOTE}; tiny-* are random test models", elem_id=f"{prefix}-model")
    path = gr.Textbox(label="…or a Hugging Face id / local path (overrides the list)", value="",
                      placeholder="facebook/opt-125m, /path/to/checkpoint, model.gguf", elem_id=f"{prefix}-model-path")
    return model, path


def checked_by_forms(blocks: Any) -> int:
    """Let out-of-range numbers reach the forms' own checks; returns how many inputs were changed.

    Gradio refuses a Number or Slider value outside [minimum, maximum] before any handler runs,
    with a toast that fades (sparsity 150, nsamples 0). The forms check every number and put the
    error in the status line, where it stays, so each bounded input only rounds to its precision.
    The bounds still shape the slider and the spinner arrows.
    """
    import gradio as gr

    changed = 0
    for block in blocks.blocks.values():
        bounded = getattr(block, "minimum", None) is not None or getattr(block, "maximum", None) is not None
        if bounded and isinstance(block, gr.Number | gr.Slider):
            block.preprocess = _rounding(block.precision)
            changed += 1
    return changed


def _rounding(precision: int | None) -> Any:
    import gradio as gr

    def preprocess(payload: Any) -> Any:
        return None if payload is None else gr.Number.round_to_precision(payload, precision)
    return preprocess
