"""Waiting for something the controllers do in the background."""

from __future__ import annotations

import time


def wait(check, timeout=10.0):
    """Whether ``check()`` turned true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False
