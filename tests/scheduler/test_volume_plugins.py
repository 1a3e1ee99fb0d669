"""The four volume plugins against kube-scheduler's own test cases.

Each table follows a test of kube-scheduler v1.36's plugin (named in the table's
docstring; case ids keep upstream's names where there is one): the objects, the pod,
and the PreFilter and Filter statuses it expects, reasons word for word. The harness
runs both Filter forms (vectorized and per node) and checks they agree.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.scheduler import api, config, storage
from nodeagent.scheduler.plugins import (
    node_volume_limits,
    volume_binding,
    volume_restrictions,
    volume_zone,
)
from tests.scheduler import builders
from tests.scheduler.volumes import (
    capacity,
    catalog,
    claim_volume,
    csi_driver,
    csi_node,
    ephemeral_volume,
    handle,
    pod_with,
    pv,
    pvc,
    run,
    storage_class,
)

OK = api.SUCCESS
U = api.Code.UNSCHEDULABLE
UU = api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def status(code: api.Code, *reasons: str) -> api.Status:
    return api.Status(code, reasons)


# --- VolumeRestrictions -------------------------------------------------------------------


def gce(pd: str, read_only: bool = False) -> dict[str, Any]:
    return {"name": f"gce-{pd}", "gcePersistentDisk": {"pdName": pd, "readOnly": read_only}}


def ebs(volume: str) -> dict[str, Any]:
    return {"name": f"ebs-{volume}", "awsElasticBlockStore": {"volumeID": volume}}


def rbd(monitors: list[str], image: str, read_only: bool = False) -> dict[str, Any]:
    source = {"monitors": monitors, "pool": "foo", "image": image, "readOnly": read_only}
    return {"name": f"rbd-{image}", "rbd": source}


def iscsi(iqn: str, read_only: bool = False) -> dict[str, Any]:
    source = {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0, "readOnly": read_only}
    return {"name": f"iscsi-{iqn}", "iscsi": source}


DISK = status(U, volume_restrictions.REASON_DISK_CONFLICT)

RESTRICTION_CASES = [
    # TestGCEDiskConflicts, TestAWSDiskConflicts, TestRBDDiskConflicts, TestISCSIDiskConflicts
    pytest.param([], [], api.SKIP, None, id="nothing"),
    pytest.param([], [gce("foo")], api.SKIP, None, id="gce: one state"),
    pytest.param([gce("foo")], [gce("foo")], OK, DISK, id="gce: same state"),
    pytest.param([gce("bar")], [gce("foo")], OK, OK, id="gce: different state"),
    pytest.param([gce("foo", True)], [gce("foo", True)], OK, OK, id="gce: both read-only"),
    pytest.param([gce("foo", True)], [gce("foo")], OK, DISK, id="gce: one writer"),
    pytest.param([ebs("foo")], [ebs("foo")], OK, DISK, id="aws: same state"),
    pytest.param([ebs("bar")], [ebs("foo")], OK, OK, id="aws: different state"),
    pytest.param([rbd(["a", "b"], "img")], [rbd(["b", "c"], "img")], OK, DISK, id="rbd: same"),
    pytest.param([rbd(["a"], "img")], [rbd(["c"], "img")], OK, OK, id="rbd: other monitors"),
    pytest.param([rbd(["a"], "one")], [rbd(["a"], "two")], OK, OK, id="rbd: other image"),
    pytest.param(
        [rbd(["a"], "img", True)], [rbd(["a"], "img", True)], OK, OK, id="rbd: both read-only"
    ),
    pytest.param([iscsi("iqn.a")], [iscsi("iqn.a")], OK, DISK, id="iscsi: same state"),
    pytest.param([iscsi("iqn.b")], [iscsi("iqn.a")], OK, OK, id="iscsi: different state"),
    pytest.param(
        [iscsi("iqn.a", True)], [iscsi("iqn.a", True)], OK, OK, id="iscsi: both read-only"
    ),
]


@pytest.mark.parametrize(("mine", "theirs", "want_pre", "want_filter"), RESTRICTION_CASES)
def test_volume_restrictions_disk_conflicts(
    mine: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    want_pre: api.Status,
    want_filter: api.Status | None,
) -> None:
    node = builders.node("n1")
    existing = pod_with("existing", *theirs, node_name="n1")
    plugin = volume_restrictions.new(None, handle(catalog()))
    outcome = run(plugin, pod_with("p", *mine), [node], [existing])
    assert outcome.pre_filter == want_pre
    if want_filter is not None:
        assert outcome.filters == (want_filter,)


RWOP = status(U, volume_restrictions.REASON_READ_WRITE_ONCE_POD)
RWOP_OBJECTS = [
    pvc("claim-with-rwop-1", modes=["ReadWriteOncePod"]),
    pvc("claim-with-rwop-2", modes=["ReadWriteOncePod"]),
    pvc("claim-rwo", modes=["ReadWriteOnce"]),
]


@pytest.mark.parametrize(
    ("mine", "theirs", "want_pre", "want_filter"),
    [
        # TestAccessModeConflicts
        pytest.param(["claim-rwo"], [], api.SKIP, None, id="nothing"),
        pytest.param(
            ["claim-missing"],
            [],
            status(UU, 'persistentvolumeclaim "claim-missing" not found'),
            None,
            id="failed to get PVC",
        ),
        pytest.param(
            ["claim-rwo"], ["claim-with-rwop-1"], api.SKIP, None, id="no access mode conflict"
        ),
        pytest.param(
            ["claim-with-rwop-1"],
            ["claim-with-rwop-1"],
            OK,
            RWOP,
            id="access mode conflict, unschedulable",
        ),
        pytest.param(
            ["claim-with-rwop-1", "claim-with-rwop-2"],
            ["claim-with-rwop-1", "claim-with-rwop-2"],
            OK,
            RWOP,
            id="two conflicts, unschedulable",
        ),
        pytest.param(["claim-with-rwop-2"], ["claim-with-rwop-1"], api.SKIP, None, id="unused"),
    ],
)
def test_volume_restrictions_read_write_once_pod(
    mine: list[str], theirs: list[str], want_pre: api.Status, want_filter: api.Status | None
) -> None:
    nodes = [builders.node("n1"), builders.node("n2")]
    existing = pod_with("holder", *(claim_volume(c) for c in theirs), node_name="n1")
    plugin = volume_restrictions.new(None, handle(catalog(*RWOP_OBJECTS)))
    outcome = run(plugin, pod_with("p", *(claim_volume(c) for c in mine)), nodes, [existing])
    assert outcome.pre_filter == want_pre
    if want_filter is not None:
        # cluster-wide: the node not running the holder is refused too
        assert outcome.filters == (want_filter, want_filter)


def test_read_write_once_pod_is_freed_when_the_holder_goes() -> None:
    """What preemption's dry run sees: the holder removed, PreFilter runs again."""
    nodes = [builders.node("n1")]
    holder = pod_with("holder", claim_volume("claim-with-rwop-1"), node_name="n1")
    plugin = volume_restrictions.new(None, handle(catalog(*RWOP_OBJECTS)))
    mine = pod_with("p", claim_volume("claim-with-rwop-1"))
    outcome = run(plugin, mine, nodes, [holder])
    assert outcome.filters == (RWOP,)
    assert run(plugin, mine, nodes, []).pre_filter == api.SKIP


