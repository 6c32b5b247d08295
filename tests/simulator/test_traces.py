"""The trace reader: openb CSV and gpushare JSON lines into trace records and model objects."""

from pathlib import Path

import pytest

from gpushare.model.quantities import MIB
from gpushare.scheduler.fragmentation import GPU_PRODUCT_LABEL
from gpushare.simulator.traces import TraceError, read_nodes, read_pods

HERE = Path(__file__).parent / "traces"


def test_openb_nodes_map_to_model_nodes():
    nodes = read_nodes(HERE / "tiny_nodes.csv")
    assert [n.name for n in nodes] == [f"tiny-node-{i}" for i in range(4)]
    n2 = nodes[2].to_node()
    assert (n2.gpus, n2.cpu_millis, n2.memory_bytes) == (8, 64000, 262144 * MIB)
    assert n2.labels == {GPU_PRODUCT_LABEL: "A10"}
    assert nodes[3].model is None and nodes[3].to_node().labels == {}


def test_openb_pods_map_requests_and_gpu_types():
    pods = {p.name: p for p in read_pods(HERE / "tiny_pods.csv")}
    whole = pods["tiny-pod-00"].to_pod()
    assert whole.gpu.whole == 1 and whole.cpu_millis == 4000 and whole.memory_bytes == 8192 * MIB
    share = pods["tiny-pod-01"].to_pod()
    assert share.gpu.whole == 0 and share.gpu.portion == 500 and share.gpu.devices == 1
    one_type = pods["tiny-pod-02"].to_pod()
    assert one_type.node_selector == {GPU_PRODUCT_LABEL: "T4"} and one_type.node_affinity == ()
    two_types = pods["tiny-pod-03"].to_pod()
    assert two_types.gpu.whole == 2
    assert two_types.node_affinity == ((GPU_PRODUCT_LABEL, ("A10", "T4")),)
    assert two_types.matches_labels({GPU_PRODUCT_LABEL: "T4"})
    assert not two_types.matches_labels({GPU_PRODUCT_LABEL: "V100M16"})
    cpu = pods["tiny-pod-04"]
    assert not cpu.to_pod().gpu.wants_gpu and cpu.gpu_total == 0
    assert (pods["tiny-pod-07"].qos, pods["tiny-pod-07"].created, pods["tiny-pod-07"].deleted) == (
        "LS", 70.0, 900.0)


def test_openb_pods_without_optional_columns():
    pods = read_pods(HERE / "tiny_pods_minimal.csv")
    assert [(p.num_gpu, p.gpu_milli, p.gpu_spec, p.created, p.deleted) for p in pods] == [
        (1, 500, (), 0.0, None), (2, 1000, (), 0.0, None), (0, 0, (), 0.0, None)]


def test_gpushare_jsonl_format():
    nodes = read_nodes(HERE / "tiny.jsonl")
    pods = read_pods(HERE / "tiny.jsonl")
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("j-node-0", 2, "T4"),
                                                         ("j-node-1", 0, None)]
    assert pods[0].queue == "team-a" and pods[0].gpu_milli == 300 and pods[0].deleted == 50.0
    assert pods[1].gpu_milli == 1000 and pods[1].gpu_spec == ("A10", "T4")
    assert pods[1].qos == "LS" and pods[1].deleted is None


@pytest.mark.parametrize(("row", "field"), [
    ("p1,1000,1024,1,abc", "gpu_milli: expected a whole number"),
    ("p1,1000,1024,1,1500", "gpu_milli: at most 1000"),
    ("p1,-5,1024,1,500", "cpu_milli: must not be negative"),
    ("p1,1000,1024,0,500", "num_gpu: gpu_milli is 500 but no GPU asked"),
    ("p1,1000,1024,1", "expected 5 fields, got 4"),
    ("p0,1000,1024,1,500", "name: 'p0' appears twice"),
])
def test_bad_pod_row_names_file_line_and_field(tmp_path, row, field):
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,0,0\n" + row + "\n")
    with pytest.raises(TraceError) as err:
        read_pods(path)
    assert str(err.value).startswith(f"{path}:3: ")
    assert field in str(err.value)


def test_bad_node_rows_and_headers(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n")
    with pytest.raises(TraceError, match=r"nodes.csv:2: model: a node with GPUs needs"):
        read_nodes(path)
    path.write_text("sn,cpu_milli,gpu,model\n")
    with pytest.raises(TraceError, match=r"nodes.csv:1: header lacks column\(s\) memory_mib"):
        read_nodes(path)
    with pytest.raises(TraceError, match=r"missing\.csv"):
        read_nodes(tmp_path / "missing.csv")


def test_bad_jsonl_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"kind": "Node", "name": "n", "cpuMillis": 1, "memoryMiB": 1}\n'
                    '{"kind": "Pod", "name": "p", "gpus": 1, "gpuMilli": 2000}\n')
    with pytest.raises(TraceError, match=r"t.jsonl:2: gpuMilli: at most 1000"):
        read_pods(path)
    path.write_text('{"kind": "Pod", "name": "p", "colour": 1}\n')
    with pytest.raises(TraceError, match=r"t.jsonl:1: colour: unknown key"):
        read_pods(path)
    path.write_text('{"kind": "Pod", "name": "p", "createdAt": 9, "deletedAt": 3}\n')
    with pytest.raises(TraceError, match=r"t.jsonl:1: deletedAt: before createdAt"):
        read_pods(path)
    path.write_text("not json\n")
    with pytest.raises(TraceError, match=r"t.jsonl:1: not JSON"):
        read_pods(path)
