"""Kubernetes quantity strings to integers and back, in the units gpushare uses.

GPU in milli-GPUs (``330m`` is a third of a GPU), CPU in millicores, memory in bytes.
"""

from __future__ import annotations

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


class QuantityError(ValueError):
    """A quantity string that is not a Kubernetes quantity."""


# Kubernetes holds a quantity in an int64 (of milli-units at most): larger is out of range.
_MAX = Decimal(2**63 - 1)


def parse_quantity(value: str | int | float) -> Decimal:
    """``"500m"`` → 0.5, ``"1Gi"`` → 1073741824, ``2`` → 2; QuantityError for what is not
    a quantity, not finite (``"1e400"`` as a float) or out of int64 range."""
    number = _parse(value)
    if not number.is_finite() or abs(number) > _MAX:
        raise QuantityError(f"{value!r} is out of range")
    return number


def _parse(value: str | int | float) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = str(value).strip()
    if not text:
        raise QuantityError("empty quantity")
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if text.endswith(suffix):
            return _number(text[: -len(suffix)], text) * _SUFFIXES[suffix]
    last = text[-1]
    if last in _SUFFIXES and not text[-2:].lower().startswith("e"):
        return _number(text[:-1], text) * _SUFFIXES[last]
    return _number(text, text)


def _number(digits: str, whole: str) -> Decimal:
    try:
        return Decimal(digits)
    except InvalidOperation:
        raise QuantityError(f"{whole!r} is not a quantity") from None


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
