"""Kubernetes time formats."""

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
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text).timestamp()


def timestamp(text: str | None) -> float:
    """RFC 3339 to epoch seconds; missing or unreadable is 0 (the oldest)."""
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
