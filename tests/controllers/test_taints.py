"""NoSchedule / NoExecute taints keep out pods that do not tolerate them (Kubernetes'
TaintToleration filter), whatever the taint; the core sees them as labels and terms."""

from __future__ import annotations

import copy

from test_mirror import NOW, pod, podgroup, queue

from gpushare.api.taints import blocking_taints, tolerated
from gpushare.controllers.nodes.static_nodes import static_node
from gpushare.controllers.scheduling.mirror import Mirror
from gpushare.controllers.scheduling.taints import allowed
from gpushare.scheduler.config import Config
from gpushare.scheduler.cycle import run_cycle

DEDICATED = ("dedicated", "inference", "NoSchedule")


def test_tolerations_match_as_in_kubernetes():
    assert tolerated({"key": "dedicated", "value": "inference"}, DEDICATED)  # Equal default
    assert not tolerated({"key": "dedicated", "value": "training"}, DEDICATED)
    assert tolerated({"key": "dedicated", "operator": "Exists"}, DEDICATED)
    assert tolerated({"operator": "Exists"}, DEDICATED)  # empty key + Exists: everything
    assert not tolerated({"operator": "Equal", "value": "inference"}, DEDICATED)
    assert tolerated({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},
                     DEDICATED)
    assert not tolerated({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
                         DEDICATED)


def test_only_filtering_effects_count_and_a_pod_needs_all_tolerated():
    node = {"spec": {"taints": [
        {"key": "a", "value": "1", "effect": "NoSchedule"},
        {"key": "b", "effect": "NoExecute"},
        {"key": "c", "effect": "PreferNoSchedule"},
    ]}}
    taints = blocking_taints(node)
    assert taints == (("a", "1", "NoSchedule"), ("b", "", "NoExecute"))
    only_a = {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}
    both = {"spec": {"tolerations": [{"key": "a", "operator": "Exists"},
                                     {"key": "b", "operator": "Exists"}]}}
    assert allowed(only_a, [taints]) == ("",)
    assert allowed(both, [taints]) == ("", "a=1:NoSchedule,b=:NoExecute")


def _tainted(name, taints):
    node = static_node(name, "1xL40S", "64", "512Gi", {}, NOW, taint=False)
    node["spec"]["taints"] = taints
    return node


def _bound_nodes(mirror):
    return {b.pod: b.node for b in run_cycle(mirror.state, Config(), 1.0).binds}


def test_the_core_places_pods_only_where_their_tolerations_allow():
    mirror = Mirror()
    mirror.on_node("ADDED", _tainted("infer", [
        {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]))
    mirror.on_queue("ADDED", queue("team", quota=2, limit=-1))
    for name in ("plain", "tolerant"):
        mirror.on_podgroup("ADDED", podgroup(f"pg-{name}", "team"))
    plain = pod("plain", "pg-plain", fraction="0.5")
    tolerant = pod("tolerant", "pg-tolerant", fraction="0.5")
    tolerant["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal",
                                        "value": "inference", "effect": "NoSchedule"}]
    mirror.on_pod("ADDED", plain)
    mirror.on_pod("ADDED", tolerant)
    assert _bound_nodes(mirror) == {"ns/tolerant": "infer"}

    # The taint removed (kubectl taint ... dedicated-): the plain pod may go there too.
    untainted = copy.deepcopy(_tainted("infer", []))
    mirror.on_node("MODIFIED", untainted)
    assert "ns/plain" in _bound_nodes(mirror)


def test_a_node_tainted_later_is_left_to_the_pods_that_tolerate_it():
    mirror = Mirror()
    mirror.on_node("ADDED", _tainted("box", []))
    mirror.on_queue("ADDED", queue("team", quota=2, limit=-1))
    mirror.on_podgroup("ADDED", podgroup("pg", "team"))
    mirror.on_pod("ADDED", pod("p", "pg", fraction="0.5"))
    mirror.on_node("MODIFIED", _tainted("box", [{"key": "maintenance", "effect": "NoExecute"}]))
    assert _bound_nodes(mirror) == {}
