"""``gpushare queue``: share options and the tree table."""

from __future__ import annotations

import pytest
import typer

from gpushare.cli.up import format_queue_table, parse_share


def test_share_option_forms():
    assert parse_share("--gpu", None) == {"quota": 0.0, "limit": -1.0, "overQuotaWeight": 1.0}
    assert parse_share("--gpu", "0.33") == {"quota": 0.33, "limit": -1.0, "overQuotaWeight": 1.0}
    assert parse_share("--gpu", "0.33:1:2") == {"quota": 0.33, "limit": 1.0,
                                                "overQuotaWeight": 2.0}


def test_bad_share_names_the_option_and_field():
    with pytest.raises(typer.BadParameter, match="limit"):
        parse_share("--gpu", "1:lots")


def test_table_is_a_tree_with_gpu_figures():
    queues = [
        {"metadata": {"name": "nlp"}, "spec": {"parentQueue": "ml-org",
                                                "resources": {"gpu": {"quota": 0.33, "limit": 1}}},
         "status": {"fairShare": {"nvidia.com/gpu": "330m"},
                    "allocated": {"nvidia.com/gpu": "330m"}}},
        {"metadata": {"name": "ml-org"}, "spec": {"resources": {"gpu": {"quota": 1,
                                                                         "limit": -1}}}},
    ]
    lines = format_queue_table(queues).splitlines()
    assert lines[0].split()[:2] == ["QUEUE", "PRIORITY"]
    assert lines[1].startswith("ml-org") and "unlimited" in lines[1]
    assert lines[2].startswith("  nlp") and lines[2].count("330m") == 2
