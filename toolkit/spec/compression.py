"""The compression spec, parsed once at the edge (CLI, app form, API) and passed down as objects.

``Compression(sparsity, quant, unit)`` says what a run asks for:

- ``sparsity``: a :data:`toolkit.spec.targets.Target` (``50%``, ``2:4``, ``structured:30%``) or None;
- ``quant``: a :class:`QuantSpec` (``int4``, ``int3:g64``, ``int8:g0`` = one group per row) or None;
- ``unit``: a :class:`Unit` (``heads``, ``channels``, ``heads+channels``) for block-scope methods
  that remove whole structural units, or None.

Nothing downstream re-parses strings or guesses the kind of a target from its text: every kind
knows its ``kind`` (a stable word for tables and figures) and its ``label`` (the text a user typed,
normalised). A new pattern kind touches this module (and :mod:`toolkit.spec.targets` for targets), the
methods that support it and the form.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.spec.targets import NM, Structured, Target, Unstructured, parse_sparsity

QUANT_BITS = (2, 3, 4, 8)
DEFAULT_GROUP_SIZE = 128


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """Weight-only integer quantization: ``bits`` per weight, one scale/zero per ``group_size`` inputs.

    ``group_size = 0`` means one group per output row (per-channel). ``symmetric = False`` (the
    default, AWQ's and GPTQ's) uses an asymmetric min-max grid with an integer zero point.
    """

    bits: int
    group_size: int = DEFAULT_GROUP_SIZE
    symmetric: bool = False

    def __post_init__(self) -> None:
        if self.bits not in QUANT_BITS:
            raise ToolkitError(f"quantization to {self.bits} bits is not supported: use int2, int3, int4 or int8")
        if self.group_size < 0:
            raise ToolkitError(f"group size {self.group_size} must be ≥ 0 (0 = one group per row), e.g. int4:g128")

    @property
    def levels(self) -> int:
        """Number of grid points, 2**bits."""
        return 2**self.bits

    @property
    def label(self) -> str:
        """``int4:g128`` (``:sym`` appended when symmetric)."""
        return f"int{self.bits}:g{self.group_size}" + (":sym" if self.symmetric else "")

    @property
    def kind(self) -> str:
        """``quant``."""
        return "quant"

    def __str__(self) -> str:
        return self.label


class Unit(enum.Enum):
    """Structural units a block-scope method may remove."""

    HEADS = "heads"
    CHANNELS = "channels"
    HEADS_CHANNELS = "heads+channels"

    @property
    def removes_heads(self) -> bool:
        """True when attention heads are candidates."""
        return self in (Unit.HEADS, Unit.HEADS_CHANNELS)

    @property
    def removes_channels(self) -> bool:
        """True when MLP intermediate channels are candidates."""
        return self in (Unit.CHANNELS, Unit.HEADS_CHANNELS)


TARGET_KINDS: dict[type, str] = {Unstructured: "unstructured", NM: "nm", Structured: "structured"}


def target_kind(target: Target) -> str:
    """``unstructured`` | ``nm`` | ``structured``: the stable word tables and figures group by."""
    return TARGET_KINDS[type(target)]


def target_to_dict(target: Target) -> dict[str, Any]:
    """Plain data of a target: ``kind``, ``label``, ``fraction`` and its own fields (``n``, ``m`` or ``sparsity``)."""
    own = {"n": target.n, "m": target.m} if isinstance(target, NM) else {"sparsity": target.sparsity}
    return {"kind": target_kind(target), "label": str(target), "fraction": target.fraction, **own}


def target_from_dict(data: dict[str, Any]) -> Target:
    """The target :func:`target_to_dict` wrote (by its ``kind``, never by parsing the label)."""
    kind = data.get("kind")
    if kind == "nm":
        return NM(int(data["n"]), int(data["m"]))
    if kind == "structured":
        return Structured(float(data["sparsity"]))
    if kind == "unstructured":
        return Unstructured(float(data["sparsity"]))
    raise ToolkitError(f"unknown sparsity kind {kind!r} in a stored compression spec")


@dataclass(frozen=True, slots=True)
class Compression:
    """What one run asks for: a sparsity target, a quantization grid, a structural unit (any may be None)."""

    sparsity: Target | None = None
    quant: QuantSpec | None = None
    unit: Unit | None = None

    def __post_init__(self) -> None:
        if self.sparsity is None and self.quant is None:
            raise ToolkitError("nothing to do: give --sparsity (e.g. 50%) and/or --quant (e.g. int4)")
        if self.unit is not None and not isinstance(self.sparsity, Structured):
            raise ToolkitError(f"--unit {self.unit.value} needs a structured ratio, e.g. --sparsity structured:30%")

    @property
    def kind(self) -> str:
        """``unstructured`` | ``nm`` | ``structured`` | ``quant`` | ``<sparsity kind>+quant``."""
        parts = [] if self.sparsity is None else [target_kind(self.sparsity)]
        return "+".join(parts + (["quant"] if self.quant is not None else []))

    @property
    def label(self) -> str:
        """The spec as a user would type it: ``50%``, ``2:4+int4:g128``, ``structured:30%@heads``."""
        parts = [] if self.sparsity is None else [str(self.sparsity)]
        if self.quant is not None:
            parts.append(self.quant.label)
        text = "+".join(parts)
        return f"{text}@{self.unit.value}" if self.unit is not None else text

    @property
    def sparsity_fraction(self) -> float:
        """Expected fraction of zeros asked for (0 when only quantizing)."""
        return 0.0 if self.sparsity is None else self.sparsity.fraction

    def __str__(self) -> str:
        return self.label

    def to_dict(self) -> dict[str, Any]:
        """Plain data (config.json ``compression``): ``label``, ``kind`` and each part as fields."""
        quant = self.quant
        return {
            "label": self.label, "kind": self.kind,
            "sparsity": None if self.sparsity is None else target_to_dict(self.sparsity),
            "quant": None if quant is None else {"label": quant.label, "bits": quant.bits,
                                                 "group_size": quant.group_size, "symmetric": quant.symmetric},
            "unit": None if self.unit is None else self.unit.value,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Compression:
        """The spec :meth:`to_dict` wrote (fields read by name; no string is parsed)."""
        sparsity, quant, unit = data.get("sparsity"), data.get("quant"), data.get("unit")
        return cls(
            sparsity=None if sparsity is None else target_from_dict(sparsity),
            quant=None if quant is None else QuantSpec(int(quant["bits"]), int(quant["group_size"]),
                                                       bool(quant["symmetric"])),
            unit=None if unit is None else Unit(unit),
        )


def as_compression(value: Compression | Target) -> Compression:
    """A :class:`Compression` from itself or from a bare sparsity target (the prune-only case)."""
    return value if isinstance(value, Compression) else Compression(sparsity=value)


def parse_quant(text: str | QuantSpec | None) -> QuantSpec | None:
    """Parse ``int4``, ``int3:g64``, ``int4:g128:sym``, ``4`` into a :class:`QuantSpec` (None/"" → None).

    >>> parse_quant("int4"), parse_quant("int2:g64:sym")
    (QuantSpec(bits=4, group_size=128, symmetric=False), QuantSpec(bits=2, group_size=64, symmetric=True))
    """
    if text is None or isinstance(text, QuantSpec):
        return text
    raw = str(text).strip().lower()
    if raw in ("", "none", "off"):
        return None
    head, *rest = raw.split(":")
    bits_text = head.removeprefix("int").removeprefix("w")
    if not bits_text.isdigit():
        raise ToolkitError(f"cannot read quantization {text!r}: use int4, int3, int2 or int8, e.g. int4:g128")
    group, symmetric = DEFAULT_GROUP_SIZE, False
    for part in rest:
        if part.startswith("g") and part[1:].isdigit():
            group = int(part[1:])
        elif part in ("sym", "asym"):
            symmetric = part == "sym"
        else:
            raise ToolkitError(f"cannot read {part!r} in quantization {text!r}: use e.g. int4:g128 or int4:g128:sym")
    return QuantSpec(bits=int(bits_text), group_size=group, symmetric=symmetric)


def parse_unit(text: str | Unit | None) -> Unit | None:
    """``heads`` | ``channels`` | ``heads+channels`` (None/"" → None)."""
    if text is None or isinstance(text, Unit):
        return text
    raw = str(text).strip().lower().replace(" ", "")
    if raw in ("", "none"):
        return None
    aliases = {"channels+heads": "heads+channels", "both": "heads+channels"}
    try:
        return Unit(aliases.get(raw, raw))
    except ValueError:
        raise ToolkitError(f"unknown unit {text!r}: use heads, channels or heads+channels") from None


def parse_compression(
    sparsity: str | float | Target | None = "50%", quant: str | QuantSpec | None = None, unit: str | Unit | None = None
) -> Compression:
    """One :class:`Compression` from the user's three fields (strings at the edge, objects below).

    >>> parse_compression("2:4", "int4").label
    '2:4+int4:g128'
    """
    target = None if sparsity in (None, "", "none") else parse_sparsity(sparsity)  # type: ignore[arg-type]
    return Compression(sparsity=target, quant=parse_quant(quant), unit=parse_unit(unit))
