"""The redaction of host texts copied to a tenant (pure)."""

from __future__ import annotations

from gpushare.tenancy.redact import HIDDEN_POD, HIDDEN_QUEUE, redact, redact_status


def own(ns: str, name: str) -> str | None:
    return "default/train" if (ns, name) == ("vc-red", "train-x1") else None


def test_foreign_queues_and_pods_are_hidden_own_ones_translated() -> None:
    text = ("evicted by reclaim: over quota (from queue nlp for queue vision: "
            "vc-blue/claim-a1, default/p) and vc-red/train-x1; queue 'ml-org': allocated 1")
    out = redact(text, ["nlp"], own)
    assert out == (f"evicted by reclaim: over quota (from queue nlp for {HIDDEN_QUEUE}: "
                   f"{HIDDEN_POD}, {HIDDEN_POD}) and default/train; {HIDDEN_QUEUE}: allocated 1")


def test_resource_names_and_counts_are_left_alone() -> None:
    text = "0/1 nodes are available: insufficient nvidia.com/gpu, gpushare.io/gpu-indices"
    assert redact(text, [], own) == text


def test_status_messages_of_conditions() -> None:
    status = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "message": "queue ml-org: over limit"}]}
    out = redact_status(status, ["nlp"], own)
    assert out["conditions"][0]["message"] == f"{HIDDEN_QUEUE}: over limit"
    assert status["conditions"][0]["message"] == "queue ml-org: over limit"  # not changed
