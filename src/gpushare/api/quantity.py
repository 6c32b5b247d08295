"""Kubernetes quantities: the one parser of their grammar, and the integers gpushare keeps.

The grammar (``k8s.io/apimachinery/pkg/api/resource``)::

    <quantity>        ::= <sign><number><suffix>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <sign><digits> | "E" <sign><digits>

No quantity may be greater than 2^63-1 in magnitude. Surrounding blanks are dropped, as a
JSON read of one does. GPU in milli-GPUs (``330m`` is a third of a GPU), CPU in millicores,
memory in bytes.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
}
_GRAMMAR = re.compile(
    r"([+-]?(?:\d+\.?\d*|\.\d+))"  # sign and number
    r"(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?",  # exponent or suffix
    re.ASCII,
)
#: The largest magnitude a quantity may have.
MAX = Decimal(2**63 - 1)
# Beyond this exponent a non-zero number is out of range (or, negative, below a nano).
_MAX_EXPONENT = 100


class QuantityError(ValueError):
    """A quantity string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """``"500m"`` → 0.5, ``"1Gi"`` → 1073741824, ``"1e3"`` → 1000, ``2`` → 2; QuantityError
    for what is not a quantity, not finite or greater than 2^63-1 in magnitude."""
    number = _parse(value)
    if not number.is_finite() or abs(number) > MAX:
        raise QuantityError(f"{value!r} is out of range")
    return number


def _parse(value: str | int | float) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        try:
            return Decimal(str(value))
        except InvalidOperation:
            raise QuantityError(f"{value!r} is not a quantity") from None
    match = _GRAMMAR.fullmatch(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    number = Decimal(match.group(1))
    exponent, suffix = match.group(2), match.group(3)
    if exponent is not None:
        if number == 0:
            return Decimal(0)
        digits = exponent.lstrip("+-").lstrip("0")
        shift = int(exponent) if len(digits) <= 6 else (-1 if exponent[0] == "-" else 1) * 10**7
        if shift > _MAX_EXPONENT:
            raise QuantityError(f"{value!r} is out of range")
        # Far below a nano either way: kept positive, so rounding up still gives one unit.
        return number.scaleb(max(shift, -_MAX_EXPONENT))
    return number * _SUFFIXES[suffix] if suffix else number


def to_milli(value: str | int | float) -> int:
    """A quantity in thousandths, rounded up (``"0.33"`` → 330, ``"100m"`` → 100)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def to_int(value: str | int | float) -> int:
    """A quantity as a whole number, rounded up (memory in bytes)."""
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def format_milli(milli: int) -> str:
    """330 → ``"330m"``, 2000 → ``"2"``: how Kubernetes prints a canonical quantity."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def format_bytes(count: int) -> str:
    """Bytes in the largest binary suffix that divides them exactly."""
    if count == 0:
        return "0"
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)
