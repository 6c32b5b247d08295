"""What every controller is to the controller manager: a thing that, once the shared caches
are filled, starts its own threads (and may be stopped)."""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable


@runtime_checkable
class Controller(Protocol):
    def start(self) -> list[threading.Thread]:
        """Start working; the threads returned are joined when the manager stops. A
        controller that also has ``stop()`` is told first."""
        ...
