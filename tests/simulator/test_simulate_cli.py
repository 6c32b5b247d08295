import json
from pathlib import Path

from typer.testing import CliRunner

from gpushare.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios"
runner = CliRunner()


def test_passing_scenario_exits_zero():
    path = EXAMPLES / "allocate" / "002-pending-jobs-placed-in-order.yaml"
    result = runner.invoke(app, ["simulate", "scenario", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok")


def test_json_prints_one_report_per_line():
    paths = [EXAMPLES / "fairshare" / "083-seed-ml-org-two-bursting-teams.yaml",
             EXAMPLES / "allocate" / "024-fraction-joins-half-used-gpu.yaml"]
    result = runner.invoke(app, ["simulate", "scenario", "--json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines[0]["queues"]["nlp"]["fairShare"]["gpu"] == 0.67
    assert lines[1]["tasks"]["pending_shared_gpu_job1-0"]["status"] == "Binding"


def test_mismatch_exits_one_with_a_diff(tmp_path):
    text = (EXAMPLES / "allocate" / "010-deserved-queue-before-zero-quota-queue.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("pending_job1: {status: Binding", "pending_job1: {status: Pending"))
    result = runner.invoke(app, ["simulate", "scenario", str(bad)])
    assert result.exit_code == 1
    assert "pending_job1-0: status is Binding, expected Pending" in result.output


def test_bad_file_exits_one_naming_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: 1\nname: x\nnodez: []\n")
    result = runner.invoke(app, ["simulate", "scenario", str(bad)])
    assert result.exit_code == 1
    assert "nodez: unknown key" in result.output
