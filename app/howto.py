""""How to read this": a short explanation beside every plot of the dashboard (no torch, no Gradio at import).

One text per kind of plot (:class:`Plot`): what the axes are, what good looks like, and what the
methods do differently. :func:`accordions` lays them out as collapsed accordions in a row under a
row of plots, one under each. What a particular run shows (a jump of the layer error, whether
FISTAPruner's ℓ1 term engaged) is not written here: :mod:`toolkit.teach.insights` computes it from the
run's events, and the Lesson tab prints it under these texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from toolkit.events import Event, LambdaStep, LayerDone
from toolkit.teach.insights import describe_lambda, describe_layer_jumps, lambda_summary

TITLE = "How to read this"


class Plot(str, Enum):
    """Every kind of plot the dashboard draws (the key of its explanation)."""

    HEATMAP = "heatmap"
    LAYERS = "layers"
    CONVERGENCE = "convergence"
    LAMBDA = "lambda"
    SWEEP = "sweep"
    ACCURACY = "accuracy"
    BITS = "bits"
    MASKS = "masks"
    TILE = "tile"
    DIFFERENCE = "difference"
    OVERLAP = "overlap"
    HISTOGRAMS = "histograms"
    ALL_LINEARS = "all_linears"
    RANKING = "ranking"
    KEPT = "kept"
    DEPTH = "depth"
    PERPLEXITY = "perplexity"
    RECOVERY = "recovery"
    ALLOCATION = "allocation"
    REFINE = "refine"
    FRONTIER = "frontier"


TEXTS: dict[Plot, str] = {
    Plot.HEATMAP: (
        "**Axes**: rows are decoder layers (0 at the top), columns the linears of a layer in the order they are "
        "pruned (q, k, v, o, gate, up, down). **Colour**: the relative reconstruction error ‖ΔW·X‖/‖W·X‖ of that "
        "linear on its calibration inputs, log scale with fixed bounds 10⁻⁴…1, so two runs can be compared by eye.\n\n"
        "**Good** is dark (small error) everywhere. **Methods**: magnitude ignores the inputs, so linears fed by "
        "a few large input features (often v, up, down) come out bright; Wanda weighs |W| by the input norms "
        "‖X_j‖ and is darker there; SparseGPT also updates the kept weights (an OBS solve with the Hessian XXᵀ), "
        "and FISTAPruner refines that solution further, so they are the darkest."),
    Plot.LAYERS: (
        "**Axes**: decoder layer (x) against the layer's output error ‖f̂(x) − f(x)‖/‖f(x)‖ (y): the pruned "
        "layer's output compared with the dense layer's on the same inputs.\n\n"
        "**Good** is low and flat. A sudden drop or rise between two layers that every method shows is the "
        "model's doing, not the method's: the error is relative to the layer's output, and where the residual "
        "stream becomes much larger the same absolute damage is a much smaller fraction of it. Compare methods "
        "by the height of the curve, not by its shape."),
    Plot.CONVERGENCE: (
        "**Axes**: iteration (x) against the solver's objective (y, log when positive), for the linear being "
        "solved; marker colour is FISTAPruner's outer round. For Thanos, bars of the error each column block "
        "added; for a structured run, the Newton steps of each layer.\n\n"
        "**Good**: the objective ½‖W*X* − WX‖² + λ‖W*‖₁ falls within each round and the rounds start lower and "
        "lower. A jump at the start of a round is λ changing, not divergence. For ALPS the objective is the relative "
        "error ‖(Ŵ − W)X‖/‖WX‖ of the ADMM iterate projected to the target (colour 0), then of the conjugate-gradient "
        "refinement on the fixed support (colour 1). For AWP it is the relative error of the projected iterate, "
        "√(tr(ΔW C ΔWᵀ)/tr(W C Wᵀ)); the title's second line gives ‖C‖_F/‖C‖₂ (how far the paper's step sits "
        "below 1/‖C‖₂) and, for a run started at GPTQ's solution (quant_init=gptq), RTN's objective on the same "
        "C, drawn dashed: the gap between the dashed line and the dots is what the GPTQ start bought. "
        "Magnitude, Wanda and SparseGPT have no iterative solver, so "
        "this panel stays hidden for them."),
    Plot.LAMBDA: (
        "**FISTAPruner's λ bisection**, one linear, x = outer round. Top: λ between its bounds [λ_low, λ_high] "
        "(log). Middle: E_round/E_total, the share of the error that rounding to the target sparsity caused, "
        "against the threshold ξ (0.3): above ξ the bisection raises λ to make FISTA's solution sparser before "
        "rounding; below it, λ goes down to favour a small output error. Bottom: the fraction of weights already "
        "zero before rounding (0…100%).\n\n"
        "**Read it as**: if the middle panel stays under ξ, the ℓ1 term never had to do the pruning: FISTA "
        "refined the warm start (SparseGPT by default) as a least-squares solve and the magnitude rounding chose "
        "the mask. Filled markers are rounds that improved the best error.\n\n"
        "**For ALPS** this panel shows its ADMM instead, x = iteration: the penalty ρ (it rises while the support "
        "still moves), the primal ‖Ŵ − D‖ and dual ρ‖ΔD‖ residuals, and the share of kept weights whose support "
        "changed since the last check; ADMM stops when that share reaches (nearly) zero."),
    Plot.SWEEP: (
        "**Axes**: sparsity (x) against perplexity on the evaluation text (y, log); one line per method and "
        "pattern (unstructured, n:m), the dashed line is the dense model.\n\n"
        "**Good** is a line that stays near the dense line to high sparsity. All methods agree at low sparsity; "
        "they separate above ~40%, where magnitude blows up first, Wanda holds longer, and the methods that "
        "update the kept weights (SparseGPT, FISTAPruner, Thanos) hold longest. n:m points sit above the "
        "unstructured point of the same sparsity: the pattern constrains which weights can go."),
    Plot.ACCURACY: (
        "**Axes**: sparsity (x) against the mean zero-shot accuracy over the chosen tasks (y); dashed = dense. "
        "**Good** stays near the dense line. Accuracy moves in steps of 1/examples and chance level is often "
        "25–50%, so small differences at a low task limit are noise; perplexity is the finer measure."),
    Plot.FRONTIER: (
        "**Axes**: decode tokens/s relative to the dense model at batch 1 (x; both timed in the run, so the ratio "
        "holds on a busy machine) against perplexity (y, log); marker area ∝ the bytes of the model as saved "
        "(hollow: an estimate), the dense model at 1×. Only runs of one model and evaluation protocol are drawn.\n\n"
        "**Good** is the lower-right. The dashed step line is the Pareto front: no other output is both better or "
        "equal in perplexity and faster or equal. Removing heads, channels or layers (and INT4 packing) can move "
        "a point right; a model pruned to zeros but stored dense has the dense shapes and no speed of its own."),
    Plot.BITS: (
        "**Quantization**: bits per weight (x, scales and zero points counted) against perplexity (y, log); one "
        "line per method and sparsity. **Good** is the lower-left: fewer bits at little perplexity cost. INT8 "
        "is nearly free; at 4 bits GPTQ/AWQ/AWP (which use the calibration inputs) beat plain rounding (RTN); "
        "at 3 and 2 bits every method degrades and the group size matters."),
    Plot.MASKS: (
        "**Keep-masks** of the same linear from each run: rows are output features, columns input features. "
        "The whole-matrix view shows the kept fraction of each block on a fixed 0…1 colour scale (the outlined "
        "square is the chosen tile); the tile below it is drawn at native resolution, one cell per weight.\n\n"
        "**What differs**: magnitude and FISTAPruner's rounding compare weights over the whole matrix, so whole "
        "rows or columns can end up denser; Wanda ranks per output row by |W|·‖X_j‖, so every row has exactly "
        "the target sparsity and input columns with large activations show as vertical stripes; SparseGPT "
        "picks the mask per block of 128 columns while updating the rest."),
    Plot.TILE: (
        "**One tile at native resolution**: each cell is one weight of the chosen linear (rows output features, "
        "columns input features), dark = kept, for every run; pick the tile's first row and column and its size "
        "above. **Read it as**: vertical stripes are input features a method keeps (Wanda and SparseGPT keep the "
        "columns whose inputs are large); horizontal bands are output rows it treats alike; an even speckle is "
        "a per-weight choice. Whole-matrix pictures average blocks and hide this; the tile does not."),
    Plot.DIFFERENCE: (
        "**Difference of the first two masks** on the chosen tile, in four colours: kept by A only, kept by B "
        "only, kept by both, pruned by both; the legend gives each category's share of the whole linear. "
        "**Read it as**: a uniform speckle of the two 'only' colours means the methods disagree weight by "
        "weight; stripes or bands of one colour mean one method systematically favours some inputs (columns) "
        "or outputs (rows)."),
    Plot.OVERLAP: (
        "**IoU of kept weights** for each pair of runs: |kept by both| / |kept by either|. Two *random* masks of "
        "kept fraction k overlap with IoU k/(2 − k) (1/3 at 50% sparsity): that is chance, not agreement. 1 means "
        "identical masks. Methods built on the same score (FISTAPruner warm-started from SparseGPT) agree far "
        "above chance; magnitude and Wanda agree less, because the input norms reorder weights within a row."),
    Plot.HISTOGRAMS: (
        "**Per-row and per-column sparsity** of each run's mask (counts of rows/columns at each sparsity). "
        "A spike at the target means the method enforces it per row (Wanda); a wide spread means it compares "
        "across the whole matrix (magnitude) or per column block (SparseGPT)."),
    Plot.ALL_LINEARS: (
        "**IoU of kept weights for every linear** of the model (x: layer · linear), one line per pair of runs, "
        "with the chance IoU of two random masks of those kept fractions as a dotted line. Look for "
        "linears where two methods part ways: usually the ones whose inputs have a few very large features, "
        "where calibration-aware scores differ most from |W|."),
    Plot.RANKING: (
        "**Structured removal**: every attention head and MLP channel of the model, sorted by its score (how much "
        "output error removing it would cost); the line η is the threshold. Units left of η are removed. "
        "**Good**: a clear gap at η; a flat curve means many units are equally (un)important."),
    Plot.KEPT: (
        "**Kept units per layer**: rows are decoder layers, columns heads (left) and MLP channels (right); "
        "dark = kept. A global ranking removes unevenly: layers near the input and output usually keep more."),
    Plot.DEPTH: (
        "**Layer scores of a depth run**: one bar per decoder layer of the dense model, its block influence "
        "1 − E[cos(x_in, x_out)] over the calibration tokens (how much the layer turns the residual stream); red bars "
        "are the removed layers. With score=bi the lowest bars go; with score=angular the line (right axis) is the "
        "angular distance between the input of a layer and the output n layers later, and the block at its lowest "
        "point goes. On the embedded SmolLM2-135M the first layer scores highest and layers 12 to 17 lowest. The "
        "hover gives the relative error of skipping the layer alone, on dense inputs; the perplexity says what "
        "removing them together costs."),
    Plot.PERPLEXITY: (
        "**Perplexity** on the evaluation text after pruning (lower is better), one bar per method, the dashed "
        "line the dense model under the same protocol. With the quick protocol (16 windows of 128 tokens) the "
        "numbers are a rough guide, but their order is stable."),
    Plot.RECOVERY: (
        "**Recovery loss**: the causal-LM loss (mean token NLL) of every fine-tuning step on the run's calibration "
        "text (thin), and its mean over 5 steps (bold). The update is a masked LoRA, ΔW = (s·BA) ⊙ M: every weight "
        "the pruning removed stays exactly 0, so the sparsity is unchanged. **Good** is a falling bold line and a "
        "perplexity after (title) below the one before; a flat line means too few steps or a learning rate too "
        "low, a rising or jumping one a learning rate too high. The loss is measured on training windows, the "
        "perplexity on the held-out evaluation text."),
    Plot.ALLOCATION: (
        "**Bars**: the sparsity each decoder layer was pruned to (s_l); the **dashed line** is the run's target S. "
        "A uniform run is a flat row at S. With **OWL** the layers with more outlier weights (Wanda scores above "
        "M × the layer's mean; the **line, right axis**, is that outlier ratio LOD_l) keep more weights, so their "
        "bars are lower, and the others are pruned harder; the weights-weighted mean of the bars is S, so the "
        "model's total sparsity is unchanged (title). A custom ratios table in the form draws its own bars. "
        "**Good** is what lowers the perplexity: compare the result with a uniform run at the same S."),
    Plot.REFINE: (
        "**DSnoT** swaps pruned and kept weights of each row after the method's mask (no training; the sparsity "
        "stays). **Solid lines**: each layer's mean relative error ‖ΔW·X‖/‖W·X‖ of the refined linears with the "
        "method's mask and after the swaps; **dotted**: DSnoT's own objective, the expected error ‖e‖/‖Wμ‖ it "
        "shrinks. **Good** is the refined line below the method's; the objective falls much more than the "
        "measured error, because the swaps only correct the mean of each row's error. Hover a point for each "
        "linear's errors and swaps."),
}


def text(plot: Plot) -> str:
    """The explanation of ``plot`` (markdown)."""
    return TEXTS[plot]


def annotated(plot: Plot, note: str) -> str:
    """The explanation of ``plot``, then what a run's data shows (``note``, from :mod:`toolkit.teach.insights`)."""
    return TEXTS[plot] + (f"\n\n**In this run**: {note}" if note else "")


