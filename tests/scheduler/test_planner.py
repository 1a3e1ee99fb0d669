"""End-to-end: ``nodeagent schedule`` on the example clusters, with placements derived
from kube-scheduler's semantics (each example's header says why)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nodeagent import cli
from nodeagent.scheduler import config, objects, planner, registry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
PRESSURE_NOW = "2024-05-01T10:00:30Z"
NOW = objects.unix_time(PRESSURE_NOW)


def schedule(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert cli.main(["schedule", *args]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def placements(result: dict[str, Any]) -> dict[str, tuple[str | None, str]]:
    return {p["pod"]: (p["node"], p["status"]) for p in result["placements"]}


def test_basic(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(capsys, "--cluster", str(EXAMPLES / "basic.yaml"), "--seed", "1", "--explain")
    assert placements(result) == {
        "default/web-1": ("n2", "Scheduled"),
        "jobs/batch-1": ("n3", "Scheduled"),
        "default/big-1": (None, "Unschedulable"),
    }
    web, batch, big = result["placements"]
    assert web["nodes"]["n3"] == {
        "evaluated": True,
        "feasible": False,
        "reasons": ["node(s) had untolerated taint {dedicated: batch}"],
    }
    n2 = web["nodes"]["n2"]
    assert n2["evaluated"] and n2["feasible"]
    assert n2["score"] == sum(p["weighted"] for p in n2["plugins"].values())
    assert n2["plugins"]["NodeResourcesFit"] == {"score": 81, "normalized": 81, "weighted": 81}
    assert n2["score"] > web["nodes"]["n1"]["score"]  # n1 already runs a 2-cpu pod
    assert batch["nodes"]["n3"] == {"evaluated": True, "feasible": True}  # only node: no scoring
    assert big["message"] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: batch},"
        " 2 Insufficient cpu."
        " no new claims to deallocate, preemption: 0/3 nodes are available: 3 Preemption is not"
        " helpful for scheduling."
    )


def test_pressure(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(
        capsys, "--cluster", str(EXAMPLES / "pressure.yaml"), "--now", PRESSURE_NOW, "--explain"
    )
    assert placements(result) == {
        "shop/api-1": ("calm", "Scheduled"),
        "monitoring/node-exporter-hot": ("hot", "Scheduled"),
        "shop/cache-1": ("warming", "Scheduled"),
    }
    api_nodes = result["placements"][0]["nodes"]
    assert api_nodes["hot"]["reasons"] == ["node(s) had memory pressure"]
    assert api_nodes["stock"]["reasons"] == ["node(s) had memory pressure"]
    pressure = {n: api_nodes[n]["plugins"]["NodePressure"]["score"] for n in ("calm", "warming")}
    assert pressure == {"calm": 100, "warming": 40}
    assert api_nodes["soft"]["plugins"]["TaintToleration"]["normalized"] == 0


def test_pressure_annotations_go_stale(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(
        capsys,
        "--cluster",
        str(EXAMPLES / "pressure.yaml"),
        "--now",
        "2024-05-02T10:00:00Z",
        "--explain",
    )
    scores = {
        name: verdict["plugins"]["NodePressure"]["score"]
        for name, verdict in result["placements"][0]["nodes"].items()
        if verdict["feasible"]
    }
    assert set(scores.values()) == {50}  # neutral, no condition on the feasible nodes


def test_mixed(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(capsys, "--cluster", str(EXAMPLES / "mixed.yaml"), "--seed", "3")
    assert result["placements"][0]["pod"] == "kube-system/critical-1"
    plan = placements(result)
    assert plan.pop("kube-system/critical-1")[1] == "Scheduled"
    assert plan == {
        "ml/gpu-1": ("gpu-node", "Scheduled"),
        "db/ssd-1": ("ssd-b", "Scheduled"),
        "edge/port-1": ("plain", "Scheduled"),
        "default/init-1": ("gpu-node", "Scheduled"),
        "default/gated-1": (None, "Gated"),
    }
    gated = result["placements"][-1]
    assert gated["message"] == "waiting for scheduling gates: [example.com/quota]"


def test_with_explain_every_placement_has_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(capsys, "--cluster", str(EXAMPLES / "mixed.yaml"), "--explain")
    for placement in result["placements"]:
        keys = {"pod", "node", "status", "nodes"}
        if placement["status"] != "Scheduled":
            keys.add("message")  # why not: the FitError, or the gates
        assert set(placement) == keys
        assert len(placement["nodes"]) == 4
    gated = result["placements"][-1]
    assert gated["status"] == "Gated"
    assert all(v == {"evaluated": False, "feasible": False} for v in gated["nodes"].values())


def test_same_seed_same_plan_and_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--cluster", str(EXAMPLES / "mixed.yaml"), "--seed", "9", "--explain"]
    assert schedule(capsys, *args) == schedule(capsys, *args)
    assert cli.main(["schedule", *args, "--output", "table"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["POD", "STATUS", "NODE", "DETAIL"]
    assert "default/gated-1" in table and "Gated" in table
    assert "rejected: Insufficient example.com/gpu" in table


def test_placements_consume_capacity_one_after_another() -> None:
    text = """
