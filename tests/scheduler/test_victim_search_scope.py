"""What the victim search looks at outside ``compat: kai``: only victims that free what
the step lacks, steps at least as large as one the rules refused skipped, and the
disruption bound read on GPUs; and the lazy per-queue candidate lists."""

from __future__ import annotations

import random

from test_victim_actions import PENDING, cycle, job, queue, running, scenario

from gpushare.model import Job
from gpushare.scheduler.actions.common.victim_queue import _Candidate, _Leaf


def _gpu_node_with_cpu_pods(**config):
    # n0: q0 holds both GPUs with two 1-GPU jobs and also runs four CPU-only jobs; plenty
    # of CPU is left. q1 (quota 1) wants one GPU back.
    cpu_only = {"resources": {"gpus": 0, "cpuMillis": 1000}}
    return scenario(
        [{"name": "n0", "gpus": 2}, {"name": "n1", "gpus": 0}],
        [queue("q0", quota=1), queue("q1", quota=1)],
        [job(f"g{i}", "q0", [running("n0")], age=100 - i) for i in range(2)]
        + [job(f"c{i}", "q0", [running("n0")], age=10 - i, **cpu_only) for i in range(4)]
        + [job("p", "q1", [PENDING])],
        actions=["reclaim"],
        **config,
    )


def test_cpu_only_pods_are_never_disrupted_for_a_gpu_reclaim():
    out = cycle(_gpu_node_with_cpu_pods())
    assert out["p-0"][0] == "Pipelined"
    assert sorted(name for name, (status, _) in out.items() if status == "Releasing") == ["g1-0"]
    assert all(out[f"c{i}-0"] == ("Running", "n0") for i in range(4))


def test_kai_takes_cpu_only_pods_in_victim_order_too():
    # KAI's victim order offers the younger CPU-only jobs first; they free no GPU, yet the
    # simulation evicts them and places them again (on n1, a GPU-less node: a move).
    out = cycle(_gpu_node_with_cpu_pods(compat="kai"))
    assert out["p-0"][0] == "Pipelined"
    assert any(out[f"c{i}-0"] != ("Running", "n0") for i in range(4))


def test_disruption_bound_reads_gpus_for_a_gpu_reclaim():
    # The only way in for the 1-GPU job is a move: the bound holds it to 2 GPUs of moved or
    # evicted pods, whatever CPU and memory those pods hold.
    heavy = {"resources": {"gpus": 1, "cpuMillis": 30000, "memoryMiB": 200000}}
    data = scenario(
        [{"name": "n0", "gpus": 1}, {"name": "n1", "gpus": 1}],
        [queue("q0", quota=0), queue("q1", quota=1)],
        [job("v", "q0", [running("n0")], age=100, **heavy),
         job("p", "q1", [{"state": "Pending", "nodeSelector": {"pool": "a"}}])],
        actions=["reclaim"],
    )
    data["nodes"][0]["labels"] = {"pool": "a"}
    out = cycle(data)
    assert out["p-0"] == ("Pipelined", "n0")
    assert out["v-0"] == ("Pipelined", "n1")  # moved: 1 GPU disrupted for 1 asked


# ------------------------------------------------------------------ lazy candidate lists
class _Steps:
    """Just enough of VictimSteps for the leaf view."""

    def __init__(self, state: int) -> None:
        self.state = state

    def elastic_state(self) -> int:
        return self.state


def test_lazy_leaf_yields_the_sorted_filtered_order():
    rnd = random.Random(5)
    for _ in range(50):
        jobs = [Job(f"j{i}", "ns", "q", priority=rnd.choice((10, 50, 90)),
                    created_at=float(rnd.randrange(100))) for i in range(rnd.randrange(1, 30))]
        keep = {j.key for j in jobs if rnd.random() < 0.7}
        entries = [((-j.priority, 1, j.created_at, j.key), j) for j in jobs]
        split = rnd.randrange(len(entries) + 1)
        lists = [sorted(entries[:split], key=lambda e: e[0]),
                 sorted(entries[split:], key=lambda e: e[0])]
        leaf = _Leaf(lists, lambda j, keep=keep: j.key in keep,
                     lambda j: _Candidate(j, _Steps(1)))  # type: ignore[arg-type]
        got = []
        while (candidate := leaf.pop()) is not None:
            got.append(candidate.job.key)
        expected = [j.key for _, j in sorted(entries, key=lambda e: e[0], reverse=True)
                    if j.key in keep]
        assert got == expected


