"""Container lifecycle hooks: ``preStop`` (``exec``, ``httpGet``, ``sleep``) before a
container is stopped, as a kubelet runs it: inside the termination grace period, which it
shares with the SIGTERM that follows; a hook that fails is a ``FailedPreStopHook`` event and
the stop goes on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpushare.agent.runtime.probes import ExecRunner, Probe, check

MIN_TERM_GRACE_S = 2.0  # what a kubelet leaves SIGTERM when the hook used up the period


def pre_stop(container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    hook = (container.get("lifecycle") or {}).get("preStop")
    return hook if isinstance(hook, Mapping) and hook else None


def run_hook(hook: Mapping[str, Any], container: Mapping[str, Any], address: str,
             run_exec: ExecRunner, timeout: float) -> str | None:
    """Run one hook within `timeout`; None when it succeeded, else what went wrong."""
    if isinstance(hook.get("sleep"), Mapping):
        time.sleep(min(float(hook["sleep"].get("seconds") or 0), timeout))
        return None
    for handler in ("exec", "httpGet"):
        if isinstance(hook.get(handler), Mapping):
            action = dict(hook[handler])
            if handler == "httpGet":
                from gpushare.agent.runtime.probes import probes_of

                # the port may be named: resolve it as a probe's
                action = dict(probes_of({**container, "readinessProbe": {"httpGet": action}},
                                        "lifecycle.preStop")[0].action)
            ok, message = check(Probe("preStop", handler, action, timeout=max(timeout, 0.1)),
                                address, run_exec)
            return None if ok else message or "the hook failed"
    return "unsupported hook (exec, httpGet or sleep)"


def run_pre_stops(hooks: list[tuple[str, Callable[[], str | None]]], deadline: float,
                  failed: Callable[[str, str], None]) -> None:
    """Run the hooks (name, call) in parallel until they end or `deadline` (monotonic);
    `failed(name, message)` for each that failed or did not end in time."""
    results: dict[str, str | None] = {}

    def one(name: str, call: Callable[[], str | None]) -> None:
        try:
            results[name] = call()
        except Exception as exc:
            results[name] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=one, args=hook, daemon=True) for hook in hooks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    for name, _ in hooks:
        if name not in results:
            failed(name, "the PreStop hook did not finish within the grace period")
        elif results[name] is not None:
            failed(name, str(results[name]))