# --- VolumeZone --------------------------------------------------------------------------

BETA_ZONE, BETA_REGION = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
ZONE_OBJECTS = [
    pv("Vol_1", labels={BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", labels={BETA_REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_3", labels={BETA_REGION: "us-west1-a__us-west1-b"}),
    pv("Vol_Stable_1", labels={ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", labels={REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_Stable_3", labels={ZONE: "us-west1-a", REGION: "us-west1-a"}),
    pvc("PVC_1", volume="Vol_1", bound=True),
    pvc("PVC_2", volume="Vol_2", bound=True),
    pvc("PVC_3", volume="Vol_3", bound=True),
    pvc("PVC_4", volume="Vol_not_exist", bound=True),
    pvc("PVC_Stable_1", volume="Vol_Stable_1", bound=True),
    pvc("PVC_Stable_2", volume="Vol_Stable_2", bound=True),
    pvc("PVC_Stable_3", volume="Vol_Stable_3", bound=True),
    pvc("PVC_WFFC", sc="wffc"),
    pvc("PVC_Immediate", sc="immediate"),
    pvc("PVC_NoClass"),
    storage_class("wffc"),
    storage_class("immediate", wait=False),
]
CONFLICT = status(UU, volume_zone.REASON_CONFLICT)


@pytest.mark.parametrize(
    ("claim", "labels", "want_pre", "want_filter"),
    [
        # TestSingleZone, TestMultiZone, TestWithBinding
        pytest.param(None, {BETA_ZONE: "us-west1-a"}, api.SKIP, None, id="pod without volume"),
        pytest.param("PVC_1", {}, OK, OK, id="node without labels"),
        pytest.param("PVC_1", {BETA_ZONE: "us-west1-a"}, OK, OK, id="beta zone label matched"),
        pytest.param("PVC_2", {BETA_REGION: "us-west1"}, OK, OK, id="beta region label matched"),
        pytest.param("PVC_1", {BETA_ZONE: "no_us-west1-a"}, OK, CONFLICT, id="beta zone failed"),
        pytest.param("PVC_2", {BETA_REGION: "no_us-west1"}, OK, CONFLICT, id="beta region failed"),
        pytest.param("PVC_Stable_1", {ZONE: "us-west1-a"}, OK, OK, id="zone label matched"),
        pytest.param("PVC_Stable_2", {REGION: "us-west1"}, OK, OK, id="region label matched"),
        pytest.param("PVC_Stable_1", {ZONE: "no_us-west1-a"}, OK, CONFLICT, id="zone failed"),
        pytest.param(
            "PVC_Stable_3", {ZONE: "us-west1-a", REGION: "no"}, OK, CONFLICT, id="region failed"
        ),
        pytest.param("PVC_1", {ZONE: "us-west1-a"}, OK, OK, id="beta PV label, GA node label"),
        pytest.param("PVC_3", {BETA_REGION: "us-west1-b"}, OK, OK, id="multi zone matched"),
        pytest.param("PVC_3", {BETA_REGION: "us-west1-c"}, OK, CONFLICT, id="multi zone failed"),
        pytest.param(
            "PVC_4",
            {ZONE: "a"},
            status(UU, 'persistentvolume "Vol_not_exist" not found'),
            None,
            id="PV not found",
        ),
        pytest.param(
            "PVC_X",
            {},
            status(UU, 'persistentvolumeclaim "PVC_X" not found'),
            None,
            id="PVC not found",
        ),
        pytest.param("PVC_WFFC", {ZONE: "a"}, api.SKIP, None, id="unbound WaitForFirstConsumer"),
        pytest.param(
            "PVC_Immediate",
            {},
            status(UU, "PersistentVolume had no name"),
            None,
            id="unbound Immediate",
        ),
        pytest.param(
            "PVC_NoClass",
            {},
            status(UU, "PersistentVolumeClaim had no pv name and storageClass name"),
            None,
            id="no class",
        ),
    ],
)
def test_volume_zone(
    claim: str | None, labels: dict[str, str], want_pre: api.Status, want_filter: api.Status | None
) -> None:
    node = builders.node("host1", labels=labels)
    pod = pod_with("p", claim_volume(claim)) if claim else pod_with("p")
    plugin = volume_zone.new(None, handle(catalog(*ZONE_OBJECTS)))
    outcome = run(plugin, pod, [node])
    assert outcome.pre_filter == want_pre
    if want_filter is not None:
        assert outcome.filters == (want_filter,)


# --- NodeVolumeLimits ----------------------------------------------------------------------

EBS_CSI = "ebs.csi.aws.com"
GCE_CSI = "pd.csi.storage.gke.io"
MAX = status(U, node_volume_limits.REASON_MAX_VOLUME_COUNT)
LIMIT_OBJECTS = [
    pv("csi-pv-1", sc="csi-sc", csi=(EBS_CSI, "vol-1")),
    pv("csi-pv-2", sc="csi-sc", csi=(EBS_CSI, "vol-2")),
    pv("csi-pv-3", sc="csi-sc", csi=(EBS_CSI, "vol-3")),
    pv("gce-pv", sc="", source={"gcePersistentDisk": {"pdName": "disk-1"}}),
    pvc("csi-1", volume="csi-pv-1", bound=True),
    pvc("csi-2", volume="csi-pv-2", bound=True),
    pvc("csi-3", volume="csi-pv-3", bound=True),
    pvc("gce", volume="gce-pv", bound=True),
    pvc("unbound-ebs", sc="ebs-sc"),
    pvc("unbound-intree", sc="intree-sc"),
    storage_class("ebs-sc", provisioner=EBS_CSI),
    storage_class("intree-sc", provisioner="kubernetes.io/aws-ebs"),
    pvc("p-eph", owner_uid="uid-p", volume="csi-pv-3", bound=True),
    pvc("p-stolen", owner_uid="uid-other", volume="csi-pv-3", bound=True),
]


@pytest.mark.parametrize(
    ("mine", "theirs", "limits", "want_pre", "want_filter"),
    [
        # TestCSILimits
        pytest.param([], [], {EBS_CSI: 1}, api.SKIP, None, id="no volumes"),
        pytest.param(["csi-1"], ["csi-2"], {EBS_CSI: 2}, OK, OK, id="fits under the limit"),
        pytest.param(["csi-1"], ["csi-2"], {EBS_CSI: 1}, OK, MAX, id="exceeds the limit"),
        pytest.param(["csi-1"], ["csi-1"], {EBS_CSI: 1}, OK, OK, id="same volume counted once"),
        pytest.param(["csi-1"], ["csi-2"], {EBS_CSI: None}, OK, OK, id="no count published"),
        pytest.param(["csi-1"], ["csi-2"], {"other": 1}, OK, OK, id="other driver's limit"),
        pytest.param(["csi-1"], ["csi-2"], None, OK, OK, id="no CSINode"),
        pytest.param(
            ["unbound-ebs"], ["csi-2"], {EBS_CSI: 1}, OK, MAX, id="unbound claim, class driver"
        ),
        pytest.param(
            ["unbound-intree"], ["csi-2"], {EBS_CSI: 1}, OK, MAX, id="unbound, migrated class"
        ),
        pytest.param(["gce"], [], {GCE_CSI: 0}, OK, MAX, id="in-tree PV migrated"),
        pytest.param(["gce"], [], None, OK, OK, id="in-tree PV without CSINode"),
        pytest.param(
            ["missing"],
            [],
            {EBS_CSI: 1},
            OK,
            status(UU, 'looking up PVC default/missing: persistentvolumeclaim "missing" not found'),
            id="missing claim",
        ),
    ],
)
def test_node_volume_limits(
    mine: list[str],
    theirs: list[str],
    limits: dict[str, int | None] | None,
    want_pre: api.Status,
    want_filter: api.Status | None,
) -> None:
    objs = [*LIMIT_OBJECTS]
    if limits is not None:
        objs.append(csi_node("n1", limits))
    existing = pod_with("other", *(claim_volume(c) for c in theirs), node_name="n1")
    plugin = node_volume_limits.new(None, handle(catalog(*objs)))
    outcome = run(
        plugin, pod_with("p", *(claim_volume(c) for c in mine)), [builders.node("n1")], [existing]
    )
    assert outcome.pre_filter == want_pre
    if want_filter is not None:
        assert outcome.filters == (want_filter,)


def test_node_volume_limits_inline_and_ephemeral_volumes() -> None:
    plugin = node_volume_limits.new(
        None, handle(catalog(*LIMIT_OBJECTS, csi_node("n1", {EBS_CSI: 1, GCE_CSI: 1})))
    )
    node = [builders.node("n1")]
    holder = pod_with("other", claim_volume("csi-2"), node_name="n1")
    inline = {"name": "d", "awsElasticBlockStore": {"volumeID": "vol-x"}}
    assert run(plugin, pod_with("p", inline), node, [holder]).filters == (MAX,)
    gce_inline = {"name": "g", "gcePersistentDisk": {"pdName": "pd-1"}}
    assert run(plugin, pod_with("p", gce_inline), node, [holder]).filters == (OK,)
    # the generic ephemeral volume's claim p-eph, owned by the pod, counts
    eph = pod_with("p", ephemeral_volume("eph"), uid="uid-p")
    assert run(plugin, eph, node, [holder]).filters == (MAX,)
    stolen = pod_with("p", ephemeral_volume("stolen"), uid="uid-p")
    with pytest.raises(Exception, match="pod is not owner"):  # an Error status upstream
        run(plugin, stolen, node, [])


# --- VolumeBinding --------------------------------------------------------------------------

WAIT = "wait-sc"
IMMEDIATE = "immediate-sc"
CAP = "wait-sc-with-storage-capacity"
CAP_DRIVER = "driver-with-storage-capacity"
BINDING_CLASSES = [
    storage_class(WAIT),
    storage_class(IMMEDIATE, wait=False),
    storage_class(CAP, provisioner=CAP_DRIVER),
    csi_driver(CAP_DRIVER, capacity=True),
    storage_class("topo-sc", provisioner="p", topologies=[{ZONE: ["a"]}]),
    storage_class("prov-sc", provisioner="p"),
]
NODE_A = builders.node("node-a", labels={ZONE: "a"})
NODE_B = builders.node("node-b", labels={ZONE: "b"})


def binding(
    *objs: dict[str, Any], gates: tuple[config.FeatureGate, ...] = ()
) -> volume_binding.VolumeBinding:
    return volume_binding.new(None, handle(catalog(*BINDING_CLASSES, *objs), gates=gates))


BINDING_CASES = [
    # TestVolumeBinding
    pytest.param([], [], api.SKIP, None, id="pod has not pvcs"),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=WAIT, volume="pv-a", bound=True), pv("pv-a", sc=WAIT)],
        OK,
        (OK, OK),
        id="all bound",
    ),
    pytest.param(
        ["pvc-a"],
        [],
        status(UU, 'persistentvolumeclaim "pvc-a" not found'),
        None,
        id="PVC does not exist",
    ),
    pytest.param(
        ["pvc-a", "pvc-b"],
        [pvc("pvc-a", sc=WAIT, volume="pv-a", bound=True)],
        status(UU, 'persistentvolumeclaim "pvc-b" not found'),
        None,
        id="Part of PVCs do not exist",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=IMMEDIATE)],
        status(UU, volume_binding.REASON_UNBOUND_IMMEDIATE),
        None,
        id="immediate claims not bound",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=WAIT)],
        OK,
        (status(UU, volume_binding.REASON_BIND_CONFLICT),) * 2,
        id="unbound claims no matches",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=WAIT, volume="pv-a", bound=True), pv("pv-a", sc=WAIT, hosts=["node-b"])],
        OK,
        (status(UU, volume_binding.REASON_NODE_CONFLICT), OK),
        id="bound and unbound unsatisfied: PV affinity",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=WAIT, volume="pv-missing", bound=True)],
        OK,
        (status(UU, volume_binding.REASON_PV_NOT_EXIST),) * 2,
        id="pvc not found... bound to a missing PV",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=WAIT), pv("pv-a", sc=WAIT, hosts=["node-a"])],
        OK,
        (OK, status(UU, volume_binding.REASON_BIND_CONFLICT)),
        id="local PV on one node",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=CAP, size="10Gi")],
        OK,
        (status(UU, volume_binding.REASON_NOT_ENOUGH_SPACE),) * 2,
        id="storage capacity: none published",
    ),
    pytest.param(
        ["pvc-a"],
        [
            pvc("pvc-a", sc=CAP, size="10Gi"),
            capacity("cap-a", CAP, size="50Gi", labels={ZONE: "a"}),
            capacity("cap-b", CAP, size="5Gi", labels={ZONE: "b"}),
        ],
        OK,
        (OK, status(UU, volume_binding.REASON_NOT_ENOUGH_SPACE)),
        id="storage capacity: one node has room",
    ),
    pytest.param(
        ["pvc-a"],
        [
            pvc("pvc-a", sc=CAP, size="10Gi"),
            capacity("cap-a", CAP, size="50Gi", labels={ZONE: "a"}, maximum="1Gi"),
        ],
        OK,
        (status(UU, volume_binding.REASON_NOT_ENOUGH_SPACE),) * 2,
        id="storage capacity: maximumVolumeSize too small",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc="topo-sc")],
        OK,
        (OK, status(UU, volume_binding.REASON_BIND_CONFLICT)),
        id="class allowedTopologies",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc="prov-sc", selected_node="node-b")],
        OK,
        (status(UU, volume_binding.REASON_BIND_CONFLICT), OK),
        id="selected-node annotation",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=WAIT, phase="Lost", volume="gone")],
        status(UU, 'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "gone"'),
        None,
        id="claim lost",
    ),
    pytest.param(
        ["pvc-a"],
        [pvc("pvc-a", sc=WAIT, deleting=True)],
        status(UU, 'persistentvolumeclaim "pvc-a" is being deleted'),
        None,
        id="claim being deleted",
    ),
]


