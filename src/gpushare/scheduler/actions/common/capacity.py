"""The capacity filter of the victim search: what a step needs against what is free plus
what a set of victims would free, checked before any scenario is simulated.

Necessary conditions only (a scenario that passes may still fail in the simulation):
GPU, CPU and memory in total; entirely free GPUs in total for the step's whole-GPU pods,
that many on one node for the largest of them; room on one GPU for its largest share.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpushare.model import ACTIVE_ALLOCATED, Pod
from gpushare.model.quantities import MILLI
from gpushare.scheduler.session import Session


class Room:
    """What is free on the ready nodes (now or after releases) when a search starts: the
    same for every round and generator of the search. Kept for the action and brought up
    to date from the nodes whose pods changed for good since (the state's settled log)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.gpu_free: dict[str, list[int]] = {}
        self.whole_free: dict[str, int] = {}  # entirely free GPUs per node
        self.free = [0, 0, 0]
        self.whole_total = 0
        self.best_whole = 0
        self.best_gpu = 0  # the most room on any one GPU
        self._rebuild()

    def _rebuild(self) -> None:
        state = self.session.state
        self.node_version = state.node_version
        self._log = state.settled_nodes
        self._read = len(self._log)
        self._cpu: dict[str, int] = {}
        self._mem: dict[str, int] = {}
        self.gpu_free.clear()
        self.whole_free.clear()
        self.free = [0, 0, 0]
        self.whole_total = 0
        # How many nodes have each count of entirely free GPUs, and each most room on one
        # GPU: the best of either follows a change to one node without a pass over all.
        self._whole_count: dict[int, int] = {}
        self._room_count: dict[int, int] = {}
        for name in state.usage:
            self._take(name)
        self._best()

    def refresh(self) -> None:
        state = self.session.state
        if (
            state.node_version != self.node_version
            or state.settled_nodes is not self._log
            or len(self._log) < self._read
        ):
            self._rebuild()
            return
        if len(self._log) == self._read:
            return
        for name in sorted(set(self._log[self._read:])):
            self._drop(name)
            self._take(name)
        self._read = len(self._log)
        self._best()

    def _take(self, name: str) -> None:
        usage = self.session.state.usage.get(name)
        if usage is None or not usage.node.ready:
            return
        per_gpu = [usage.gpu_free_future(i) for i in range(usage.node.gpus)]
        whole = sum(1 for f in per_gpu if f >= MILLI)
        roomiest = max(per_gpu, default=0)
        self.gpu_free[name] = per_gpu
        self.whole_free[name] = whole
        self._cpu[name] = usage.cpu_free_future()
        self._mem[name] = usage.mem_free_future()
        self.free[0] += sum(per_gpu)
        self.free[1] += self._cpu[name]
        self.free[2] += self._mem[name]
        self.whole_total += whole
        self._whole_count[whole] = self._whole_count.get(whole, 0) + 1
        self._room_count[roomiest] = self._room_count.get(roomiest, 0) + 1

    def _drop(self, name: str) -> None:
        per_gpu = self.gpu_free.pop(name, None)
        if per_gpu is None:
            return
        whole = self.whole_free.pop(name)
        roomiest = max(per_gpu, default=0)
        self.free[0] -= sum(per_gpu)
        self.free[1] -= self._cpu.pop(name)
        self.free[2] -= self._mem.pop(name)
        self.whole_total -= whole
        self._whole_count[whole] -= 1
        self._room_count[roomiest] -= 1

    def _best(self) -> None:
        self.best_whole = max((k for k, n in self._whole_count.items() if n), default=0)
        self.best_gpu = max((k for k, n in self._room_count.items() if n), default=0)


class Capacity:
    """The capacity filter of one job's search: what the step needs against what is free
    (now or after releases) plus what the victims would free, in O(victims) per check."""

    def __init__(self, session: Session, partial: list[Pod], room: Room | None = None) -> None:
        need = [0, 0, 0]
        self.max_whole = 0
        self.max_portion = 0  # the largest share must find one GPU with that much room
        big_memory = session.max_gpu_memory or 0
        for pod in partial:
            g = pod.gpu
            if g.whole:
                need[0] += g.whole * MILLI
                self.max_whole = max(self.max_whole, g.whole)
            elif g.is_shared:
                portion = min(g.portion_on(big_memory), MILLI)
                need[0] += portion * g.devices
                self.max_portion = max(self.max_portion, portion)
            need[1] += pod.cpu_millis
            need[2] += pod.memory_bytes
        self.need = need
        self.need_whole = sum(pod.gpu.whole for pod in partial)  # GPUs entirely free
        self.every_pod_wants_gpu = bool(partial) and all(p.gpu.wants_gpu for p in partial)
        # The least any one pod of the step needs on a node: whole GPUs, or one share.
        wholes = [p.gpu.whole for p in partial if p.gpu.whole]
        shares = [
            min(p.gpu.portion_on(big_memory), MILLI) for p in partial
            if not p.gpu.whole and p.gpu.is_shared
        ]
        self.least_whole = min(wholes, default=0)
        self.least_share = min(shares, default=0)
        room = room if room is not None else Room(session)
        self.gpu_free = room.gpu_free
        self.best_whole = room.best_whole
        self.best_gpu = room.best_gpu
        self.whole_free = room.whole_free
        self.whole_total = room.whole_total
        self.free = room.free

    def per_gpu_ok(self, best_whole: int, best_gpu: int, whole_total: int) -> bool:
        """The GPU-level necessary conditions: the largest whole-GPU pod finds a node with
        that many entirely free GPUs, the largest share one GPU with that much room, and
        the step's whole GPUs are entirely free somewhere in total."""
        return (
            self.max_whole <= best_whole
            and self.max_portion <= best_gpu
            and self.need_whole <= whole_total
        )

    def accumulate(self, victims: Sequence[Pod]) -> Accumulated:
        acc = Accumulated(self)
        acc.add(victims)
        return acc

    def fits(self, victims: Sequence[Pod]) -> bool:
        free = list(self.free)
        freed: dict[str, dict[int, int]] = {}  # node -> GPU index -> milli-GPU released
        for pod in victims:
            if pod.status not in ACTIVE_ALLOCATED:
                continue
            held = pod.held()
            free[0] += held.gpu
            free[1] += held.cpu
            free[2] += held.mem
            if pod.node is not None and pod.gpu_indices and pod.node in self.gpu_free:
                share = MILLI if pod.gpu.whole else pod.portion
                per_gpu = freed.setdefault(pod.node, {})
                for i in pod.gpu_indices:
                    per_gpu[i] = per_gpu.get(i, 0) + share
        if any(n > f for n, f in zip(self.need, free, strict=True)):
            return False
        best_whole, best_gpu, whole_total = self.best_whole, self.best_gpu, self.whole_total
        for name, extra in freed.items():
            if self.per_gpu_ok(best_whole, best_gpu, whole_total):
                return True
            base = self.gpu_free[name]
            after = [f + extra.get(i, 0) for i, f in enumerate(base)]
            whole = sum(1 for f in after if f >= MILLI)
            whole_total += whole - self.whole_free[name]
            best_whole = max(best_whole, whole)
            best_gpu = max(best_gpu, max(after, default=0))
        return self.per_gpu_ok(best_whole, best_gpu, whole_total)


class Accumulated:
    """The capacity filter over a growing victim set, updated per added step."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self.free = list(capacity.free)
        self.freed: dict[str, dict[int, int]] = {}
        self.best_whole = capacity.best_whole
        self.best_gpu = capacity.best_gpu
        self.whole: dict[str, int] = {}  # entirely free GPUs on the nodes victims touch
        self.whole_total = capacity.whole_total

    def add(self, victims: Sequence[Pod]) -> None:
        cap = self.capacity
        touched: set[str] = set()
        for pod in victims:
            if pod.status not in ACTIVE_ALLOCATED:
                continue
            held = pod.held()
            self.free[0] += held.gpu
            self.free[1] += held.cpu
            self.free[2] += held.mem
            if pod.node is not None and pod.gpu_indices and pod.node in cap.gpu_free:
                share = MILLI if pod.gpu.whole else pod.portion
                per_gpu = self.freed.setdefault(pod.node, {})
                for i in pod.gpu_indices:
                    per_gpu[i] = per_gpu.get(i, 0) + share
                touched.add(pod.node)
        for name in touched:
            extra = self.freed[name]
            after = [f + extra.get(i, 0) for i, f in enumerate(cap.gpu_free[name])]
            whole = sum(1 for f in after if f >= MILLI)
            self.whole_total += whole - self.whole.get(name, cap.whole_free[name])
            self.whole[name] = whole
            self.best_whole = max(self.best_whole, whole)
            self.best_gpu = max(self.best_gpu, max(after, default=0))

    def pods_hostable(self, node: str) -> int:
        """How many of the step's cheapest pods (fewest whole GPUs, or smallest share)
        ``node`` could take by its GPUs with the victims on it gone (an upper bound)."""
        cap = self.capacity
        base = cap.gpu_free.get(node)
        if base is None:
            return 0
        extra = self.freed.get(node, {})
        after = [f + extra.get(i, 0) for i, f in enumerate(base)]
        count = 0
        if cap.least_whole:
            count += sum(1 for f in after if f >= MILLI) // cap.least_whole
        if cap.least_share:
            count += sum(f // cap.least_share for f in after)
        return count

    def ok(self) -> bool:
        cap = self.capacity
        if any(n > f for n, f in zip(cap.need, self.free, strict=True)):
            return False
        return cap.per_gpu_ok(self.best_whole, self.best_gpu, self.whole_total)
