"""The page's words for the command line's: a message from the toolkit, as the dashboard shows it.

The toolkit's :class:`~toolkit.errors.ToolkitError` messages name command-line flags (``--save-model``,
``--refine dsnot``, ``--sparsity is 0.5000``) because the CLI is where most of them are read. On the
page the same message names the control the user changes instead (``"Save the pruned checkpoint"``):
:func:`page_words` rewrites a message with the one mapping :data:`FLAG_WORDS` (longest flag first,
a flag only as a whole word) after the few phrases of :data:`PHRASES` whose grammar changes with it.
Flags the page has no control for are left as they are. Pure text, no Gradio.
"""

from __future__ import annotations

import re

SAVE = '"Save the pruned checkpoint"'
FLAG_WORDS: dict[str, str] = {  # flag (with its value where the value has a control of its own) → the control
    "--save-model": SAVE,
    "--sparsity": '"Sparsity (%)"',
    "--quant": '"Quantization"',
    "--unit": '"Unit removed"',
    "--permute": '"Permute inputs (n:m)"',
    "--refine dsnot": '"Mask refinement: DSnoT"',
    "--refine": '"Mask refinement"',
    "--allocation owl": '"Layer allocation: OWL"',
    "--allocation": '"Layer allocation"',
    "--nsamples": '"nsamples"',
    "--seqlen": '"seqlen"',
    "--eval-seqlen": '"eval seqlen"',
    "--eval-windows": '"eval windows"',
    "--windows": '"eval windows"',
    "--device": '"Device"',
    "--devices": '"Device"',
    "--set": '"Extra options"',
    "--tasks": '"Zero-shot tasks"',
    "--task-limit": '"examples per task"',
    "--model": '"Model"',
    "--out": "the run store folder",
}
PHRASES: tuple[tuple[str, str], ...] = (  # whole phrases first: their verb changes with the control
    ("rerun with --save-model", f"run again with {SAVE} ticked"),
    ("re-run prune with --save-model", f"run again with {SAVE} ticked"),
    ("drop --save-model", f"untick {SAVE}"),
    ("drop --permute", 'untick "Permute inputs (n:m)"'),
    ("without --save-model", f"without {SAVE}"),
)
_FLAGS = re.compile("|".join(re.escape(flag) for flag in sorted(FLAG_WORDS, key=len, reverse=True))
                    + r"(?![\w-])")
_SPARSITY_FRACTION = re.compile(r"--sparsity is (\d+(?:\.\d+)?)")  # the CLI's fraction, the page's percent


def page_words(message: str) -> str:
    """``message`` with the command-line flags it names replaced by the page's controls (see the module docstring)."""
    for phrase, words in PHRASES:
        message = message.replace(phrase, words)
    message = _SPARSITY_FRACTION.sub(lambda m: f'"Sparsity (%)" is {float(m.group(1)) * 100:g} %', message)
    return _FLAGS.sub(lambda m: FLAG_WORDS[m.group(0)], message)
