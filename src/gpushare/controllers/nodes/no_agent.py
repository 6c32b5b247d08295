"""Agentless nodes take only pods that tolerate them.

``gpushare node add`` registers declared capacity with no agent: a pod bound there never
runs (it stays ``Pending`` in phase). Such a node carries the taint
``gpushare.io/no-agent=true:NoSchedule`` (as virtual-kubelet nodes carry theirs), so
kube-scheduler on a real cluster leaves it alone, and so does the gpushare scheduler,
which honours every ``NoSchedule``/``NoExecute`` taint (``controllers/scheduling/taints.py``): a pod
lands there only with a matching toleration (capacity planning, scheduling tests)::

    tolerations: [{key: gpushare.io/no-agent, operator: Exists, effect: NoSchedule}]
"""

from __future__ import annotations

from gpushare.api.contracts import NO_AGENT_TAINT

TAINT = {"key": NO_AGENT_TAINT, "value": "true", "effect": "NoSchedule"}