@pytest.mark.parametrize(("claims", "objs", "want_pre", "want_filters"), BINDING_CASES)
def test_volume_binding(
    claims: list[str],
    objs: list[dict[str, Any]],
    want_pre: api.Status,
    want_filters: tuple[api.Status, ...] | None,
) -> None:
    plugin = binding(*objs)
    outcome = run(plugin, pod_with("pod-a", *(claim_volume(c) for c in claims)), [NODE_A, NODE_B])
    assert outcome.pre_filter == want_pre
    if want_filters is not None:
        assert outcome.filters == want_filters


def test_static_binding_takes_the_smallest_fitting_volume() -> None:
    """``FindMatchingVolume``: class, access modes, selector, size, then the smallest."""
    plugin = binding(
        pvc(
            "claim",
            sc=WAIT,
            size="5Gi",
            modes=["ReadWriteOnce"],
            selector={"matchLabels": {"tier": "fast"}},
        ),
        pv("too-small", sc=WAIT, size="1Gi", labels={"tier": "fast"}),
        pv("wrong-class", sc="other", size="5Gi", labels={"tier": "fast"}),
        pv("wrong-mode", sc=WAIT, size="5Gi", modes=["ReadOnlyMany"], labels={"tier": "fast"}),
        pv("wrong-label", sc=WAIT, size="5Gi", labels={"tier": "slow"}),
        pv(
            "taken",
            sc=WAIT,
            size="5Gi",
            labels={"tier": "fast"},
            claim=("default", "x"),
            phase="Bound",
        ),
        pv("big", sc=WAIT, size="100Gi", labels={"tier": "fast"}),
        pv("right", sc=WAIT, size="8Gi", labels={"tier": "fast"}),
        pv("elsewhere", sc=WAIT, size="5Gi", labels={"tier": "fast"}, hosts=["node-b"]),
    )
    pod = pod_with("pod-a", claim_volume("claim"))
    outcome = run(plugin, pod, [NODE_A, NODE_B])
    assert outcome.filters == (OK, OK)
    state = outcome.state.read("VolumeBinding", volume_binding._State)
    assert state is not None
    assert [b.pv.name for b in state.by_node["node-a"].static] == ["right"]
    assert [b.pv.name for b in state.by_node["node-b"].static] == ["elsewhere"]


