"""Choosing how GPU shares are enforced on this node, strongest first, by probing.

* `mps`: CUDA MPS daemons per GPU; fractional pods get MPS memory and SM limits.
* `nvml-watchdog`: always on where NVML works; kills a pod above its memory share.
* nothing for declared GPUs: there is no NVML behind them, and the Node says so.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from gpushare.agent.gpu.mps import CONTROL, MpsManager
from gpushare.agent.node.inventory import GpuInventory

MODES = ("auto", "mps", "watchdog", "none")


class EnforcementError(RuntimeError):
    pass


@dataclass(slots=True)
class Enforcement:
    backends: tuple[str, ...]
    annotation: str
    notes: list[str] = field(default_factory=list)
    mps: MpsManager | None = None

    @property
    def watchdog(self) -> bool:
        return "nvml-watchdog" in self.backends


def choose(
    mode: str,
    inventory: GpuInventory,
    nvml_ok: bool,
    make_mps: Callable[[], MpsManager],
    which: Callable[[str], str | None] = shutil.which,
) -> Enforcement:
    if mode not in MODES:
        raise EnforcementError(f"--enforcement {mode!r}: expected one of {', '.join(MODES)}")
    if inventory.declared:
        if mode in ("mps", "watchdog"):
            raise EnforcementError(
                f"--enforcement {mode}: needs real GPUs; declared GPUs have no NVML behind them"
            )
        return Enforcement(backends=(), annotation="none (declared GPUs)")
    if inventory.count == 0:
        return Enforcement(backends=(), annotation="none (no GPUs)")
    if mode == "none":
        return Enforcement(backends=(), annotation="none")
    if not nvml_ok:
        raise EnforcementError("NVML is not usable, so shares cannot be watched")
    notes: list[str] = []
    if mode in ("auto", "mps"):
        if which(CONTROL) is None:
            if mode == "mps":
                raise EnforcementError(f"--enforcement mps: {CONTROL} is not on PATH")
            notes.append(f"MPS not used: {CONTROL} is not on PATH")
        else:
            manager = make_mps()
            errors = manager.start_all()
            if not errors:
                return Enforcement(
                    backends=("mps", "nvml-watchdog"),
                    annotation="mps,nvml-watchdog",
                    notes=notes,
                    mps=manager,
                )
            manager.stop_all()
            if mode == "mps":
                raise EnforcementError("--enforcement mps: " + "; ".join(errors))
            notes.append("MPS not used: " + "; ".join(errors))
    return Enforcement(backends=("nvml-watchdog",), annotation="nvml-watchdog", notes=notes)
