r"""Text from a folder written by ``datasets.save_to_disk`` (a Dataset or a DatasetDict), column ``text``.

A DatasetDict gives its ``train`` split for calibration and its ``test`` (else ``validation``) split
for evaluation; a single Dataset is used for both, like a text file. Rows are joined with "\n\n",
as the hub sources are.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import ToolkitError

COLUMN = "text"
SPLITS = {"train": ("train",), "test": ("test", "validation")}


def is_saved_dataset(path: Path) -> bool:
    """True when ``path`` is a folder written by ``save_to_disk`` (``state.json`` or ``dataset_dict.json``)."""
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def saved_dataset_text(path: Path, split: str) -> str:
    """The ``text`` column of the ``split`` rows of the saved dataset at ``path``, joined with blank lines.

    Raises :class:`ToolkitError` when ``datasets`` is missing, the split is absent or the column is not there.
    """
    try:
        import datasets
    except ImportError:
        raise ToolkitError(f"the dataset folder {str(path)!r} needs `pip install datasets`") from None
    if (path / "dataset_dict.json").is_file():
        names = [p.name for p in sorted(path.iterdir()) if (p / "state.json").is_file()]
        chosen = next((name for name in SPLITS[split] if name in names), None)
        if chosen is None:
            raise ToolkitError(f"the dataset folder {str(path)!r} has splits {', '.join(names) or 'none'}; "
                               f"the {split} text needs a split named {' or '.join(SPLITS[split])}")
        path = path / chosen
    table = datasets.Dataset.load_from_disk(str(path))
    if COLUMN not in table.column_names:
        raise ToolkitError(f"the dataset folder {str(path)!r} has columns {', '.join(table.column_names)}; "
                           f"it needs a string column named {COLUMN!r}")
    return "\n\n".join(str(row) for row in table[COLUMN] if row)
