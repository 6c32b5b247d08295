from scheduler_builders import add_job, cluster, queue

from gpushare.model import Node, PodStatus
from gpushare.model.node import TAINTS_LABEL
from gpushare.scheduler import Config, run_cycle

ALLOCATE = Config(actions=("allocate",))


def teams(state, limit=-1):
    state.upsert_queue(queue("org", gpu_quota=1, gpu_limit=1))
    for name in ("nlp", "vision"):
        state.upsert_queue(queue(name, "org", gpu_quota="0.33", gpu_limit=limit))


def test_limit_reason_names_queue_and_numbers():
    state = cluster(gpus=2)
    teams(state, limit=1)
    add_job(state, "a", "nlp", portion=1000 - 1, status=PodStatus.PENDING)
    add_job(state, "b", "nlp", portion=330)
    result = run_cycle(state, ALLOCATE, 0)
    assert result.pending_reasons["default/b"] == (
        "OverLimit: queue nlp: allocated 1.00 + request 0.33 GPU > limit 1.00"
    )


def test_gang_reason_counts_pods():
    state = cluster(gpus=3)
    state.upsert_queue(queue("q", gpu_quota=-1))
    add_job(state, "gang", "q", pods=4, whole=1)
    result = run_cycle(state, ALLOCATE, 0)
    assert result.binds == []
    assert result.pending_reasons["default/gang"].startswith(
        "Resources were found for 3 pods while 4 are required for gang scheduling"
    )


def test_gang_is_all_or_nothing_and_then_grows_one_pod_at_a_time():
    state = cluster(gpus=3)
    state.upsert_queue(queue("q", gpu_quota=-1))
    add_job(state, "elastic", "q", pods=5, whole=1, min_member=2)
    result = run_cycle(state, ALLOCATE, 0)
    assert len(result.binds) == 3
    assert "default/elastic" in result.pending_reasons


def test_fractions_pack_onto_the_fullest_gpu_and_spread_onto_the_emptiest():
    for placement, expected in (("binpack", (0,)), ("spread", (1,))):
        state = cluster(gpus=2)
        state.upsert_queue(queue("q", gpu_quota=-1))
        add_job(state, "first", "q", portion=500)
        run_cycle(state, Config(actions=("allocate",), gpu_placement=placement), 0)
        add_job(state, "second", "q", portion=250)
        result = run_cycle(state, Config(actions=("allocate",), gpu_placement=placement), 0)
        assert result.binds[0].gpu_indices == expected, placement


def test_multi_device_fraction_takes_distinct_gpus():
    state = cluster(gpus=2)
    state.upsert_queue(queue("q", gpu_quota=-1))
    job = add_job(state, "md", "q", portion=500)
    pod = state.job_pods(job)[0]
    state.remove_pod(pod.key)
    pod.gpu = type(pod.gpu)(portion=500, devices=2)
    state.upsert_pod(pod)
    result = run_cycle(state, ALLOCATE, 0)
    assert result.binds[0].gpu_indices == (0, 1)
    assert result.binds[0].portion_milli == 500
    assert result.binds[0].gpu_memory_mib == 50


def test_gpu_memory_request_becomes_a_portion_of_the_node_gpu():
    state = cluster(gpus=1, gpu_memory_mib=80)
    state.upsert_queue(queue("q", gpu_quota=-1))
    add_job(state, "mem", "q", memory_mib=20)
    result = run_cycle(state, ALLOCATE, 0)
    assert result.binds[0].portion_milli == 250
    assert result.binds[0].gpu_memory_mib == 20


def test_not_ready_nodes_and_selectors_are_respected():
    state = cluster(nodes=0)
    state.upsert_node(Node("down", gpus=4, ready=False))
    state.upsert_node(Node("a100", gpus=4, labels={"type": "a100"}))
    state.upsert_node(Node("t4", gpus=4, labels={"type": "t4"}))
    state.upsert_queue(queue("q", gpu_quota=-1))
    job = add_job(state, "sel", "q", whole=1)
    state.job_pods(job)[0].node_selector = {"type": "t4"}
    result = run_cycle(state, ALLOCATE, 0)
    assert [b.node for b in result.binds] == ["t4"]


