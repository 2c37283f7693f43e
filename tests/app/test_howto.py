""""How to read this" texts: one per kind of plot, and one collapsed accordion under every plot of the page."""

from pathlib import Path

from app.howto import TEXTS, TITLE, Plot, text


def test_every_kind_of_plot_has_an_explanation():
    assert set(TEXTS) == set(Plot)
    for plot in Plot:
        assert len(text(plot)) > 150, plot
        assert "**" in text(plot), plot  # the lead words are bold


def test_the_explanations_say_what_the_methods_do_differently():
    assert "per output row" in text(Plot.MASKS) and "‖X_j‖" in text(Plot.HEATMAP)
    assert "ξ" in text(Plot.LAMBDA) and "E_round/E_total" in text(Plot.LAMBDA)
    assert "k/(2 − k)" in text(Plot.OVERLAP)  # the chance level of IoU for random masks


def test_every_plot_of_the_app_has_a_collapsed_accordion_beside_it(tmp_path: Path):
    import gradio as gr

    from app.app import build_app

    demo = build_app(default_model="tiny-llama", runs_dir=str(tmp_path))
    blocks = list(demo.blocks.values())
    plots = [b for b in blocks if isinstance(b, gr.Plot)]
    helps = [b for b in blocks if isinstance(b, gr.Accordion) and b.label == TITLE]
    notes = [b for b in blocks if isinstance(b, gr.Markdown) and (b.elem_id or "").startswith("howto-")]
    assert len(plots) == len(helps) == len(notes) > 15
    assert not any(h.open for h in helps)
    assert len({n.elem_id for n in notes}) == len(notes)  # one id each, tab by tab


def test_a_replayed_run_gets_its_own_notes_under_the_explanations():
    from app.howto import run_notes
    from toolkit.events import LambdaStep, LayerDone

    errors = [0.1] * 12 + [0.003] * 4
    events = [LayerDone(layer=i, num_layers=len(errors), output_rel_error=e, seconds=0.1) for i, e in enumerate(errors)]
    events += [LambdaStep(layer=0, name="q", round=r, lam=1e-5, lam_low=0, lam_high=1e6, e_total=1.0, e_round=0.1,
                          ratio=0.1, xi=0.3, sparsity_before_rounding=0.0, improved=True) for r in range(2)]
    notes = run_notes(events)
    assert notes[Plot.LAYERS].startswith(text(Plot.LAYERS))
    assert "**In this run**: The layer output error drops ×33 from layer 11 to layer 12 in this run." in \
        notes[Plot.LAYERS]
    assert "never needed sparsity before rounding" in notes[Plot.LAMBDA]
    assert run_notes([])[Plot.LAYERS] == text(Plot.LAYERS)  # nothing to say: the plain explanation
