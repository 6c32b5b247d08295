"""Attack: a tenant admin asks its own cluster's TokenReview about a token it found (in a
log, a leaked file, a pod's environment). A review that confirms the host admin's token
(valid in every logical cluster) or the tenancy identity's tells the tenant it holds a
platform credential and whose: inside a tenant, TokenReview confirms only tokens of that
tenant."""

from __future__ import annotations

import json

import pytest
import yaml
from tenancy_support import QUEUES, Kubectl, Platform


def _token(kubeconfig) -> str:  # type: ignore[no-untyped-def]
    return yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]


def _review(kubectl: Kubectl, token: str) -> dict:
    done = kubectl.run("create", "-o", "json", "-f", "-", stdin=json.dumps({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token}}))
    return json.loads(done.stdout)["status"]


@pytest.fixture(scope="module")
def tenants(platform: Platform) -> tuple[Kubectl, Kubectl]:
    platform.host.apply(QUEUES % {"gpus": 1, "quota": 0.33})
    return (platform.tenant("reviewer", "--queue", "nlp"),
            platform.tenant("neighbour", "--queue", "vision"))


@pytest.mark.parametrize("credential", ["admin.kubeconfig", "tenancy.kubeconfig",
                                        "controllers.kubeconfig", "agent.kubeconfig"])
def test_a_tenant_review_does_not_confirm_platform_tokens(
        platform: Platform, tenants: tuple[Kubectl, Kubectl], credential: str) -> None:
    reviewer, _ = tenants
    token = _token(platform.data / credential)
    status = _review(reviewer, token)
    assert status["authenticated"] is False and "user" not in status, status


def test_a_tenant_review_does_not_confirm_another_tenants_token(
        tenants: tuple[Kubectl, Kubectl]) -> None:
    reviewer, neighbour = tenants
    status = _review(reviewer, _token(neighbour.kubeconfig))
    assert status["authenticated"] is False and "user" not in status, status


def test_reviews_still_confirm_their_own_clusters_tokens(
        platform: Platform, tenants: tuple[Kubectl, Kubectl]) -> None:
    reviewer, _ = tenants
    own = _review(reviewer, _token(reviewer.kubeconfig))
    assert own["authenticated"] is True, own
    host = _review(platform.host, _token(platform.data / "admin.kubeconfig"))
    assert host["authenticated"] is True and host["user"]["username"], host