def run_notes(events: Sequence[Event]) -> dict[Plot, str]:
    """The layer-error and λ explanations annotated with what ``events`` (one run) show."""
    errors = [e.output_rel_error for e in events if isinstance(e, LayerDone)]
    lambdas = [e for e in events if isinstance(e, LambdaStep)]
    return {Plot.LAYERS: annotated(Plot.LAYERS, describe_layer_jumps({"run": errors})),
            Plot.LAMBDA: annotated(Plot.LAMBDA, describe_lambda(lambda_summary(lambdas)))}


def accordion(gr: Any, prefix: str, plot: Plot) -> Any:
    """One collapsed "How to read this" accordion for ``plot``, where it is called (under its plot); returns its text.

    Laid out in the plot's own column, it hides with the plot (element id ``howto-<prefix>-<plot>``).
    """
    with gr.Accordion(TITLE, open=False, elem_classes=["howto"]):
        return gr.Markdown(TEXTS[plot], elem_id=f"howto-{prefix}-{plot.value}")


def accordions(gr: Any, prefix: str, *plots: Plot, extra: dict[Plot, str] | None = None) -> dict[Plot, Any]:
    """A row of collapsed "How to read this" accordions, one per plot, in the order of the plots above them.

    ``prefix`` names the tab (element ids ``howto-<prefix>-<plot>``). Returns each plot's Markdown
    component, so a handler can append what a run's data shows (``extra`` gives initial text to add
    under a plot's explanation).
    """
    shown: dict[Plot, Any] = {}
    with gr.Row(equal_height=False):
        for plot in plots:
            with gr.Column(), gr.Accordion(TITLE, open=False, elem_classes=["howto"]):
                body = TEXTS[plot] + (f"\n\n{extra[plot]}" if extra and plot in extra else "")
                shown[plot] = gr.Markdown(body, elem_id=f"howto-{prefix}-{plot.value}")
    return shown
