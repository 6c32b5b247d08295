"""Pods no scheduler arithmetic can use are reported, never let into a cycle."""

from __future__ import annotations

import pytest

from gpushare.controllers.translate import TranslateError, cpu_memory_requests
from gpushare.kube.quantity import QuantityError, parse_quantity


def _pod(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize("value", ["1e400", "1e19", 1e300, float("inf"), "9Ei", True])
def test_out_of_range_quantities_are_refused(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_parse_quantity_still_reads_the_usual_forms() -> None:
    assert parse_quantity("500m") * 2 == 1
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(4) == 4


@pytest.mark.parametrize(("spec", "field"), [
    ({"containers": [{"resources": {"requests": {"memory": "1e400"}}}]},
     "spec.containers[0].resources.requests.memory"),
    ({"containers": [{}], "initContainers": "x"}, "spec.initContainers"),
    ({"containers": ["x"]}, "spec.containers[0]"),
    ({"containers": [{"resources": {"requests": "x"}}]}, "spec.containers[0].resources"),
])
def test_a_malformed_pod_is_a_translate_error_naming_the_field(spec: dict[str, object],
                                                               field: str) -> None:
    with pytest.raises(TranslateError, match=field.replace("[", r"\[").replace("]", r"\]")):
        cpu_memory_requests(_pod(**spec))


def test_a_good_pod_still_sums_its_requests() -> None:
    pod = _pod(containers=[{"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "1"}}}],
               initContainers=[{"resources": {"requests": {"memory": "2Gi"}}}])
    assert cpu_memory_requests(pod) == (1250, 2 * 2**30)
