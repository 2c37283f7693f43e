"""The PruneLab dashboard: a Gradio Blocks app with five tabs (Run, Sweep, Compare masks, Runs, Lesson).

``build_app()`` only lays out and wires components (each tab's logic lives in its module as plain
functions the tests drive); ``python -m app`` launches it on localhost.
"""

import argparse
import logging
import threading
from collections.abc import Sequence

from app import compare_tab, lesson_tab, run_tab, runs_tab, sweep_tab
from app.controls import checked_by_forms
from app.jobs import SESSIONS

TITLE = "PruneLab: post-training pruning of LLMs"
INTRO = ("Prune a language model layer by layer and watch it happen: **Run** one method, **Sweep** methods × "
         "sparsities into perplexity curves, **Compare** the masks two runs chose, browse past **Runs**, and "
         "see four methods side by side in the **Lesson**.")
CSS = (".plot-container { min-height: 0 !important; } footer { display: none !important; } "
       "#run-actions { position: sticky; top: 0; bottom: 0; z-index: 20; background: var(--background-fill-primary); } "
       ".gradio-container { overflow: clip !important; } "  # clip, unlike hidden, lets #run-actions stick
       "#run-card { border: 2px solid var(--color-accent); border-radius: var(--radius-lg); padding: 0 12px; } "
       "#run-card td strong { font-size: 1.3em; }")
# A slider's number box clamps what is typed into it when it loses focus (150 becomes 95, -5 becomes 0), so
# the form would run what the user did not ask for. These capture listeners run before the slider's own and
# keep an out-of-range value as typed; the form then refuses it in the status line (app/forms.py).
KEEP_TYPED_JS = """() => {
  const keep = (event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || box.type !== 'number' || !box.closest('.block')
        || !box.getAttribute('aria-label')?.startsWith('number input for')) return;
    const value = Number(box.value), low = Number(box.min), high = Number(box.max);
    if (box.value !== '' && (Number.isNaN(value) || value < low || value > high)) event.stopImmediatePropagation();
  };
  for (const kind of ['blur', 'focusout', 'change']) document.addEventListener(kind, keep, true);
}"""
# In the page's <head>, so the listeners are in place before the form can be typed into (a load event's
# script runs after the page is shown, and a quick user, or test, types first).
HEAD = f"<script>({KEEP_TYPED_JS})();</script>"


def build_app(default_model: str = "smollm2-135m", runs_dir: str = "runs"):  # noqa: ANN201 - gr.Blocks
    """The dashboard as a ``gr.Blocks`` (not launched); runs are stored under ``runs_dir``."""
    import gradio as gr

    from app.whole_updates import install

    install()  # streamed plots are sent whole, so a lost update cannot leave one stale (app/whole_updates.py)
    runs_dir = str(runs_dir)
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(f"## {TITLE}\n{INTRO}")
        history = gr.State([])  # run ids this browser session made (Compare preselects the last two)
        with gr.Tabs():
            with gr.Tab("Run", id="run"):
                run_tab.build(gr, default_model=default_model, runs_dir=runs_dir, history=history)
            with gr.Tab("Sweep", id="sweep"):
                sweep_tab.build(gr, default_model=default_model, runs_dir=runs_dir)
            with gr.Tab("Compare masks", id="compare") as compare_page:
                compare = compare_tab.build(gr, runs_dir=runs_dir, history=history)
            with gr.Tab("Runs", id="runs") as runs_page:
                runs = runs_tab.build(gr, runs_dir=runs_dir)
            with gr.Tab("Lesson", id="lesson") as lesson_page:
                lesson = lesson_tab.build(gr, default_model=default_model, runs_dir=runs_dir)
        compare_page.select(compare["refresh"], inputs=history, outputs=compare["runs"])
        runs_page.select(runs["refresh"], outputs=runs["outputs"])
        lesson_page.select(lesson["refresh"], inputs=lesson["model"], outputs=lesson["plan"])

        def on_unload(request: gr.Request) -> None:
            SESSIONS.close_session(run_tab.session_of(request))

        demo.unload(on_unload)
    checked_by_forms(demo)
    return demo


def warm_up() -> threading.Thread:
    """Import the engine and the Llama modelling code in a background thread.

    The first Run would otherwise spend ~8 s importing them (the embedded model and tiny-llama
    are Llama models); the page is usable meanwhile.
    """
    def load() -> None:
        import importlib

        for module in ("toolkit.run.pipeline", "transformers.models.llama.modeling_llama"):
            try:
                importlib.import_module(module)
            except ImportError:  # an optional speed-up only
                logging.getLogger(__name__).info("warm-up: could not import %s", module)

    thread = threading.Thread(target=load, name="prunelab-warm-up", daemon=True)
    thread.start()
    return thread


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``--model``, ``--port``, ``--runs``, ``--host``."""
    parser = argparse.ArgumentParser(prog="python -m app", description=TITLE)
    parser.add_argument("--model", default="smollm2-135m", help="model preselected in the forms")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: localhost only)")
    parser.add_argument("--runs", default="runs", help="run store folder")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Launch the dashboard; blocks until interrupted."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    warm_up()
    demo = build_app(default_model=args.model, runs_dir=args.runs)
    demo.queue(default_concurrency_limit=4)
    demo.launch(server_name=args.host, server_port=args.port, css=CSS, head=HEAD, footer_links=[])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
