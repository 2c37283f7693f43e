"""No progress bars from the Hugging Face libraries in a notebook's outputs.

Loading a model (transformers' "Loading weights"), saving one ("Writing model shards") and packing
a quantized one (compressed-tensors' "Compressing model") draw tqdm bars. In a notebook each bar
is a widget whose saved text is the line it showed when it was created, so a saved notebook keeps
"Loading weights: 0%" long after the load finished. :func:`quiet_progress_bars` turns those bars
off for the kernel; the dashboard's own progress line says what is loading. tqdm reads
``TQDM_DISABLE`` when it is first imported, so bars of libraries that call tqdm directly stay off
only when the call comes before that import (the notebooks make it in their first cell);
otherwise a warning says so. It never imports transformers or torch (CONTRIBUTING.md R7).
"""

from __future__ import annotations

import logging
import os
import sys

HUB_SWITCH = "HF_HUB_DISABLE_PROGRESS_BARS"  # huggingface_hub reads it when first imported
TQDM_SWITCH = "TQDM_DISABLE"  # tqdm's default for disable=, read when tqdm is first imported
log = logging.getLogger(__name__)


def quiet_progress_bars() -> None:
    """Turn off tqdm's, huggingface_hub's and transformers' progress bars in this process (idempotent).

    transformers takes its setting from huggingface_hub when it is imported; when it already is,
    its own switch is turned off too.
    """
    if "tqdm" in sys.modules and not os.environ.get(TQDM_SWITCH):
        log.warning("tqdm was imported before quiet_progress_bars(): bars of libraries that call it directly "
                    "(compressed-tensors' 'Compressing model') stay; call it first in the notebook")
    os.environ[TQDM_SWITCH] = "1"
    os.environ[HUB_SWITCH] = "1"
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    transformers = sys.modules.get("transformers")
    if transformers is not None:  # imported before this call: its bars were switched on at import
        transformers.utils.logging.disable_progress_bar()