kind: List
items:
- {kind: Node, metadata: {name: only}, status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}}
""" + "".join(
        f"""- kind: Pod
  metadata: {{name: p{i}, namespace: default, creationTimestamp: "2024-01-01T00:00:0{i}Z"}}
  spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: 400m}}}}}}]}}
"""
        for i in range(3)
    )
    plugins = registry.in_tree_registry()
    result = planner.plan(
        objects.load_cluster(text), config.parse_configuration(None, plugins), now=NOW
    )
    assert [(p.pod, p.node) for p in result.placements] == [
        ("default/p0", "only"),
        ("default/p1", "only"),
        ("default/p2", None),
    ]
    assert result.placements[2].message == (
        "0/1 nodes are available: 1 Insufficient cpu."
        " no new claims to deallocate, preemption: 0/1 nodes are available:"
        " 1 No preemption victims found for incoming pod."
    )


def test_pods_of_other_schedulers_are_reported_not_planned() -> None:
    text = """
kind: List
items:
- {kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}}
- {kind: Pod, metadata: {name: mine}, spec: {containers: [{name: c, image: i}]}}
- kind: Pod
  metadata: {name: theirs}
  spec: {schedulerName: other, containers: [{name: c, image: i}]}
"""
    plugins = registry.in_tree_registry()
    result = planner.plan(
        objects.load_cluster(text), config.parse_configuration(None, plugins), now=NOW
    )
    outcomes = {p.pod: (p.status, p.node) for p in result.placements}
    assert outcomes == {
        "default/theirs": (planner.Outcome.NOT_SERVED, None),
        "default/mine": (planner.Outcome.SCHEDULED, "n1"),
    }
    theirs = result.placements[0]
    assert "'other' is not a profile" in theirs.message and "default-scheduler" in theirs.message


def test_planner_and_live_scheduler_default_to_the_same_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --config both serve nodeagent-scheduler: a snapshot of the pods the live
    scheduler serves is planned, and other pods are reported as not served."""
    from nodeagent.scheduler.live import settings

    live = settings.load(None, registry.in_tree_registry())
    planned = config.load_configuration(None, registry.in_tree_registry())
    assert live.profiles == tuple(p.scheduler_name for p in planned.profiles)
    assert live.profiles == ("nodeagent-scheduler",)
    path = tmp_path / "cluster.yaml"
    path.write_text(
        """
kind: List
items:
- {kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "1", memory: 1Gi, pods: "9"}}}
- {kind: Pod, metadata: {name: ours}, spec: {schedulerName: nodeagent-scheduler,
   containers: [{name: c, image: i}]}}
- {kind: Pod, metadata: {name: stock}, spec: {containers: [{name: c, image: i}]}}
"""
    )
    assert placements(schedule(capsys, "--cluster", str(path))) == {
        "default/stock": (None, "NotServed"),
        "default/ours": ("n1", "Scheduled"),
    }


