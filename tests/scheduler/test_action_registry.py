"""The action registry is explicit and fails loudly: all five actions, each one running."""

import subprocess
import sys

import pytest
from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.actions.registry import ACTIONS, UnknownActionError, get_action
from gpushare.scheduler.config import DEFAULT_ACTIONS

FIVE = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


def test_the_five_actions_are_registered_in_kai_order():
    assert tuple(ACTIONS) == FIVE == DEFAULT_ACTIONS
    for name in FIVE:
        assert callable(get_action(name))
    assert len({id(fn) for fn in ACTIONS.values()}) == 5


def test_an_unknown_action_is_an_error_not_a_skip():
    with pytest.raises(UnknownActionError, match=r"unknown action .reclam.*known: allocate"):
        get_action("reclam")
    with pytest.raises(UnknownActionError):
        run_cycle(cluster(), Config(actions=("allocate", "reclam")), 0)


def test_a_broken_action_module_breaks_the_import_of_the_scheduler():
    code = (
        "import sys; sys.modules['gpushare.scheduler.actions.reclaim'] = None\n"
        "try:\n    import gpushare.scheduler\nexcept ImportError as e:\n    print('failed', e)\n"
        "else:\n    print('imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("failed"), out


def _case(owed_queue: str, owed_priority: int):
    """One GPU held by a train job of queue a (quota 0); a job waits for it."""
    state = cluster(gpus=1)
    state.upsert_queue(queue("a", gpu_quota=0))
    state.upsert_queue(queue("b", gpu_quota=1))
    add_job(state, "burst", "a", whole=1, status=PodStatus.RUNNING, node="node0")
    add_job(state, "owed", owed_queue, whole=1, priority=owed_priority)
    return state


def test_reclaim_and_preempt_each_act_only_when_named():
    # Queue b is owed the GPU: only reclaim frees it.
    assert run_cycle(_case("b", 50), Config(actions=("allocate", "preempt")), 0).evictions == []
    result = run_cycle(_case("b", 50), Config(actions=("allocate", "reclaim")), 0)
    assert [(e.pod, e.action) for e in result.evictions] == [("default/burst-0", "reclaim")]
    # A higher-priority (75, still preemptible) job of queue a itself: only preempt frees it.
    assert run_cycle(_case("a", 75), Config(actions=("allocate", "reclaim")), 0).evictions == []
    result = run_cycle(_case("a", 75), Config(actions=("allocate", "preempt")), 0)
    assert [(e.pod, e.action) for e in result.evictions] == [("default/burst-0", "preempt")]


def test_a_cycle_runs_every_configured_action_in_order(monkeypatch):
    import gpushare.scheduler.cycle as cycle

    ran = []
    monkeypatch.setattr(cycle, "get_action",
                        lambda name: (lambda session: ran.append(name)))
    run_cycle(cluster(), Config(), 0)
    assert tuple(ran) == FIVE
