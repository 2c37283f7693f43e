"""What a recovered model costs: result.json's ``bought`` section, built as a prune run builds it.

The recovery keeps the parent's shapes and format, so its record is the parent's accounting
(``params_before`` / ``params_after``) with the kept weights counted on the recovered weights, and
:func:`toolkit.run.bought.bought` does the rest: ``stored_as`` (``"shrunk"`` when the parent removed
heads, channels or layers, else ``"dense"``: masks stored as zeros), ``bytes_stored`` measured on the
recovery's saved checkpoint. The speed follows the prune run's rule (:func:`toolkit.run.bought.dense_price`):
measured only for a shrunk model, the dense source and the recovered model timed in this process on
the recovery's device with the same prompt (the first tokens of the first training window, the
parent's first calibration window). The dense source is the teacher of ``--loss kd | kd+lm``, else
the parent's source model loaded for the timing and released after it; a source that cannot be
found leaves ``speed`` None and says why in a warning. ``bytes_dense`` is the parent's own record,
else counted on the source (or on the recovered model when it kept the source's shapes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from torch import nn

from toolkit.errors import ToolkitError
from toolkit.models.load import load_model
from toolkit.models.sources import check_model_source
from toolkit.run.accounting import Accounting, dense_bytes
from toolkit.run.bought import DensePrice, Progress, bought, dense_price, measures_speed
from toolkit.run.recover_train import Prepared


def recovery_bought(run: Prepared, accounting: dict[str, Any], checkpoint: dict[str, Any] | None,
                    progress: Callable[[str], Progress], warn: Callable[[str], None]) -> dict[str, Any] | None:
    """The ``bought`` record of the recovered ``run.loaded.model`` (module docstring).

    ``accounting``: the recovery's result.json ``accounting`` (the parent's, kept weights recounted);
    ``checkpoint``: the saved checkpoint's report; ``progress(stage)``: the tick of a timing stage
    (``"dense speed"``, ``"recovered speed"``); ``warn``: a line for a speed that cannot be measured.
    None when the dense source's bytes are known nowhere (an older shrunk parent whose source is gone).
    """
    counts = _accounting(accounting, run.loaded.model)
    price = _price(run, counts, progress("dense speed"), warn)
    if price is None:
        return None
    tick = progress("recovered speed") if measures_speed(price) else None
    if tick is not None:
        tick(0, 1)
    found = bought(price, run.loaded.model, run.device, counts, checkpoint, quantized=False)
    if tick is not None:
        tick(1, 1)
    return found


def _accounting(record: dict[str, Any], model: nn.Module) -> Accounting:
    """The :class:`Accounting` :func:`bought` reads, from the recovery's ``accounting`` dict."""
    before, after = int(record["params_before"]), int(record["params_after"])
    kept = int(record["nonzeros_kept"])
    estimated = record.get("estimated_bytes")
    return Accounting(params_before=before, params_after=after, nonzeros_kept=kept,
                      sparsity=1.0 - kept / max(before, 1),
                      bits_per_weight=float(record.get("bits_per_weight") or math.nan),
                      estimated_bytes=int(estimated) if isinstance(estimated, int) else dense_bytes(model),
                      checkpoint_bytes=record.get("checkpoint_bytes"))


def _price(run: Prepared, counts: Accounting, tick: Progress, warn: Callable[[str], None]) -> DensePrice | None:
    """The dense source's price: timed (shrunk model) on the teacher or the loaded source; else its bytes."""
    recorded = ((run.parent.record.result or {}).get("bought") or {}).get("bytes_dense")
    shrunk = counts.params_after < counts.params_before
    if not shrunk:  # the source's shapes: its dense bytes are the recovered model's
        return DensePrice(int(recorded) if isinstance(recorded, int) else dense_bytes(run.loaded.model))
    source = run.teacher if run.teacher is not None else _source(run, warn)
    if source is None:
        return DensePrice(int(recorded)) if isinstance(recorded, int) else None
    price = dense_price(source, run.device, run.train_windows[0], shrinks=True, progress=tick)
    return price if not isinstance(recorded, int) else DensePrice(int(recorded), price.tokens_per_s, price.prompt,
                                                                  price.by_batch)


def _source(run: Prepared, warn: Callable[[str], None]) -> nn.Module | None:
    """The parent's source model, loaded to time it (None, with a warning, when it cannot be found here)."""
    name = str(run.parent.config.get("model") or "")
    try:
        check_model_source(name)
        return load_model(name).model
    except (ToolkitError, OSError) as exc:
        warn(f"decode speed not measured: the parent's source model {name!r} cannot be loaded here ({exc}); "
             f"`python -m toolkit measure DIR --baseline SOURCE` times the recovered model against it")
        return None
