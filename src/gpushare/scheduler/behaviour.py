"""Behaviour switches: one frozen, typed object built once from the config (the way
kube-scheduler's ``feature.Features`` carries its feature gates), so that a rule reads a
named switch instead of testing ``compat == "kai"`` itself.

Each switch says what it changes; ``compat: kai`` turns on those where gpushare's own
default deliberately differs from KAI Scheduler (``docs/scheduling.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpushare.scheduler.config import Config


@dataclass(frozen=True, slots=True)
class Behaviour:
    #: KAI's exact arithmetic and rules wherever gpushare's default differs (the switches
    #: below are the ones already split out of it).
    kai: bool = False
    #: Fair-share division: ``kai`` (whole-unit flooring, leftover pass) or ``exact``.
    fairshare_mode: str = "exact"
    #: A ``gpu-memory`` pod is checked against limits and (non-preemptible) quota with
    #: KAI's figures: the step as its exact fraction of the largest GPU, then on each node
    #: its fraction of that node's GPU rounded up to two decimals, one device (KAI's
    #: predicate). gpushare's default checks both with what the pod would be charged: its
    #: two-decimal portion of the GPU (the largest for the step, the node's on each node),
    #: on every device.
    kai_quota_figures: bool = False
    #: A fraction goes to the fullest fitting shared GPU counting the fractions being
    #: released and the pipelined ones (pipelined there when it must wait), before an idle
    #: GPU; a GPU holding only pipelined fractions takes a new one pipelined: KAI's
    #: gpupack over FittingGPUs. gpushare's default puts a GPU where the fraction fits now
    #: first, by what stays on it.
    shared_fill_counts_releasing: bool = False
    #: Nodes where a pod fits now come first even when it is pipelined anyway (a gang
    #: reclaiming or preempting is pipelined whole, and KAI's nodeavailability still
    #: scores each node by what is free now), so the gang takes idle GPUs and GPUs being
    #: released together. gpushare's default orders a pipelined pod's nodes by placement
    #: alone.
    availability_orders_pipelined: bool = False
    #: Once a job's subgroup tree is satisfied, each extra pod is found walking the tree
    #: from the top, at each subgroup the first child by allocation ratio (satisfied
    #: children / minSubGroup, or active pods / minMember for a leaf) that has a pending
    #: pod, worked out again after each pod: KAI's subgrouporder. gpushare's default takes
    #: the first pending pod in task order, whatever its leaf.
    spare_pods_by_ratio: bool = False
    #: In a gang's victim search, the victims found in earlier rounds count as already
    #: given up by their queues when the victim order compares queues (KAI builds a fresh
    #: victim queue per round and pops the recorded victims from it again), so a reclaimer
    #: owed several GPUs takes one from each over-fair-share sibling, each one's
    #: lowest-priority job. gpushare's default compares a queue as it stands, less what
    #: the current round took.
    earlier_victims_given_up: bool = False
    #: A victim search's simulation places the asking job and the victims again in a fair
    #: order over every job with a pending pod (KAI's GetJobsToAllocate), each queue
    #: compared with its best job there, so a victim whose queue comes first takes its
    #: room back and reclaim that would loop is not started. gpushare's default orders
    #: only the jobs the simulation places, each queue compared with the step it places.
    fair_order_over_pending: bool = False
    #: A job whose PriorityClass says ``preemptionPolicy: Never`` evicts nothing to be
    #: placed (no reclaim, preempt or consolidation on its behalf), as kube-scheduler and
    #: Kueue do. KAI ignores the policy (off under ``compat: kai``).
    preemption_policy: bool = True
    #: A pod whose binds keep failing sits out a growing number of cycles
    #: (``bind_backoff.py``). KAI retries it in every cycle (off under ``compat: kai``).
    bind_backoff: bool = True

    # ---------------------------------------------------------------- victim search
    #: The victim queue compares queues as if their next victim were already taken
    #: (KAI), which reads every queue's next candidate before each pick; otherwise a
    #: queue is compared as it stands and only the queue picked is read.
    victim_lookahead: bool = False
    #: Only victims that could free something the asking step lacks where they run are
    #: read (:mod:`.actions.common.relevance`); KAI reads every candidate.
    victim_relevance: bool = True
    #: A victim step the action's rules refuse on its own is left out of the scenarios
    #: (and a queue none of whose steps they allow is closed), so it cannot hold back
    #: every scenario after it; KAI adds every step.
    admissible_victim_steps: bool = True
    #: Scenarios across nodes leave out victims on nodes that could host no pod of an
    #: all-GPU step; KAI tries every accumulated victim.
    prune_scenarios: bool = True
    #: In a simulation the asking job's step is pipelined whole (KAI); otherwise it is
    #: bound when all of it fits on free capacity.
    pipeline_asking_step: bool = False
    #: Once the asking job is placed, victims that still fit where they run stay there
    #: and only the others are placed again (also before the asking job, where the
    #: action allows it); KAI places every victim again, in fair order, like any pod.
    victims_stay_home: bool = True
    #: The min-runtime of an elastic victim protects its gang core while victims are
    #: chosen; KAI instead rejects a found scenario that takes into the core.
    min_runtime_in_search: bool = True
    #: Jobs that can have no victim (no lower-priority job in the queue for preempt,
    #: too few free GPUs for consolidation) are left out of the action's fair order
    #: before it starts; KAI pops and pre-checks every pending job.
    skip_hopeless_jobs: bool = True
    #: Defaults of the eviction options (``actions/common/options.py``), each overridable
    #: in the config except where said: consolidating reclaim bounded by
    #: ``maxDisruptionRatio`` (KAI bounds nothing, and the ratio is ignored), each action's
    #: search bounded by ``victimSearchBudget`` (KAI: unbounded unless set), and the
    #: steady fair-share path of reclaim (KAI: off, whatever is set).
    bounded_disruption: bool = True
    bounded_search: bool = True
    steady_fair_share_reclaim: bool = True

    @classmethod
    def of(cls, config: Config) -> Behaviour:
        kai = config.kai
        return cls(
            kai=kai,
            fairshare_mode=config.fairshare_mode,
            kai_quota_figures=kai,
            victim_lookahead=kai,
            victim_relevance=not kai,
            admissible_victim_steps=not kai,
            prune_scenarios=not kai,
            pipeline_asking_step=kai,
            victims_stay_home=not kai,
            min_runtime_in_search=not kai,
            skip_hopeless_jobs=not kai,
            shared_fill_counts_releasing=kai,
            availability_orders_pipelined=kai,
            spare_pods_by_ratio=kai,
            earlier_victims_given_up=kai,
            fair_order_over_pending=kai,
            preemption_policy=not kai,
            bind_backoff=not kai,
            bounded_disruption=not kai,
            bounded_search=not kai,
            steady_fair_share_reclaim=not kai,
        )