def test_two_pods_back_to_back_never_take_the_same_volume() -> None:
    """The assume cache: Reserve marks the PV taken before the API has seen anything;
    Unreserve gives it back."""
    plugin = binding(pvc("claim-1", sc=WAIT), pvc("claim-2", sc=WAIT), pv("only", sc=WAIT))
    first = pod_with("first", claim_volume("claim-1"))
    second = pod_with("second", claim_volume("claim-2"))
    outcome = run(plugin, first, [NODE_A])
    assert outcome.filters == (OK,)
    assert plugin.reserve(outcome.state, first, "node-a").is_success
    assert run(plugin, second, [NODE_A]).filters == (
        status(UU, volume_binding.REASON_BIND_CONFLICT),
    )
    plugin.unreserve(outcome.state, first, "node-a")
    assert run(plugin, second, [NODE_A]).filters == (OK,)


def test_planner_pre_bind_commits_the_binding() -> None:
    volumes = catalog(
        *BINDING_CLASSES, pvc("claim-1", sc=WAIT), pv("only", sc=WAIT, hosts=["node-a"])
    )
    plugin = volume_binding.new(None, handle(volumes))
    pod = pod_with("first", claim_volume("claim-1"))
    outcome = run(plugin, pod, [NODE_A])
    assert plugin.reserve(outcome.state, pod, "node-a").is_success
    assert plugin.pre_bind_pre_flight(outcome.state, pod, "node-a") == OK
    assert plugin.pre_bind(outcome.state, pod, "node-a").is_success
    claim = volumes.claim("default", "claim-1")
    bound = volumes.volume("only")
    assert claim is not None and claim.fully_bound and claim.volume_name == "only"
    assert bound is not None and bound.claim_ref == storage.ClaimRef(
        "default", "claim-1", claim.uid
    )
    # the next cycle of the same pod finds its claim bound: nothing left to do
    again = run(plugin, pod, [NODE_A])
    assert plugin.reserve(again.state, pod, "node-a").is_success
    assert plugin.pre_bind_pre_flight(again.state, pod, "node-a").is_skip