def test_a_refused_step_skips_the_queues_steps_at_least_as_large():
    jobs = [Job(f"j{i}", "ns", "q", created_at=float(i)) for i in range(4)]
    entries = sorted((((-50, 1, j.created_at, j.key), j) for j in jobs), key=lambda e: e[0])
    # Least GPU, CPU and memory of each job's pods: j3 (taken first) is the largest.
    smallest = {"ns/j0": (250, 1000, 1), "ns/j1": (2000, 8000, 1), "ns/j2": (1000, 4000, 1),
                "ns/j3": (2000, 8000, 1)}
    caps: list[tuple[int, int, int]] = []
    leaf = _Leaf([entries], lambda j: True, lambda j: _Candidate(j, _Steps(1)),  # type: ignore[arg-type]
                 smallest, caps)
    first = leaf.pop()
    assert first is not None and first.job.key == "ns/j3"
    caps.append((2000, 8000, 1))  # j3 was refused: j1 is as large, j2 and j0 smaller
    leaf.recheck_top()
    order = []
    while (candidate := leaf.pop()) is not None:
        order.append(candidate.job.key)
    assert order == ["ns/j2", "ns/j0"]


class _GroupedSources(dict):
    """Leaf sources whose refusals are shared by every leaf (one group)."""

    def group(self, leaf: str) -> str:
        return "one branch"


def test_a_refused_step_skips_steps_as_large_in_every_queue_of_its_group():
    from gpushare.model import GpuRequest, Pod, PodStatus
    from gpushare.scheduler.actions.common.victim_queue import VictimQueue
    from gpushare.scheduler.plugins.proportion.resource_share import QueueShare

    pods: dict[str, list[Pod]] = {}
    lists: dict[str, list] = {"a1": [], "a2": []}
    smallest: dict[str, dict[str, tuple[int, int, int]]] = {"a1": {}, "a2": {}}
    # Each queue runs one 2-GPU job (newest, taken first) and one quarter-GPU job.
    for leaf in ("a1", "a2"):
        kinds = (("big", GpuRequest(whole=2), 2.0), ("small", GpuRequest(portion=250), 1.0))
        for kind, gpu, age in kinds:
            j = Job(f"{leaf}-{kind}", "ns", leaf, created_at=age)
            pod = Pod(f"{j.name}-0", "ns", j.key, 0, gpu=gpu, cpu_millis=1000,
                      status=PodStatus.RUNNING, node="n0",
                      gpu_indices=(0, 1) if kind == "big" else (2,),
                      portion=1000 if kind == "big" else 250)
            pods[j.key] = [pod]
            held = pod.held()
            smallest[leaf][j.key] = (held.gpu, held.cpu, held.mem)
            lists[leaf].append(((-j.priority, 1, j.created_at, j.key), j))
        lists[leaf].sort(key=lambda e: e[0])
    sources = _GroupedSources({
        leaf: ([lists[leaf]], lambda j: True, smallest[leaf]) for leaf in ("a1", "a2")
    })
    shares = {name: QueueShare(name, None) for name in ("a1", "a2")}
    queue = VictimQueue(sources, lambda j: pods[j.key], shares, {}, lookahead=False)
    first = queue.pop()
    assert first is not None and first[0].name.endswith("-big")
    queue.refuse(first[0].queue, first[1])  # a 2-GPU step refused: in a1 and a2 alike
    rest = []
    while (nxt := queue.pop()) is not None:
        rest.append(nxt[0].name)
    assert sorted(rest) == ["a1-small", "a2-small"]
