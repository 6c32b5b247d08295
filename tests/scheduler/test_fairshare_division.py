from fractions import Fraction as F

from gpushare.model.quantities import RESOURCES
from gpushare.scheduler.plugins.proportion.resource_division import ShareInput, divide

UNL = F(-1)


def q(name, parent=None, quota=0, limit=-1, weight=1, request=None, priority=100, created=0.0,
      usage=None):
    zero = {r: F(0) for r in RESOURCES}
    return ShareInput(
        name=name, parent=parent, priority=priority, created_at=created,
        quota={**zero, "gpu": F(str(quota))},
        limit={**{r: UNL for r in RESOURCES}, "gpu": F(str(limit))},
        weight={**{r: F(0) for r in RESOURCES}, "gpu": F(str(weight))},
        request={} if request is None else {"gpu": F(str(request))},
        usage={} if usage is None else {"gpu": F(str(usage))},
    )


def ml_org(requests):
    return [q("ml-org", quota=1, limit=1)] + [
        q(n, "ml-org", quota="0.33", limit=1, request=r) for n, r in requests.items()
    ]


def test_kai_two_bursting_teams_floor_to_whole_units():
    shares = divide({"gpu": F(1)}, ml_org({"nlp": 1, "vision": 1, "recsys": 0}), mode="kai")
    assert shares["nlp"]["gpu"] == F("0.67")
    assert shares["vision"]["gpu"] == F("0.33")
    assert shares["recsys"]["gpu"] == 0


def test_default_shares_sub_unit_leftover_by_weight():
    shares = divide({"gpu": F(1)}, ml_org({"nlp": 1, "vision": 1, "recsys": 0}))
    assert shares["nlp"]["gpu"] == F("0.5")
    assert shares["vision"]["gpu"] == F("0.5")


def test_default_respects_request_and_gives_the_rest_to_others():
    shares = divide({"gpu": F(1)}, ml_org({"nlp": 1, "vision": "0.4", "recsys": 0}))
    assert shares["vision"]["gpu"] == F("0.4")
    assert shares["nlp"]["gpu"] == F("0.6")


def test_parent_request_is_the_sum_of_its_children():
    shares = divide({"gpu": F(1)}, ml_org({"nlp": "0.33", "vision": "0.33", "recsys": "0.33"}),
                    mode="kai")
    assert shares["ml-org"]["gpu"] == F("0.99")


def test_higher_priority_bucket_is_served_first():
    queues = [q("hi", priority=200, request=10), q("lo", priority=100, request=10)]
    shares = divide({"gpu": F(6)}, queues, mode="kai")
    assert shares["hi"]["gpu"] == 6
    assert shares["lo"]["gpu"] == 0


def test_limit_caps_the_over_quota_share():
    queues = [q("a", limit=2, request=10), q("b", request=10)]
    shares = divide({"gpu": F(8)}, queues, mode="kai")
    assert shares["a"]["gpu"] == 2
    assert shares["b"]["gpu"] == 6


def test_leftover_ties_go_to_the_older_queue():
    queues = [q("a", request=10, created=5.0), q("b", request=10, created=1.0)]
    shares = divide({"gpu": F(1)}, queues, mode="kai")
    assert shares["b"]["gpu"] == 1
    assert shares["a"]["gpu"] == 0


def test_usage_shifts_over_quota_share():
    queues = [q("used", request=100, usage="0.5"), q("fresh", request=100, usage=0)]
    exact = divide({"gpu": F(12)}, queues)
    assert exact["fresh"]["gpu"] > exact["used"]["gpu"]


def test_orphan_queues_are_dropped():
    shares = divide({"gpu": F(1)}, [q("a", request=1), q("lost", parent="nowhere", request=1)])
    assert "lost" not in shares
    assert shares["a"]["gpu"] == 1
