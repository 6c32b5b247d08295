"""The action rules ``compat: kai`` switches on (docs/scheduling.md items 9-13): the
switches themselves, the spare-pod choice of a satisfied gang, and the GPU a fraction
goes to. The scenarios under tests/scenarios/kai-actions pin KAI's answers end to end;
these check the rules on states the scenarios do not cover."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_builders import cluster, queue

from gpushare.model import GpuRequest, Job, Pod, PodStatus
from gpushare.model.job import SubGroup
from gpushare.scheduler import Config
from gpushare.scheduler.behaviour import Behaviour
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.placement import fit_on_node
from gpushare.scheduler.session import Session

KAI_ACTION_SWITCHES = (
    "shared_fill_counts_releasing",
    "availability_orders_pipelined",
    "spare_pods_by_ratio",
    "earlier_victims_given_up",
    "fair_order_over_pending",
)


def test_compat_kai_turns_every_action_rule_on_and_the_default_keeps_them_off() -> None:
    kai = Behaviour.of(Config(compat="kai"))
    default = Behaviour.of(Config())
    assert [getattr(kai, name) for name in KAI_ACTION_SWITCHES] == [True] * 5
    assert [getattr(default, name) for name in KAI_ACTION_SWITCHES] == [False] * 5


# --------------------------------------------------------------- spare pods by ratio
def _tree_job(leaves: list[tuple[int, int, int]]) -> tuple[Job, list[Pod]]:
    """A job with one leaf per (minMember, running, pending), all under one branch."""
    job = Job("j", "default", "q")
    job.subgroups["branch"] = SubGroup("branch", children=[f"s{i}" for i in range(len(leaves))])
    pods: list[Pod] = []
    for i, (least, running, pending) in enumerate(leaves):
        job.subgroups[f"s{i}"] = SubGroup(f"s{i}", parent="branch", min_member=least)
        for status, count in ((PodStatus.RUNNING, running), (PodStatus.PENDING, pending)):
            for _ in range(count):
                pods.append(Pod(f"j-{len(pods)}", "default", job.key, len(pods),
                                gpu=GpuRequest(whole=1), status=status, subgroup=f"s{i}",
                                node="node0" if status is PodStatus.RUNNING else None))
    job.pods = [p.key for p in pods]
    return job, pods


def _ratio(least: int, running: int) -> tuple[int, Fraction]:
    """KAI's subgroup order of satisfied leaves: a positive minimum by ratio, then a
    minimum of 0 by fewer active pods."""
    return (0, Fraction(running, least)) if least > 0 else (1, Fraction(running))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 3)),
                min_size=1, max_size=5))
def test_a_satisfied_gangs_extra_pod_comes_from_the_leaf_of_lowest_ratio(leaves) -> None:
    leaves = [(least, max(running, least), pending) for least, running, pending in leaves]
    job, pods = _tree_job(leaves)
    gang = GangView(job, pods, by_ratio=True)
    assert gang.satisfied()
    step = gang.next_step()
    with_pending = [i for i, (_, _, pending) in enumerate(leaves) if pending]
    if not with_pending:
        assert step == []
        return
    assert step is not None and len(step) == 1
    chosen = int(step[0].subgroup[1:])  # type: ignore[index]
    lowest = min(_ratio(leaves[i][0], leaves[i][1]) for i in with_pending)
    assert _ratio(leaves[chosen][0], leaves[chosen][1]) == lowest
    # Among leaves of equal ratio the first by name (here: the first listed) wins.
    first_of_lowest = min(
        (p for p in pods if p.status is PodStatus.PENDING
         and _ratio(*leaves[int(p.subgroup[1:])][:2]) == lowest),  # type: ignore[index]
        key=lambda p: p.index,
    )
    assert step[0].key == first_of_lowest.key


def test_without_the_switch_the_extra_pod_is_the_first_in_task_order() -> None:
    job, pods = _tree_job([(1, 3, 1), (2, 2, 1)])
    assert GangView(job, pods).next_step() == [pods[3]]  # leaf s0 (ratio 3) listed first
    assert GangView(job, pods, by_ratio=True).next_step() == [pods[6]]  # s1: ratio 1


# ----------------------------------------------------------- the GPU a fraction takes
def _session(config: Config, pods: list[tuple[int, int, PodStatus]]) -> Session:
    """One node of 3 GPUs holding fractions (gpu index, milli-GPU, status)."""
    state = cluster(nodes=1, gpus=3)
    state.upsert_queue(queue("q", gpu_quota=3))
    job = Job("held", "default", "q")
    state.upsert_job(job)
    for i, (gpu, portion, status) in enumerate(pods):
        state.upsert_pod(Pod(f"held-{i}", "default", job.key, i,
                             gpu=GpuRequest(portion=portion), status=status, node="node0",
                             gpu_indices=(gpu,), portion=portion))
    return Session(state, config, 0.0)


def _place_half(session: Session) -> tuple[tuple[int, ...], bool]:
    pod = Pod("new-0", "default", "default/new", 0, gpu=GpuRequest(portion=500))
    fit = fit_on_node(session, pod, session.state.usage["node0"])
    assert fit is not None
    return fit.gpu_indices, fit.now


def test_a_gpu_whose_fractions_all_leave_counts_as_whole_under_kai() -> None:
    # GPU 0: one fraction being released and nothing staying; GPU 1: a running 0.3.
    held = [(0, 700, PodStatus.RELEASING), (1, 300, PodStatus.RUNNING)]
    # KAI: GPU 0 is a whole GPU being freed (fill 0), so the shared GPU 1 comes first.
    assert _place_half(_session(Config(compat="kai"), held)) == ((1,), True)
    # Default: GPU 1 fits now as well, and is the fuller of what stays: the same GPU.
    assert _place_half(_session(Config(), held)) == ((1,), True)


def test_a_gpu_holding_only_pipelined_fractions_takes_a_new_one_pipelined_under_kai() -> None:
    held = [(2, 500, PodStatus.PIPELINED)]
    assert _place_half(_session(Config(compat="kai"), held)) == ((2,), False)
    assert _place_half(_session(Config(), held)) == ((2,), True)


def test_the_releasing_part_of_a_shared_gpu_counts_in_its_fill_under_kai() -> None:
    # GPU 0: 0.3 running + 0.5 releasing (0.7 free once released), GPU 1: 0.4 running.
    held = [(0, 300, PodStatus.RUNNING), (0, 500, PodStatus.RELEASING),
            (1, 400, PodStatus.RUNNING)]
    # KAI fills by everything on the GPU: GPU 0 (0.8) before GPU 1 (0.4), pipelined.
    assert _place_half(_session(Config(compat="kai"), held)) == ((0,), False)
    # Default: a GPU where the half fits now first: GPU 1, bound.
    assert _place_half(_session(Config(), held)) == ((1,), True)
