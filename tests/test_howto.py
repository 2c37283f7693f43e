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