def test_each_pod_is_scheduled_by_the_profile_its_scheduler_name_selects() -> None:
    # cpu and memory in the same proportion everywhere: the pod leaves both nodes as
    # balanced as they were (BalancedAllocation 75 each), so the scoring strategy decides.
    text = """
kind: List
items:
- {kind: Node, metadata: {name: busy}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "10"}}}
- {kind: Node, metadata: {name: idle}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "10"}}}
- kind: Pod
  metadata: {name: running}
  spec:
    nodeName: busy
    containers: [{name: c, image: i, resources: {requests: {cpu: "2", memory: 2Gi}}}]
- kind: Pod
  metadata: {name: spread}
  spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 500m, memory: 512Mi}}}]}
- kind: Pod
  metadata: {name: packed}
  spec:
    schedulerName: bin-packer
    containers: [{name: c, image: i, resources: {requests: {cpu: 500m, memory: 512Mi}}}]
"""
    packer = {
        "schedulerName": "bin-packer",
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
        ],
    }
    document = {
        "apiVersion": config.API_VERSION,
        "kind": config.KIND,
        "profiles": [{"schedulerName": "default-scheduler"}, packer],
    }
    plugins = registry.in_tree_registry()
    result = planner.plan(
        objects.load_cluster(text), config.parse_configuration(document, plugins), now=NOW
    )
    assert {p.pod: p.node for p in result.placements} == {
        "default/spread": "idle",  # LeastAllocated
        "default/packed": "busy",  # MostAllocated
    }


def test_pods_being_deleted_are_not_placed_but_still_hold_their_node() -> None:
    text = """
kind: List
items:
- {kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}}
- kind: Pod
  metadata: {name: leaving, deletionTimestamp: "2024-01-01T00:00:00Z"}
  spec: {nodeName: n1, containers: [{name: c, image: i, resources: {requests: {cpu: 800m}}}]}
- kind: Pod
  metadata: {name: cancelled, deletionTimestamp: "2024-01-01T00:00:00Z"}
  spec: {containers: [{name: c, image: i}]}
- kind: Pod
  metadata: {name: waiting}
  spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 500m}}}]}
"""
    plugins = registry.in_tree_registry()
    result = planner.plan(
        objects.load_cluster(text), config.parse_configuration(None, plugins), now=NOW
    )
    assert [(p.pod, p.node) for p in result.placements] == [("default/waiting", None)]
    assert result.placements[0].message == (
        "0/1 nodes are available: 1 Insufficient cpu."
        " no new claims to deallocate, preemption: 0/1 nodes are available:"
        " 1 No preemption victims found for incoming pod."
    )


@pytest.mark.parametrize(
    ("content", "mentions"),
    [
        pytest.param(None, "cannot read cluster file", id="missing"),
        pytest.param("items: [", "not valid YAML", id="bad-yaml"),
        pytest.param(
            "{nodes: [{name: n1}], pods: 5}", "document 0: kind = None", id="no-kubernetes-objects"
        ),
        pytest.param(
            "kind: List\nitems:\n- {kind: Node, metadata: {name: n1}, spec: [1]}",
            "document 0 items[0]: Node n1: spec",
            id="unexpected-shape",
        ),
        pytest.param(
            "kind: Pod\nmetadata: {name: x}\n"
            "spec: {containers: [{name: c, image: i, resources: {requests: {cpu: many}}}]}",
            "requests.cpu",
            id="bad-quantity",
        ),
    ],
)
def test_bad_cluster_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, mentions: str
) -> None:
    path = tmp_path / "cluster.yaml"
    if content is not None:
        path.write_text(content)
    assert cli.main(["schedule", "--cluster", str(path)]) == 2
    assert mentions in capsys.readouterr().err


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid_kubernetes_objects(example: Path) -> None:
    for item in yaml.safe_load(example.read_text())["items"]:
        kubernetes_validate.validate(item, "1.36", strict=True)


