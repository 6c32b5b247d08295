"""gpushare's PyTorch hook, put on the PYTHONPATH of pods that hold a fraction of a GPU.

When the program first initialises CUDA through PyTorch, cap PyTorch's caching allocator at
the pod's share (`GPUSHARE_TORCH_MEMORY_FRACTION`) with
`torch.cuda.set_per_process_memory_fraction`. It is cooperative: it changes nothing for
programs that do not use PyTorch, a program can raise the fraction again, and it never
stops a program from starting (any failure here is swallowed). CUDA is not initialised at
import time, so forking programs behave as before. Another `sitecustomize` later on the path
still runs.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _fraction() -> float | None:
    try:
        value = float(os.environ.get("GPUSHARE_TORCH_MEMORY_FRACTION", ""))
    except ValueError:
        return None
    return value if 0.0 < value < 1.0 else None


def _patch(cuda: object, fraction: float) -> None:
    original = cuda._lazy_init  # type: ignore[attr-defined]
    state = {"done": False}

    def lazy_init() -> None:
        original()
        if state["done"]:
            return
        state["done"] = True
        with contextlib.suppress(Exception):
            for device in range(cuda.device_count()):  # type: ignore[attr-defined]
                cuda.set_per_process_memory_fraction(fraction, device)  # type: ignore[attr-defined]

    cuda._lazy_init = lazy_init  # type: ignore[attr-defined]


class _TorchCudaFinder(importlib.abc.MetaPathFinder):
    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != "torch.cuda":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        fraction = self.fraction

        def exec_and_patch(module):  # type: ignore[no-untyped-def]
            exec_module(module)
            with contextlib.suppress(Exception):
                _patch(module, fraction)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        sys.meta_path.remove(self)
        return spec


def _install() -> None:
    fraction = _fraction()
    if fraction is not None:
        sys.meta_path.insert(0, _TorchCudaFinder(fraction))


def _chain() -> None:
    """Run the next `sitecustomize` on the path, which this one would otherwise hide."""
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    try:
        with contextlib.suppress(Exception):
            import sitecustomize  # noqa: F401
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


try:
    _install()
finally:
    _chain()