def test_dynamic_provisioning_sets_the_selected_node() -> None:
    volumes = catalog(*BINDING_CLASSES, pvc("claim", sc="topo-sc"))
    plugin = volume_binding.new(None, handle(volumes))
    pod = pod_with("first", claim_volume("claim"))
    outcome = run(plugin, pod, [NODE_A, NODE_B])
    assert plugin.reserve(outcome.state, pod, "node-a").is_success
    claim = volumes.claim("default", "claim")
    assert claim is not None and claim.annotations[storage.ANN_SELECTED_NODE] == "node-a"


@pytest.mark.parametrize(
    ("uid", "claims", "want"),
    [
        pytest.param(
            "uid-p",
            [],
            status(
                UU,
                "waiting for ephemeral volume controller to create the"
                ' persistentvolumeclaim "p-eph"',
            ),
            id="ephemeral claim not created yet",
        ),
        pytest.param(
            "uid-p",
            [pvc("p-eph", sc=WAIT, owner_uid="uid-other")],
            status(UU, "PVC default/p-eph was not created for pod default/p (pod is not owner)"),
            id="ephemeral claim of another owner",
        ),
        pytest.param(
            "uid-p", [pvc("p-eph", sc=WAIT, owner_uid="uid-p"), pv("pv", sc=WAIT)], OK, id="ours"
        ),
    ],
)
def test_generic_ephemeral_volumes(
    uid: str, claims: list[dict[str, Any]], want: api.Status
) -> None:
    plugin = binding(*claims)
    outcome = run(plugin, pod_with("p", ephemeral_volume("eph"), uid=uid), [NODE_A])
    assert outcome.pre_filter == want