def test_max_pods_limits_a_node():
    state = cluster(nodes=0)
    state.upsert_node(Node("small", gpus=0, max_pods=1))
    state.upsert_queue(queue("q", gpu_quota=-1))
    add_job(state, "two", "q", pods=2, min_member=1)
    result = run_cycle(state, ALLOCATE, 0)
    assert len(result.binds) == 1


def test_whole_gpu_job_is_pipelined_onto_releasing_gpus():
    state = cluster(gpus=1)
    state.upsert_queue(queue("q", gpu_quota=-1))
    add_job(state, "old", "q", whole=1, status=PodStatus.RELEASING, node="node0")
    add_job(state, "new", "q", whole=1)
    result = run_cycle(state, ALLOCATE, 0)
    assert [p.pod for p in result.pipelines] == ["default/new-0"]
    assert result.binds == []


def test_same_input_same_decisions():
    def once():
        state = cluster(nodes=3, gpus=4)
        state.upsert_queue(queue("root", gpu_quota=-1))
        for t in range(3):
            state.upsert_queue(queue(f"t{t}", "root", gpu_quota=2))
            for j in range(3):
                add_job(state, f"t{t}-j{j}", f"t{t}", pods=2, whole=1, created_at=j)
        return run_cycle(state, ALLOCATE, 0)

    assert once() == once()


def test_queue_report_has_fair_share_and_allocation():
    state = cluster(gpus=1)
    teams(state)
    add_job(state, "a", "nlp", portion=330)
    result = run_cycle(state, ALLOCATE, 0)
    report = result.queues["nlp"]
    assert report.fair_share["gpu"] == 0.33
    assert report.allocated["gpu"] == 0.33
    assert report.requested["gpu"] == 0.33


def test_jobs_of_a_shape_that_found_no_room_get_their_own_reason():
    state = cluster(gpus=1)
    state.upsert_queue(queue("q", gpu_quota=-1))
    add_job(state, "fits", "q", whole=1, created_at=0)
    add_job(state, "late-a", "q", whole=1, created_at=1)
    add_job(state, "late-b", "q", whole=1, created_at=2)
    result = run_cycle(state, ALLOCATE, 0)
    assert [b.pod for b in result.binds] == ["default/fits-0"]
    assert result.pending_reasons["default/late-a"] == (
        "Resources were not found for pod default/late-a-0 due to: "
        "0/1 nodes are available: 1 node(s) insufficient GPUs."
    )
    assert result.pending_reasons["default/late-b"] == (
        result.pending_reasons["default/late-a"].replace("late-a", "late-b")
    )


def test_reason_counts_nodes_that_are_not_ready_or_do_not_match():
    state = cluster(nodes=0)
    state.upsert_node(Node("down", gpus=4, ready=False))
    state.upsert_node(Node("other", gpus=4, labels={"type": "a100"}))
    state.upsert_queue(queue("q", gpu_quota=-1))
    job = add_job(state, "sel", "q", whole=1)
    state.job_pods(job)[0].node_selector = {"type": "t4"}
    result = run_cycle(state, ALLOCATE, 0)
    assert result.pending_reasons["default/sel"].endswith(
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) were not ready."
    )


def test_reason_uses_kube_schedulers_wording_for_cordoned_and_tainted_nodes():
    state = cluster(nodes=0)
    state.upsert_node(Node("cordoned", gpus=4, ready=False, cordoned=True))
    state.upsert_node(Node("agentless", gpus=4, labels={
        TAINTS_LABEL: "gpushare.io/no-agent=true:NoSchedule"}))
    state.upsert_queue(queue("q", gpu_quota=-1))
    job = add_job(state, "t", "q", whole=1)
    state.job_pods(job)[0].node_affinity = ((TAINTS_LABEL, ("",)),)
    result = run_cycle(state, ALLOCATE, 0)
    assert result.pending_reasons["default/t"].endswith(
        "0/2 nodes are available: 1 node(s) had untolerated taint "
        "{gpushare.io/no-agent: true}, 1 node(s) were unschedulable."
    )
