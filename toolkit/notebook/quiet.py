"""No progress bars from the Hugging Face libraries in a notebook's outputs.

Loading a model (transformers' "Loading weights") and saving one ("Writing model shards") draw tqdm
bars. In a notebook each bar is a widget whose saved text is the line it showed when it was
created, so a saved notebook keeps "Loading weights: 0%" long after the load finished.
:func:`quiet_progress_bars` turns those bars off for the kernel; the dashboard's own progress line
says what is loading. It never imports transformers or torch (CONTRIBUTING.md R7).
"""

from __future__ import annotations

import os
import sys

HUB_SWITCH = "HF_HUB_DISABLE_PROGRESS_BARS"  # huggingface_hub reads it when first imported


def quiet_progress_bars() -> None:
    """Turn off huggingface_hub's and transformers' progress bars in this process (idempotent).

    transformers takes its setting from huggingface_hub when it is imported; when it already is,
    its own switch is turned off too.
    """
    os.environ[HUB_SWITCH] = "1"
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    transformers = sys.modules.get("transformers")
    if transformers is not None:  # imported before this call: its bars were switched on at import
        transformers.utils.logging.disable_progress_bar()
