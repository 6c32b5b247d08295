"""Exact quantities.

GPUs are counted in milli-GPUs (``330`` is a third of a GPU, rounded as written), CPU in
millicores and memory in bytes, all as ints, so that sums and comparisons never drift.
The fair-share division works on :class:`fractions.Fraction` in each resource's natural
unit (whole GPUs, millicores, bytes), because KAI floors its over-quota offers to whole
units of exactly those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

MILLI = 1000
MIB = 1024 * 1024

GPU = "gpu"
CPU = "cpu"
MEMORY = "memory"
RESOURCES: tuple[str, str, str] = (GPU, CPU, MEMORY)


class QuantityError(ValueError):
    """A number could not be read as the quantity it should be."""


def to_fraction(value: object) -> Fraction:
    """Read an int, float or decimal string exactly (floats by their decimal spelling)."""
    if isinstance(value, bool):
        raise QuantityError(f"expected a number, got {value!r}")
    if isinstance(value, Fraction | int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(Decimal(repr(value)))
    if isinstance(value, str):
        try:
            return Fraction(Decimal(value.strip()))
        except (InvalidOperation, ValueError) as err:
            raise QuantityError(f"expected a number, got {value!r}") from err
    raise QuantityError(f"expected a number, got {value!r}")


def mib_to_bytes(value: object) -> int:
    """MiB (possibly fractional, a conversion from bytes) to whole bytes, rounding up."""
    exact = to_fraction(value) * MIB
    whole = exact.numerator // exact.denominator
    return whole if whole == exact else whole + 1


@dataclass(frozen=True, slots=True)
class Res:
    """A resource vector: milli-GPUs, millicores, bytes."""

    gpu: int = 0
    cpu: int = 0
    mem: int = 0

    def __add__(self, other: Res) -> Res:
        return Res(self.gpu + other.gpu, self.cpu + other.cpu, self.mem + other.mem)

    def __sub__(self, other: Res) -> Res:
        return Res(self.gpu - other.gpu, self.cpu - other.cpu, self.mem - other.mem)

    def get(self, resource: str) -> int:
        if resource == GPU:
            return self.gpu
        if resource == CPU:
            return self.cpu
        return self.mem


ZERO = Res()


# ------------------------------------------------------------ natural units
# The one algebra of resource vectors in natural units (whole GPUs, millicores, bytes),
# exact: ``Vec`` in RESOURCES order where speed matters (the session's figures),
# ``Quantities`` keyed by resource where the share rules read them by name.

#: A resource vector in natural units, in :data:`RESOURCES` order.
Vec = tuple[Fraction, Fraction, Fraction]
#: A resource vector in natural units, by resource name.
Quantities = dict[str, Fraction]

F0 = Fraction(0)


def vec(res: Res) -> Vec:
    return (Fraction(res.gpu, MILLI), Fraction(res.cpu), Fraction(res.mem))


def vadd(a: Vec, b: Vec) -> Vec:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def as_quantities(v: Vec) -> Quantities:
    """A vector by resource name."""
    return {GPU: v[0], CPU: v[1], MEMORY: v[2]}


def res_natural(res: Res) -> Quantities:
    return {GPU: Fraction(res.gpu, MILLI), CPU: Fraction(res.cpu), MEMORY: Fraction(res.mem)}


def zeros() -> Quantities:
    return {r: F0 for r in RESOURCES}


def add(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> Quantities:
    return {r: a.get(r, F0) + b.get(r, F0) for r in RESOURCES}


def sub(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> Quantities:
    return {r: a.get(r, F0) - b.get(r, F0) for r in RESOURCES}


def total(items: Iterable[Mapping[str, Fraction]]) -> Quantities:
    out = zeros()
    for item in items:
        out = add(out, item)
    return out
