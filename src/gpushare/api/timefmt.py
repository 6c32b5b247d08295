"""Kubernetes time formats: the one home of RFC 3339, written and read. Pure: the callers
read the clock."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch: float) -> str:
    """`metav1.Time`: whole seconds, UTC."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(epoch: float) -> str:
    """`metav1.MicroTime` (Lease renewTime, Event eventTime)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_nano(epoch_ns: int) -> str:
    """The prefix `kubectl logs --timestamps` shows."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def parse_rfc3339(text: str) -> float:
    """RFC 3339 to epoch seconds; ValueError when it is not one."""
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text).timestamp()


def parse_time(value: object) -> datetime | None:
    """RFC 3339 to an aware datetime; None when missing or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def timestamp(text: object) -> float:
    """RFC 3339 to epoch seconds; missing or unreadable is 0 (the oldest)."""
    parsed = parse_time(text)
    return 0.0 if parsed is None else parsed.timestamp()
