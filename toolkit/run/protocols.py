"""The named protocols (calibration and perplexity sizes): one definition for the CLI's ``--protocol`` and the app.

``quick`` is the app's default preset and the Lesson's protocol: a preview in minutes whose
perplexities are not comparable with docs/results.md. ``cpu`` is the CPU protocol every table of
docs/results.md uses (and :class:`~toolkit.run.config.RunConfig`'s defaults). ``paper`` is the seed
papers' 128 × 2048. Calibration draws ``nsamples`` windows of ``seqlen`` tokens; perplexity is scored
on the first ``eval_windows`` windows of ``eval_seqlen`` tokens of the test split (None: every window).
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.errors import ToolkitError


@dataclass(frozen=True)
class Protocol:
    """One named protocol: calibration windows × tokens, evaluation window length and count (None: all)."""

    name: str  # the value of --protocol
    title: str  # how the app's preset list names it
    nsamples: int
    seqlen: int
    eval_seqlen: int
    eval_windows: int | None

    @property
    def sizes(self) -> str:
        """``16 × 128, 16 eval windows`` (the app's preset label after the title)."""
        windows = "all windows" if self.eval_windows is None else f"{self.eval_windows} eval windows"
        return f"{self.nsamples} × {self.seqlen}, {windows}"

    @property
    def label(self) -> str:
        """The app's preset label, e.g. ``quick (16 × 128, 16 eval windows)``."""
        return f"{self.title} ({self.sizes})"


# quick: 16 × 128 = 2048 calibration tokens, at least the widest linear input of the embedded model (down_proj's
# 1536): with fewer tokens than inputs, G* is rank-deficient and the reconstruction methods (SparseGPT, Thanos,
# FISTAPruner) fit the calibration windows instead of the text (benchmarks/bench_preset_ranking.py).
QUICK = Protocol("quick", "quick", nsamples=16, seqlen=128, eval_seqlen=128, eval_windows=16)
CPU = Protocol("cpu", "CPU default", nsamples=32, seqlen=512, eval_seqlen=512, eval_windows=None)
PAPER = Protocol("paper", "paper", nsamples=128, seqlen=2048, eval_seqlen=2048, eval_windows=None)
# class: the Lesson's protocol (toolkit/teach/lesson.py), four methods in about 4 minutes of CPU work (one thread,
# benchmarks/results/cpu_lesson_class.jsonl): the quick preset's 16 × 128 calibration tokens (≥ down_proj's 1536
# inputs), half its evaluation windows.
CLASS = Protocol("class", "class", nsamples=16, seqlen=128, eval_seqlen=128, eval_windows=8)
PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (QUICK, CPU, PAPER)}  # the app lists them in this order
DEFAULT_PROTOCOL = CPU.name  # the CLI's default: the protocol of docs/results.md

# Wall minutes of `make cli-demo`'s job (smollm2-135m, Wanda 50%, dense and pruned perplexity, nothing cached)
# on this project's 2-core CPU shared with other jobs. quick: `time make cli-demo`, 4.8 min at load average 5-7,
# 6.5 min at 9-12 and 7.7 min at 12-13 (2.4 min of CPU time each). cpu: the same job with --eval-windows 16 took
# 607 s at load 8-9 (pruning 295 s, 7.4 s a dense and 6.6 s a pruned window of 512 tokens); the other 194
# windows of each pass at those paces make 55 min. quick at 16 × 128 (twice the calibration of the figures above):
# 705 s (11.8 min) at load average 20-28 with one thread (PRUNELAB_THREADS=1) and the dense perplexity cached;
# benchmarks/results/quick_ranking.jsonl's Wanda record of the same job used 23 s of process CPU time.
DEMO_MINUTES = {"quick": 12, "cpu": 55}


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``; a :class:`ToolkitError` naming the known ones otherwise."""
    if name not in PROTOCOLS:
        raise ToolkitError(f"unknown protocol {name!r}: use one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]
