"""The compression spec, parsed once at the edge (CLI, app form, API) and passed down as objects.

``Compression(sparsity, quant, unit)`` says what a run asks for:

- ``sparsity``: a :data:`toolkit.spec.targets.Target` (``50%``, ``2:4``, ``structured:30%``) or None;
- ``quant``: a :class:`QuantSpec` (``int3:g64``, ``int8:g0`` = one group per row; ``int4`` without a
  group runs groups of 128 inputs, or of 64, 32, … where 128 does not divide the model's widths) or None;
- ``unit``: a :class:`Unit` (``heads``, ``channels``, ``heads+channels``, ``layers``) for block-scope
  methods that remove whole structural units, or None;
- ``permute``: n:m only: each linear's inputs are permuted before its solve so that the important
  ones spread over the m-groups (``--permute``, toolkit/methods/permute.py); label ``2:4+perm``.

Nothing downstream re-parses strings or guesses the kind of a target from its text: every kind
knows its ``kind`` (a stable word for tables and figures) and its ``label`` (the text a user typed,
normalised). A new pattern kind touches this module (and :mod:`toolkit.spec.targets` for targets), the
methods that support it and the form.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.spec.targets import NM, Structured, Target, Unstructured, parse_sparsity

QUANT_BITS = (2, 3, 4, 8)
DEFAULT_GROUP_SIZE = 128


MIN_AUTO_GROUP = 32  # the smallest group a spec without one is fitted to; below it, one group per row


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """Weight-only integer quantization: ``bits`` per weight, one scale/zero per ``group_size`` inputs.

    ``group_size = 0`` means one group per output row (per-channel). ``symmetric = False`` (the
    default, AWQ's and GPTQ's) uses an asymmetric min-max grid with an integer zero point.
    ``auto_group = True`` marks a spec given without a group (``int4``): a run fits ``group_size``
    (at most) to the model's input widths once the model is loaded (:meth:`fit_group`); until then, and
    wherever nothing fits it (a single linear in the Layer lab), it is ``group_size`` like a given one.
    """

    bits: int
    group_size: int = DEFAULT_GROUP_SIZE
    symmetric: bool = False
    auto_group: bool = False

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
        """``int4:g128`` (``:sym`` appended when symmetric): the group that runs, given or fitted."""
        return f"int{self.bits}:g{self.group_size}" + (":sym" if self.symmetric else "")

    @property
    def asked(self) -> str:
        """The spec as given: ``int4`` (``int4:sym``) when the run picks the group, else :attr:`label`."""
        return f"int{self.bits}" + (":sym" if self.symmetric else "") if self.auto_group else self.label

    def fit_group(self, widths: Iterable[int]) -> QuantSpec:
        """The spec a model whose quantized linears have these input ``widths`` runs with.

        A given group (``auto_group`` False) or per-row groups (``group_size`` 0) are returned as they
        are. Otherwise the first of ``group_size``, half of it, a quarter, … (128, 64, 32, …: the sizes
        quantized kernels take) that every width is a whole number of groups of (``width % g == 0``, or
        ``width ≤ g``: one group holds the row), so every group has g inputs and the checkpoint can be
        saved: 128 for 4096/11008-wide inputs, 64 for 576/1536 (SmolLM2-135M). Below
        :data:`MIN_AUTO_GROUP` the scales would cost more than the codes save (a shrunk model's
        per-layer widths such as 1010–1125 share no such divisor), so one group per row (g0) is chosen.
        """
        if not self.auto_group or self.group_size == 0:
            return self
        sizes, group = set(widths), self.group_size
        while group >= MIN_AUTO_GROUP and not all(w % group == 0 or w <= group for w in sizes):
            group //= 2
        return dataclasses.replace(self, group_size=group if group >= MIN_AUTO_GROUP else 0)

    def fit_note(self, fitted: QuantSpec, widths: Iterable[int]) -> str:
        """One line saying why ``fitted`` (from :meth:`fit_group`) has a smaller group; "" when it has not."""
        if fitted.group_size == self.group_size:
            return ""
        odd = sorted({w for w in widths if w > self.group_size and w % self.group_size})
        inputs = f"the {', '.join(str(w) for w in odd)}-wide inputs" if len(odd) <= 4 else \
            f"the inputs of {len(odd)} widths ({', '.join(str(w) for w in odd[:4])}, …)"
        given = QuantSpec(self.bits, self.group_size, self.symmetric).label
        chosen = "one group per row (g0)" if fitted.group_size == 0 else f"group {fitted.group_size}"
        return (f"{self.asked}: {chosen} chosen, {self.group_size} does not divide {inputs} (give {given} to keep "
                f"{self.group_size}: each row's last group is then narrower and the "
                "checkpoint cannot be saved)")

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
    LAYERS = "layers"  # whole decoder layers (depth pruning)

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
    if isinstance(target, Structured) and target.layers:
        own["layers"] = target.layers
    return {"kind": target_kind(target), "label": str(target), "fraction": target.fraction, **own}


def target_from_dict(data: dict[str, Any]) -> Target:
    """The target :func:`target_to_dict` wrote (by its ``kind``, never by parsing the label)."""
    kind = data.get("kind")
    if kind == "nm":
        return NM(int(data["n"]), int(data["m"]))
    if kind == "structured":
        return Structured(float(data["sparsity"]), int(data.get("layers", 0)))
    if kind == "unstructured":
        return Unstructured(float(data["sparsity"]))
    raise ToolkitError(f"unknown sparsity kind {kind!r} in a stored compression spec")


@dataclass(frozen=True, slots=True)
class Compression:
    """What one run asks for: a sparsity target, a quantization grid, a structural unit (any may be None).

    ``permute`` (n:m without quantization only): the inputs of each linear are permuted for the solve.
    """

    sparsity: Target | None = None
    quant: QuantSpec | None = None
    unit: Unit | None = None
    permute: bool = False

    def __post_init__(self) -> None:
        if self.sparsity is None and self.quant is None:
            raise ToolkitError("nothing to do: give --sparsity (e.g. 50%) and/or --quant (e.g. int4)")
        if self.unit is not None and not isinstance(self.sparsity, Structured):
            raise ToolkitError(f"--unit {self.unit.value} needs a structured ratio, e.g. --sparsity structured:30%")
        if self.permute and not isinstance(self.sparsity, NM):
            raise ToolkitError(f"--permute spreads the important inputs over the groups of n:m sparsity; "
                               f"{self.sparsity or 'quantizing only'} has none: give --sparsity 2:4 or drop --permute")
        if self.permute and self.quant is not None:
            raise ToolkitError("--permute reorders the inputs, and the groups of a quantization grid would follow "
                               "the permuted order: drop --quant or --permute")
        if isinstance(self.sparsity, Structured) and self.sparsity.layers and self.unit not in (None, Unit.LAYERS):
            raise ToolkitError(f"{self.sparsity} counts whole decoder layers: use --unit layers (--method depth), "
                               f"or a ratio such as structured:30% for --unit {self.unit.value}")

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
        text = "+".join(parts + (["perm"] if self.permute else []))
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
            "quant": None if quant is None else _quant_dict(quant),
            "unit": None if self.unit is None else self.unit.value,
        } | ({"permute": True} if self.permute else {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Compression:
        """The spec :meth:`to_dict` wrote (fields read by name; no string is parsed)."""
        sparsity, quant, unit = data.get("sparsity"), data.get("quant"), data.get("unit")
        return cls(
            sparsity=None if sparsity is None else target_from_dict(sparsity),
            quant=None if quant is None else QuantSpec(int(quant["bits"]), int(quant["group_size"]),
                                                       bool(quant["symmetric"]), bool(quant.get("auto_group"))),
            unit=None if unit is None else Unit(unit),
            permute=bool(data.get("permute", False)),
        )


def _quant_dict(quant: QuantSpec) -> dict[str, Any]:
    """A grid as plain data; ``auto_group`` (the run fitted the group) only where it is True."""
    data: dict[str, Any] = {"label": quant.label, "bits": quant.bits, "group_size": quant.group_size,
                            "symmetric": quant.symmetric}
    return data | {"auto_group": True} if quant.auto_group else data


def as_compression(value: Compression | Target) -> Compression:
    """A :class:`Compression` from itself or from a bare sparsity target (the prune-only case)."""
    return value if isinstance(value, Compression) else Compression(sparsity=value)


def parse_quant(text: str | QuantSpec | None) -> QuantSpec | None:
    """Parse ``int4``, ``int3:g64``, ``int4:g128:sym``, ``4`` into a :class:`QuantSpec` (None/"" → None).

    Without a ``:g`` part the group is the default, fitted to the model by the run (``auto_group``):

    >>> parse_quant("int4")
    QuantSpec(bits=4, group_size=128, symmetric=False, auto_group=True)
    >>> parse_quant("int2:g64:sym")
    QuantSpec(bits=2, group_size=64, symmetric=True, auto_group=False)
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
    group, symmetric = None, False
    for part in rest:
        if part.startswith("g") and part[1:].isdigit():
            group = int(part[1:])
        elif part in ("sym", "asym"):
            symmetric = part == "sym"
        else:
            raise ToolkitError(f"cannot read {part!r} in quantization {text!r}: use e.g. int4:g128 or int4:g128:sym")
    return QuantSpec(bits=int(bits_text), group_size=DEFAULT_GROUP_SIZE if group is None else group,
                     symmetric=symmetric, auto_group=group is None)


def parse_unit(text: str | Unit | None) -> Unit | None:
    """``heads`` | ``channels`` | ``heads+channels`` | ``layers`` (None/"" → None)."""
    if text is None or isinstance(text, Unit):
        return text
    raw = str(text).strip().lower().replace(" ", "")
    if raw in ("", "none"):
        return None
    aliases = {"channels+heads": "heads+channels", "both": "heads+channels"}
    try:
        return Unit(aliases.get(raw, raw))
    except ValueError:
        raise ToolkitError(f"unknown unit {text!r}: use heads, channels, heads+channels or layers") from None


def parse_compression(
    sparsity: str | float | Target | None = "50%", quant: str | QuantSpec | None = None, unit: str | Unit | None = None,
    permute: bool = False,
) -> Compression:
    """One :class:`Compression` from the user's fields (strings at the edge, objects below).

    >>> parse_compression("2:4", "int4").label
    '2:4+int4:g128'
    """
    target = None if sparsity in (None, "", "none") else parse_sparsity(sparsity)  # type: ignore[arg-type]
    return Compression(sparsity=target, quant=parse_quant(quant), unit=parse_unit(unit), permute=permute)