def test_a_reader_that_stops_early_is_not_an_error() -> None:
    # `nodeagent schedule ... | head`: the pipe closes before the plan is written.
    command = [sys.executable, "-m", "nodeagent", "schedule", "--explain"]
    command += ["--cluster", str(EXAMPLES / "mixed.yaml")]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()
        stderr = child.stderr.read().decode()
        assert child.wait(timeout=60) == 0, stderr
    assert "Traceback" not in stderr


def zone_of(node: str) -> str:
    return f"zone-{node[0]}"


def test_zone_spread_deployment(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(capsys, "--cluster", str(EXAMPLES / "zone-spread.yaml"), "--seed", "1")
    plan = placements(result)
    assert all(status == "Scheduled" for _, status in plan.values())
    assert plan["shop/web-5"] == ("c2", "Scheduled")  # the only zone the skew allows
    zones = {"zone-a": 2, "zone-b": 2, "zone-c": 1}
    for node, _ in plan.values():
        assert node is not None
        zones[zone_of(node)] += 1
        assert max(zones.values()) - min(zones.values()) <= 1  # maxSkew 1 after every step
    assert sorted(zones.values()) == [2, 3, 3]


def test_anti_affine_statefulset(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(capsys, "--cluster", str(EXAMPLES / "anti-affinity.yaml"), "--explain")
    plan = placements(result)
    assert {plan["data/db-1"][0], plan["data/db-2"][0]} == {"n2", "n3"}
    assert plan["data/db-3"] == (None, "Unschedulable")
    assert plan["data/cache-0"][1] == "Scheduled"
    db3 = result["placements"][2]
    assert db3["message"] == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
        " no new claims to deallocate, preemption: 0/3 nodes are available: 3 No preemption"
        " victims found for incoming pod."
    )
    assert all(
        v["reasons"] == ["node(s) didn't match pod anti-affinity rules"]
        for v in db3["nodes"].values()
    )


def test_high_priority_pod_preempts(capsys: pytest.CaptureFixture[str]) -> None:
    result = schedule(capsys, "--cluster", str(EXAMPLES / "preemption.yaml"), "--explain")
    checkout, filler = result["placements"]
    assert checkout["status"] == "Nominated"
    assert checkout["node"] is None
    assert checkout["nominatedNode"] == "n2"
    assert checkout["victims"] == ["jobs/report-a"]
    assert checkout["preemption"] == {
        "candidates": {
            "n2": {"victims": ["jobs/report-a"], "numPDBViolations": 0},
            "n1": {"victims": ["jobs/batch-b"], "numPDBViolations": 1},
        }
    }
    # report-a is gone from n2, but checkout's 2 cpu stay reserved there.
    assert filler["status"] == "Unschedulable"
    assert filler["message"].startswith("0/2 nodes are available: 2 Insufficient cpu.")
    plain = schedule(capsys, "--cluster", str(EXAMPLES / "preemption.yaml"))
    assert "preemption" not in plain["placements"][0]
    assert plain["placements"][0]["victims"] == ["jobs/report-a"]


GT_CLUSTER = """
kind: List
items:
- kind: Node
  metadata: {name: gold}
  spec:
    taints: [{key: sla, value: "999", effect: NoSchedule}]
  status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}
- kind: Pod
  metadata: {name: picky}
  spec:
    schedulerName: nodeagent-scheduler
    tolerations: [{key: sla, operator: Gt, value: "900", effect: NoSchedule}]
    containers: [{name: c, image: app}]
"""


def test_feature_gate_flag_enables_gt_tolerations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(GT_CLUSTER)
    # with the gate off (the default) the API server refuses a Gt toleration: the file
    # cannot come from such a cluster, and the error says which gate admits it
    assert cli.main(["schedule", "--cluster", str(path)]) == 2
    assert "TaintTolerationComparisonOperators" in capsys.readouterr().err
    gate = "TaintTolerationComparisonOperators=true"
    on = schedule(capsys, "--cluster", str(path), "--feature-gates", gate)
    assert placements(on) == {"default/picky": ("gold", "Scheduled")}
    assert cli.main(["schedule", "--cluster", str(path), "--feature-gates", "Bogus=true"]) == 2
    assert "unrecognized feature gate" in capsys.readouterr().err


@pytest.mark.parametrize("example", ["mixed.yaml", "preemption.yaml", "zone-spread.yaml"])
def test_streamed_output_is_the_plan(capsys: pytest.CaptureFixture[str], example: str) -> None:
    args = ["--cluster", str(EXAMPLES / example), "--seed", "5", "--explain", "--now", PRESSURE_NOW]
    streamed = schedule(capsys, *args)
    cluster = objects.load_cluster((EXAMPLES / example).read_text())
    configuration = config.load_configuration(None, registry.in_tree_registry())
    whole = planner.plan(cluster, configuration, seed=5, explain_nodes=True, now=NOW)
    assert streamed == json.loads(json.dumps(whole.to_dict()))


def test_configuration_does_not_import_the_framework() -> None:
    code = (
        "import sys, nodeagent.scheduler.config;"
        " assert 'nodeagent.scheduler.framework' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_volumes_example(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/clusters/volumes.yaml (its header says why): local PVs taken one per pod,
    a zonal PV, an unbound Immediate claim."""
    args = ["--cluster", str(EXAMPLES / "volumes.yaml"), "--seed", "1", "--explain"]
    result = schedule(capsys, *args)
    got = placements(result)
    assert {got["default/db-0"][0], got["default/db-1"][0]} == {"n1", "n2"}
    assert got["default/zonal-1"][0] in ("n2", "n3")
    for pod in ("db-2", "legacy-1"):
        assert got[f"default/{pod}"] == (None, "Unschedulable")
    by_pod = {p["pod"]: p for p in result["placements"]}
    no_volume = "node(s) didn't find available persistent volumes to bind"
    assert by_pod["default/db-2"]["nodes"]["n3"]["reasons"] == [no_volume]
    assert by_pod["default/db-2"]["message"].startswith(f"0/3 nodes are available: 3 {no_volume}.")
    zone = by_pod["default/zonal-1"]["nodes"]["n1"]
    assert zone["reasons"] == ["node(s) had no available volume zone"]
    immediate = "pod has unbound immediate PersistentVolumeClaims"
    assert by_pod["default/legacy-1"]["message"].startswith(
        f"0/3 nodes are available: {immediate}."
    )


def test_dra_example(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/clusters/dra.yaml (its header says why): claims allocated from the
    nodes' slices, a CEL selector, a claim no node can satisfy, a claim not created yet,
    a shared claim."""
    args = ["--cluster", str(EXAMPLES / "dra.yaml"), "--seed", "1", "--explain"]
    result = schedule(capsys, *args)
    got = placements(result)
    assert got["default/train-0"] == ("n1", "Scheduled")
    assert got["default/infer-0"] == ("n2", "Scheduled")
    assert got["default/reader"] == ("n2", "Scheduled")
    assert got["default/greedy"] == (None, "Unschedulable")
    assert got["default/late"] == (None, "Gated")
    by_pod = {p["pod"]: p for p in result["placements"]}
    assert by_pod["default/greedy"]["nodes"]["n1"]["reasons"] == ["cannot allocate all claims"]
    assert by_pod["default/greedy"]["message"] == (
        "0/3 nodes are available: 3 cannot allocate all claims. still not schedulable,"
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    assert by_pod["default/late"]["message"] == (
        'pod "default/late": ResourceClaim not created yet'
    )
