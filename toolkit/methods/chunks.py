"""Row chunks: the one rule by which full-size passes over a weight go a block of rows at a time.

A pass over an (out, in) weight that needs temporaries of its own size (a ``kthvalue`` copy and its int64
indices, Wanda's scores, a quantization grid, a finiteness check) runs over ranges of rows of about
:data:`ROW_CHUNK_ELEMENTS` entries instead, so its temporaries stay at 16 MiB of float32 whatever the layer.
Only passes whose rows are independent chunk: the result is exactly the unchunked one.
"""

from __future__ import annotations

ROW_CHUNK_ELEMENTS = 1 << 22  # entries per row chunk (16 MiB of float32 temporaries)


def row_chunks(rows: int, columns: int) -> list[slice]:
    """Row ranges of about :data:`ROW_CHUNK_ELEMENTS` entries (at least one row each) covering ``rows`` rows.

    Always at least one range, ``slice(0, 0)`` for no rows.
    """
    step = max(1, ROW_CHUNK_ELEMENTS // max(columns, 1))
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)] or [slice(0, rows)]
