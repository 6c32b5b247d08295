"""Control groups for pods and containers: memory, CPU and pids limits, OOM and usage.

Each pod gets a cgroup ``pod-<uid>`` under the node's parent, and each of its containers a
child named after the container, as a kubelet arranges them:

* memory limit → ``memory.limit_in_bytes`` (v1, with ``memory.memsw.limit_in_bytes`` where
  swap accounting exists) or ``memory.max`` (v2); the kernel's OOM killer ends the
  container, whose ``oom_kill`` counter tells the agent the run was ``OOMKilled``;
* CPU limit → CFS quota over a 100 ms period (``cpu.cfs_quota_us`` / ``cpu.max``);
  CPU request → ``cpu.shares`` (v1) or ``cpu.weight`` (v2), 2 shares when none is asked;
* the pod's ``pids.max`` (the node's ``podPidsLimit``);
* the pod's memory limit and CPU quota are the sums of its containers' when every
  container has one.

The parent: ``<the agent's own cgroup>/gpushare-<digest of the data directory>`` in each
hierarchy, or one given (``--cgroup-parent``), a path relative to each hierarchy's root.
The cgroup a container run enters is recorded (`CgroupSet.to_json`) in the pod's metadata,
so an agent started again, possibly from another cgroup of its own, finds it again.

A container's processes enter the cgroup before its command runs: the exit-code wrapper
writes its own pid into every ``cgroup.procs`` of the set first (`procs_files`), then
starts the command, which inherits the cgroups; there is no moment when the command runs
outside them.

`detect` says what the host offers; where it offers nothing usable (no cgroup file system,
no write access, a missing controller) it says why, for the Node condition.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpushare.api import quantity
from gpushare.api.quantity import QuantityError

V1, V2 = "v1", "v2"
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000
MIN_SHARES, MAX_SHARES = 2, 262_144
DEFAULT_POD_PIDS = 1024
_V1_CONTROLLERS = ("memory", "cpu", "pids")  # needed; cpuacct is used where mounted
_V2_CONTROLLERS = ("memory", "cpu", "pids")


class LimitsError(ValueError):
    """A resource value cannot be applied as written; the message names the field."""


class CgroupError(RuntimeError):
    """The cgroup cannot be made or written (the message says which file and why)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one cgroup enforces (None: no limit)."""

    memory_bytes: int | None = None
    cpu_quota_us: int | None = None  # per CFS_PERIOD_US
    cpu_shares: int = MIN_SHARES
    pids: int | None = None


# --- from the pod spec (pure) ----------------------------------------------------------

def _quantity(raw: object, path: str) -> Decimal:
    try:
        value = quantity.parse_quantity(str(raw))
    except QuantityError:
        raise LimitsError(f"{path}: {raw!r} is not a quantity") from None
    if value < 0:
        raise LimitsError(f"{path}: {raw!r} must not be negative")
    return value


def _resource(container: Mapping[str, Any], kind: str, name: str,
              path: str) -> Decimal | None:
    raw = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if raw is None:
        return None
    return _quantity(raw, f"{path}.resources.{kind}.{name}")


def _milli_cpu(value: Decimal) -> int:
    return int((value * 1000).to_integral_value(rounding="ROUND_CEILING"))


def shares_for(milli: int | None) -> int:
    """``cpu.shares`` for a CPU request in millicores (the kubelet's rule)."""
    if not milli:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli * 1024 // 1000))


def quota_for(milli: int | None) -> int | None:
    if milli is None:
        return None
    return max(MIN_QUOTA_US, milli * CFS_PERIOD_US // 1000)


def weight_for(shares: int) -> int:
    """v2 ``cpu.weight`` for v1 shares (the mapping runtimes use)."""
    return 1 + ((shares - MIN_SHARES) * 9999) // (MAX_SHARES - MIN_SHARES)


def container_limits(container: Mapping[str, Any], path: str) -> Limits:
    """The limits of one container (`path` its field path, e.g. ``spec.containers[0]``).
    A CPU or memory request left out while the limit is given is the limit, as the API
    server defaults it."""
    memory = _resource(container, "limits", "memory", path)
    cpu_limit = _resource(container, "limits", "cpu", path)
    cpu_request = _resource(container, "requests", "cpu", path)
    if cpu_request is None:
        cpu_request = cpu_limit
    limit_milli = _milli_cpu(cpu_limit) if cpu_limit is not None else None
    if limit_milli == 0:
        raise LimitsError(f"{path}.resources.limits.cpu: must be more than 0")
    if memory is not None and memory < 4096:
        raise LimitsError(f"{path}.resources.limits.memory: {memory} bytes is below one page")
    return Limits(
        memory_bytes=int(memory) if memory is not None else None,
        cpu_quota_us=quota_for(limit_milli),
        cpu_shares=shares_for(_milli_cpu(cpu_request) if cpu_request is not None else None),
    )


def pod_limits(pod: Mapping[str, Any], pids: int | None) -> tuple[Limits, dict[str, Limits]]:
    """(the pod's limits, each container's by name), init containers included. The pod's
    memory and CPU limits are the larger of the regular containers' sum and the largest
    init container's, when every container has one (else none at pod level)."""
    spec = pod.get("spec") or {}
    per: dict[str, Limits] = {}
    main: list[Limits] = []
    init: list[Limits] = []
    for kind, into in (("initContainers", init), ("containers", main)):
        for i, container in enumerate(spec.get(kind) or []):
            limits = container_limits(container, f"spec.{kind}[{i}]")
            per[str(container.get("name") or "")] = limits
            into.append(limits)

    def total(attr: str) -> int | None:
        values = [getattr(x, attr) for x in main]
        if not values or any(v is None for v in values):
            return None
        first = [getattr(x, attr) for x in init]
        if any(v is None for v in first):
            return None
        return max([sum(values), *first])

    shares = min(MAX_SHARES, sum(x.cpu_shares for x in main) or MIN_SHARES)
    return Limits(total("memory_bytes"), total("cpu_quota_us"), shares, pids), per


# --- the host ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One mounted hierarchy: v1 one per controller (``controller`` its name), v2 one."""

    controller: str  # "memory", "cpu", "pids", "cpuacct" for v1; "" for v2
    mount: str
    own: str  # the agent's own cgroup in it, relative to the mount


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """What the host offers (``version`` None: nothing usable, ``reason`` why)."""

    version: str | None
    reason: str
    hierarchies: tuple[Hierarchy, ...] = ()

    @property
    def usable(self) -> bool:
        return self.version is not None


def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(fstype, mount point, root inside the hierarchy, super options) of cgroup mounts."""
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((tail[0], fields[4], fields[3], tail[2]))
    return out


def _own(proc_cgroup: str) -> dict[str, str]:
    """controller (or "" for v2) → the process's cgroup path."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            out[name] = parts[2]
    return out


def _relative(own: str, root: str) -> str:
    if root != "/" and (own == root or own.startswith(root + "/")):
        own = own[len(root):] or "/"
    return own


def detect(mountinfo: str | None = None, proc_cgroup: str | None = None) -> CgroupSupport:
    """The hierarchies to use: v2 when the unified hierarchy has the memory, cpu and pids
    controllers, else v1 when each of them is mounted; the reason when neither."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if proc_cgroup is None:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    mounts, own = _mounts(mountinfo), _own(proc_cgroup)
    for fstype, point, root, _ in mounts:
        if fstype != "cgroup2":
            continue
        try:
            have = Path(point, "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if all(c in have for c in _V2_CONTROLLERS):
            return CgroupSupport(V2, f"cgroup v2 at {point}",
                                 (Hierarchy("", point, _relative(own.get("", "/"), root)),))
    found: dict[str, Hierarchy] = {}
    for fstype, point, root, options in mounts:
        if fstype != "cgroup":
            continue
        for name in options.split(","):
            if name in (*_V1_CONTROLLERS, "cpuacct") and name not in found:
                found[name] = Hierarchy(name, point, _relative(own.get(name, "/"), root))
    missing = [c for c in _V1_CONTROLLERS if c not in found]
    if missing:
        return CgroupSupport(None, "no cgroup v2 with memory, cpu and pids, and no cgroup v1 "
                             f"{', '.join(missing)} hierarchy mounted")
    return CgroupSupport(V1, "cgroup v1 (" + ", ".join(
        f"{h.controller} at {h.mount}" for h in found.values()) + ")",
        tuple(found.values()))


def node_parent(data_dir: Path) -> str:
    """The name of the node's cgroup under the agent's own: one per data directory."""
    return "gpushare-" + hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:10]


@dataclass(frozen=True, slots=True)
class CgroupSet:
    """One cgroup in each hierarchy (v1) or the one directory (v2): absolute paths."""

    version: str
    paths: Mapping[str, str] = field(default_factory=dict)  # controller ("" v2) → directory

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "paths": dict(self.paths)})

    @classmethod
    def from_json(cls, text: str) -> CgroupSet:
        raw = json.loads(text)
        if raw.get("version") not in (V1, V2) or not isinstance(raw.get("paths"), dict):
            raise ValueError("cgroup record: version and paths are required")
        return cls(raw["version"], {str(k): str(v) for k, v in raw["paths"].items()})

    def child(self, name: str) -> CgroupSet:
        return CgroupSet(self.version, {k: os.path.join(v, name) for k, v in self.paths.items()})

    def _dir(self, controller: str) -> str | None:
        return self.paths.get("" if self.version == V2 else controller)

    def procs_files(self) -> tuple[str, ...]:
        """Every ``cgroup.procs`` a process must join (the wrapper writes its pid there)."""
        return tuple(sorted({os.path.join(p, "cgroup.procs") for p in self.paths.values()}))

    # --- reading --------------------------------------------------------------------

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this cgroup."""
        directory = self._dir("memory")
        name = "memory.events" if self.version == V2 else "memory.oom_control"
        if directory is None:
            return 0
        return _keyed(os.path.join(directory, name)).get("oom_kill", 0)

    def memory_working_set(self) -> int | None:
        """Usage minus the inactive file cache, as ``kubectl top`` counts memory."""
        directory = self._dir("memory")
        if directory is None:
            return None
        usage_file = "memory.current" if self.version == V2 else "memory.usage_in_bytes"
        usage = _int_file(os.path.join(directory, usage_file))
        if usage is None:
            return None
        stat = _keyed(os.path.join(directory, "memory.stat"))
        inactive = stat.get("inactive_file" if self.version == V2 else "total_inactive_file", 0)
        return max(usage - inactive, 0)

    def cpu_seconds(self) -> float | None:
        """CPU time used by the cgroup's processes, all of them since it was made."""
        if self.version == V2:
            directory = self._dir("cpu")
            if directory is None:
                return None
            usec = _keyed(os.path.join(directory, "cpu.stat")).get("usage_usec")
            return None if usec is None else usec / 1e6
        directory = self.paths.get("cpuacct")
        if directory is None:
            return None
        nanos = _int_file(os.path.join(directory, "cpuacct.usage"))
        return None if nanos is None else nanos / 1e9

    def pids(self) -> list[int]:
        out: set[int] = set()
        for directory in self.paths.values():
            with contextlib.suppress(OSError):
                out.update(int(x) for x in Path(directory, "cgroup.procs").read_text().split())
        return sorted(out)

    def exists(self) -> bool:
        return any(os.path.isdir(p) for p in self.paths.values())


def _int_file(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out[parts[0]] = int(parts[1])
    return out


# --- making, writing, removing -------------------------------------------------------------

def _write(directory: str, name: str, value: str) -> None:
    path = os.path.join(directory, name)
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


class Cgroups:
    """The node's cgroups: makes the pod and container sets under the node's parent."""

    def __init__(self, support: CgroupSupport, parent: str) -> None:
        if not support.usable:
            raise CgroupError(support.reason)
        self.support = support
        self.version = str(support.version)
        self.parent = parent  # relative to the agent's own cgroup unless absolute ("/x/y")
        self.root = CgroupSet(self.version, {
            h.controller: os.path.join(
                h.mount, (parent if parent.startswith("/") else
                          os.path.join(h.own, parent)).lstrip("/"))
            for h in support.hierarchies})

    def ensure_root(self) -> None:
        """Make the node's parent (v2: with the controllers enabled for its children). A
        parent that cannot be made is a `CgroupError` naming it (no delegation here)."""
        for directory in self.root.paths.values():
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise CgroupError(f"cannot create cgroup {directory}: {exc.strerror}") from exc
        if self.version == V2:
            self._enable_v2(self.root.paths[""])

    def _enable_v2(self, directory: str) -> None:
        mount = self.support.hierarchies[0].mount
        chain = []
        current = os.path.dirname(directory)
        while len(current) >= len(mount):
            chain.append(current)
            if current == mount:
                break
            current = os.path.dirname(current)
        for level in [*reversed(chain), directory]:
            with contextlib.suppress(CgroupError):
                _write(level, "cgroup.subtree_control",
                       " ".join(f"+{c}" for c in _V2_CONTROLLERS))

    def pod(self, uid: str) -> CgroupSet:
        return self.root.child(f"pod-{uid}")

    def make(self, target: CgroupSet, limits: Limits) -> CgroupSet:
        """Create `target` (its parents must exist) and write `limits` into it."""
        for directory in target.paths.values():
            try:
                os.mkdir(directory)
            except FileExistsError:
                pass
            except OSError as exc:
                raise CgroupError(f"cannot create cgroup {directory}: {exc.strerror}") from exc
        if self.version == V2:
            self._enable_v2(target.paths[""])
            self._limits_v2(target.paths[""], limits)
        else:
            self._limits_v1(target, limits)
        return target

    @staticmethod
    def _limits_v1(target: CgroupSet, limits: Limits) -> None:
        memory, cpu, pids = (target.paths[c] for c in ("memory", "cpu", "pids"))
        unlimited = "-1"
        memsw = os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes"))
        value = str(limits.memory_bytes) if limits.memory_bytes is not None else unlimited
        # memsw must stay >= the memory limit: lower memory first, raise memsw first
        order = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
        if limits.memory_bytes is None:
            order.reverse()
        for name in order:
            if name.startswith("memory.memsw") and not memsw:
                continue
            try:
                _write(memory, name, value)
            except CgroupError:
                if name.startswith("memory.memsw"):
                    raise
                # the limit may be below memsw's current value or above it: retry after
                _write(memory, "memory.memsw.limit_in_bytes", value)
                _write(memory, name, value)
        _write(cpu, "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(cpu, "cpu.cfs_quota_us",
               str(limits.cpu_quota_us) if limits.cpu_quota_us is not None else unlimited)
        _write(cpu, "cpu.shares", str(limits.cpu_shares))
        _write(pids, "pids.max", str(limits.pids) if limits.pids is not None else "max")

    @staticmethod
    def _limits_v2(directory: str, limits: Limits) -> None:
        _write(directory, "memory.max",
               str(limits.memory_bytes) if limits.memory_bytes is not None else "max")
        with contextlib.suppress(CgroupError):  # no swap controller: nothing to turn off
            _write(directory, "memory.swap.max", "0" if limits.memory_bytes else "max")
        quota = str(limits.cpu_quota_us) if limits.cpu_quota_us is not None else "max"
        _write(directory, "cpu.max", f"{quota} {CFS_PERIOD_US}")
        _write(directory, "cpu.weight", str(weight_for(limits.cpu_shares)))
        _write(directory, "pids.max", str(limits.pids) if limits.pids is not None else "max")


def kill_all(target: CgroupSet, wait_s: float = 5.0) -> list[int]:
    """SIGKILL every process left in `target` and its children; wait until they are gone."""
    killed: list[int] = []
    deadline = time.monotonic() + wait_s
    while True:
        left = [pid for s in _walk(target) for pid in s.pids()]
        if not left or time.monotonic() > deadline:
            return killed
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.02)


def _walk(target: CgroupSet) -> list[CgroupSet]:
    """`target` and the cgroups under it, deepest first."""
    found: list[CgroupSet] = []
    names: set[str] = set()
    for directory in target.paths.values():
        with contextlib.suppress(OSError):
            names.update(e.name for e in os.scandir(directory) if e.is_dir())
    for name in sorted(names):
        found.extend(_walk(target.child(name)))
    found.append(target)
    return found


def remove(target: CgroupSet, wait_s: float = 5.0) -> bool:
    """Kill what is left in `target`, then remove it and its children (deepest first).
    Whether nothing of it is left."""
    kill_all(target, wait_s)
    for cgroup in _walk(target):
        for directory in cgroup.paths.values():
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    # EBUSY: a process that was just killed is not gone from it yet
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
    return not target.exists()


def pod_sets(root: CgroupSet) -> Iterable[tuple[str, CgroupSet]]:
    """(pod uid, its cgroup set) of every pod cgroup under the node's parent."""
    names: set[str] = set()
    for directory in root.paths.values():
        with contextlib.suppress(OSError):
            names.update(e.name for e in os.scandir(directory)
                         if e.is_dir() and e.name.startswith("pod-"))
    for name in sorted(names):
        yield name[len("pod-"):], root.child(name)