def test_storage_capacity_scoring_prefers_the_emptiest_volume() -> None:
    """TestVolumeBinding's scoring cases: with the gate, the default shape scores a
    volume by how empty the claim leaves it."""
    gates = (config.FeatureGate.STORAGE_CAPACITY_SCORING,)
    plugin = binding(
        pvc("claim", sc=WAIT, size="50Gi"),
        pv("half", sc=WAIT, size="100Gi", hosts=["node-a"]),
        pv("full", sc=WAIT, size="50Gi", hosts=["node-b"]),
        gates=gates,
    )
    pod = pod_with("p", claim_volume("claim"))
    outcome = run(plugin, pod, [NODE_A, NODE_B])
    snap = builders.snapshot([NODE_A, NODE_B])
    assert plugin.pre_score(outcome.state, pod, snap, snap.all_nodes).is_success
    assert plugin.score(outcome.state, pod, snap, snap.all_nodes).tolist() == [50, 0]
    assert binding(gates=()).pre_score(outcome.state, pod, snap, snap.all_nodes).is_skip


def test_shape_needs_the_feature_gate() -> None:
    args = volume_binding.Args.model_validate({"shape": [{"utilization": 0, "score": 0}]})
    with pytest.raises(Exception, match="StorageCapacityScoring"):
        volume_binding.new(args, handle(catalog()))
    with pytest.raises(Exception, match=r"greater than or equal"):
        volume_binding.Args.model_validate({"bindTimeoutSeconds": -1})


def test_storage_capacity_score_rounds_half_away_from_zero() -> None:
    """``buildScorerFunction`` averages the classes' scores with Go's ``math.Round``:
    one class full (0), one at 3 % (97): 48.5 is 49, where half-to-even would give 48."""
    gates = (config.FeatureGate.STORAGE_CAPACITY_SCORING,)
    plugin = binding(
        storage_class("wait-other-sc"),
        pvc("full", sc=WAIT, size="50Gi"),
        pvc("roomy", sc="wait-other-sc", size="3Gi"),
        pv("pv-full", sc=WAIT, size="50Gi", hosts=["node-a"]),
        pv("pv-roomy", sc="wait-other-sc", size="100Gi", hosts=["node-a"]),
        gates=gates,
    )
    pod = pod_with("p", claim_volume("full"), claim_volume("roomy"))
    outcome = run(plugin, pod, [NODE_A])
    snap = builders.snapshot([NODE_A])
    assert plugin.pre_score(outcome.state, pod, snap, snap.all_nodes).is_success
    assert plugin.score(outcome.state, pod, snap, snap.all_nodes).tolist() == [49]
