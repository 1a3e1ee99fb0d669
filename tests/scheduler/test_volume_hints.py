"""The volume plugins' QueueingHints against kube-scheduler v1.36's unit cases
(``TestIsSchedulableAfter*`` of ``volumebinding`` and ``volumezone``,
``TestCSILimits*QHint`` of ``nodevolumelimits``, ``Test_isSchedulableAfter*`` of
``volumerestrictions``), what each plugin registers, and the storage informers handing
the old and new objects to the queue."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nodeagent.kube import client
from nodeagent.scheduler import api, storage
from nodeagent.scheduler.framework import ClusterEvent, EventHint, QueueingHint
from nodeagent.scheduler.live import volumes as live_volumes
from nodeagent.scheduler.live.events import QueueingHints
from nodeagent.scheduler.plugins import (
    node_volume_limits,
    volume_binding,
    volume_restrictions,
    volume_zone,
)
from tests.doubles.kube import FakeKubeClient
from tests.scheduler import volumes as vb
from tests.scheduler.builders import default_framework

E = ClusterEvent
Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
V = api.VolumeKind


def pod(
    name: str = "pod-a", *volumes: api.PodVolume, namespace: str = "default", **kw: Any
) -> api.Pod:
    return api.Pod(namespace, name, uid=name, volumes=tuple(volumes), **kw)


def claim_vol(claim: str) -> api.PodVolume:
    return api.PodVolume(f"vol-{claim}", V.CLAIM, claim_name=claim)


def ephemeral(name: str) -> api.PodVolume:
    return api.PodVolume(name, V.EPHEMERAL)


def claim(name: str, namespace: str = "default", **kw: Any) -> storage.PersistentVolumeClaim:
    return storage.PersistentVolumeClaim(namespace, name, **kw)


EMPTY_DIR = api.PodVolume("scratch", V.OTHER)
WAIT = storage.BindingMode.WAIT_FOR_FIRST_CONSUMER
HOST_A = (storage.TopologyTerm((("kubernetes.io/hostname", frozenset({"node-a"})),)),)


# --- VolumeBinding ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("CSINode is newly created", None, storage.CSINode("csinode-a"), Q),
        (
            "CSINode's migrated-plugins annotation is added to",
            storage.CSINode("csinode-a", migrated_plugins=frozenset({"test1"})),
            storage.CSINode("csinode-a", migrated_plugins=frozenset({"test1", "test2"})),
            Q,
        ),
        (
            "CSINode's migrated-plugins annotation is updated",
            storage.CSINode("csinode-a", migrated_plugins=frozenset({"test1"})),
            storage.CSINode("csinode-a", migrated_plugins=frozenset({"test2"})),
            Q,
        ),
        (
            "CSINode is updated but migrated-plugins annotation gets unchanged",
            storage.CSINode("csinode-a", {"d": 1}, migrated_plugins=frozenset({"test1"})),
            storage.CSINode("csinode-a", {"d": 2}, migrated_plugins=frozenset({"test1"})),
            SKIP,
        ),
    ],
)
def test_binding_after_csi_node_change(name: str, old: Any, new: Any, want: QueueingHint) -> None:
    assert volume_binding.is_schedulable_after_csi_node_change(pod(), old, new) is want, name


@pytest.mark.parametrize(
    ("name", "target", "old", "new", "want"),
    [
        (
            "pod has no pvc or ephemeral volumes",
            pod("pod-a", EMPTY_DIR),
            claim("pvc-b"),
            claim("pvc-b"),
            SKIP,
        ),
        (
            "pvc with the same name as the one used by the pod in a different namespace is "
            "modified",
            pod("pod-a", claim_vol("pvc-a"), claim_vol("pvc-b"), namespace="ns-a"),
            None,
            claim("pvc-b"),
            SKIP,
        ),
        (
            "pod has no pvc that is being modified",
            pod("pod-a", claim_vol("pvc-a"), claim_vol("pvc-c")),
            claim("pvc-b"),
            claim("pvc-b"),
            SKIP,
        ),
        (
            "pod has no generic ephemeral volume that is being modified",
            pod("pod-a", ephemeral("ephemeral-a"), ephemeral("ephemeral-c")),
            claim("pod-a-ephemeral-b"),
            claim("pod-a-ephemeral-b"),
            SKIP,
        ),
        (
            "pod has the pvc that is being modified",
            pod("pod-a", claim_vol("pvc-a"), claim_vol("pvc-b")),
            claim("pvc-b"),
            claim("pvc-b"),
            Q,
        ),
        (
            "pod has the generic ephemeral volume that is being modified",
            pod("pod-a", ephemeral("ephemeral-a"), ephemeral("ephemeral-b")),
            claim("pod-a-ephemeral-b"),
            claim("pod-a-ephemeral-b"),
            Q,
        ),
    ],
)
def test_binding_after_claim_change(
    name: str, target: api.Pod, old: Any, new: Any, want: QueueingHint
) -> None:
    assert volume_binding.is_schedulable_after_claim_change(target, old, new) is want, name


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        (
            "When a new StorageClass is created, it returns Queue",
            None,
            storage.StorageClass("sc-a"),
            Q,
        ),
        (
            "When the AllowedTopologies are changed, it returns Queue",
            storage.StorageClass("sc-a"),
            storage.StorageClass("sc-a", allowed_topologies=HOST_A),
            Q,
        ),
        (
            "When there are no changes to the StorageClass, it returns QueueSkip",
            storage.StorageClass("sc-a"),
            storage.StorageClass("sc-a"),
            SKIP,
        ),
    ],
)
def test_binding_after_class_change(name: str, old: Any, new: Any, want: QueueingHint) -> None:
    assert volume_binding.is_schedulable_after_class_change(pod(), old, new) is want, name


def cap(capacity: int | None = None, maximum: int | None = None) -> storage.CSIStorageCapacity:
    return storage.CSIStorageCapacity(
        "kube-system", "cap-a", "sc", capacity=capacity, maximum_volume_size=maximum
    )


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("When a new CSIStorageCapacity is created, it returns Queue", None, cap(), Q),
        ("When the volume limit is increase(Capacity set), it returns Queue", cap(), cap(100), Q),
        (
            "When the volume limit is increase(MaximumVolumeSize set), it returns Queue",
            cap(),
            cap(maximum=100),
            Q,
        ),
        (
            "When the volume limit is increase(Capacity increase), it returns Queue",
            cap(50),
            cap(100),
            Q,
        ),
        (
            "When the volume limit is increase(MaximumVolumeSize unset), it returns Queue",
            cap(100, 50),
            cap(100),
            Q,
        ),
        (
            "When the volume limit is increase(MaximumVolumeSize increase), it returns Queue",
            cap(100, 50),
            cap(100, 60),
            Q,
        ),
        (
            "When there are no changes to the CSIStorageCapacity, it returns QueueSkip",
            cap(100, 50),
            cap(100, 50),
            SKIP,
        ),
        (
            "When the volume limit is equal(Capacity), it returns QueueSkip",
            cap(100),
            cap(100),
            SKIP,
        ),
        (
            "When the volume limit is equal(MaximumVolumeSize unset), it returns QueueSkip",
            cap(100, 50),
            cap(50),
            SKIP,
        ),
        (
            "When the volume limit is decrease(Capacity), it returns QueueSkip",
            cap(100),
            cap(90),
            SKIP,
        ),
        (
            "When the volume limit is decrease(MaximumVolumeSize), it returns QueueSkip",
            cap(maximum=100),
            cap(maximum=90),
            SKIP,
        ),
    ],
)
def test_binding_after_capacity_change(name: str, old: Any, new: Any, want: QueueingHint) -> None:
    assert volume_binding.is_schedulable_after_capacity_change(pod(), old, new) is want, name


def inline_csi(driver: str) -> api.PodVolume:
    return api.PodVolume("csi", V.CSI, driver=driver)


def driver(name: str, capacity: bool) -> storage.CSIDriver:
    return storage.CSIDriver(name, storage_capacity=capacity)


@pytest.mark.parametrize(
    ("name", "target", "old", "new", "want"),
    [
        ("pod has no CSIDriver", pod(), driver("test1", False), driver("test1", True), SKIP),
        (
            "driver name in pod and csidriver name are different",
            pod("pod-a", inline_csi("test1")),
            driver("test2", True),
            driver("test2", False),
            SKIP,
        ),
        (
            "original StorageCapacity is nil",
            pod("pod-a", inline_csi("test1")),
            driver("test1", False),
            driver("test1", False),
            SKIP,
        ),
        (
            "original StorageCapacity is false",
            pod("pod-a", inline_csi("test1")),
            driver("test1", False),
            driver("test1", False),
            SKIP,
        ),
        (
            "modified StorageCapacity is nil",
            pod("pod-a", inline_csi("test1")),
            driver("test1", True),
            driver("test1", False),
            Q,
        ),
        (
            "modified StorageCapacity is true",
            pod("pod-a", inline_csi("test1")),
            driver("test1", True),
            driver("test1", True),
            SKIP,
        ),
        (
            "modified StorageCapacity is false",
            pod("pod-a", inline_csi("test1")),
            driver("test1", True),
            driver("test1", False),
            Q,
        ),
    ],
)
def test_binding_after_csi_driver_change(
    name: str, target: api.Pod, old: Any, new: Any, want: QueueingHint
) -> None:
    assert volume_binding.is_schedulable_after_csi_driver_change(target, old, new) is want, name


# --- VolumeZone -------------------------------------------------------------------------
POD_1 = pod("pod_1", claim_vol("PVC_1"))


@pytest.mark.parametrize(
    ("name", "target", "old", "new", "want"),
    [
        (
            "pod has no volumes",
            pod("pod_1"),
            None,
            claim("PVC_1", volume_name="Vol_1"),
            SKIP,
        ),
        (
            "pvc is not the one the pod uses",
            pod("pod_1", claim_vol("PVC_2")),
            None,
            claim("PVC_1", volume_name="Vol_1"),
            SKIP,
        ),
        ("pvc in another namespace", POD_1, None, claim("PVC_1", "ns1", volume_name="Vol_1"), SKIP),
        ("pvc the pod uses is added", POD_1, None, claim("PVC_1", volume_name="Vol_1"), Q),
        (
            "pvc the pod uses is bound",
            POD_1,
            claim("PVC_1"),
            claim("PVC_1", volume_name="Vol_1"),
            Q,
        ),
        (
            "a pod without volumes and a pvc bound",
            pod("pod_1"),
            claim("PVC_1"),
            claim("PVC_1", volume_name="Vol_1"),
            SKIP,
        ),
        (
            "VolumeZone reads persistentVolumeClaim volumes only, not ephemeral ones",
            pod("pod_1", ephemeral("e")),
            None,
            claim("pod_1-e"),
            SKIP,
        ),
    ],
)
def test_zone_after_claim_change(
    name: str, target: api.Pod, old: Any, new: Any, want: QueueingHint
) -> None:
    assert volume_zone.is_schedulable_after_claim_change(target, old, new) is want, name


@pytest.mark.parametrize(
    ("name", "added", "want"),
    [
        ("a class without WaitForFirstConsumer", storage.StorageClass("SC_1"), SKIP),
        ("a WaitForFirstConsumer class", storage.StorageClass("SC_1", binding_mode=WAIT), Q),
    ],
)
def test_zone_after_class_added(name: str, added: storage.StorageClass, want: QueueingHint) -> None:
    assert volume_zone.is_schedulable_after_class_added(POD_1, None, added) is want, name


BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
GA_ZONE = "topology.kubernetes.io/zone"


def zoned(**labels: str) -> storage.PersistentVolume:
    return storage.PersistentVolume(
        "Vol_1", labels={k.replace("_", "/"): v for k, v in labels.items()}
    )


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("a new PV", None, storage.PersistentVolume("Vol_1", labels={BETA_ZONE: "us-west1-b"}), Q),
        (
            "the zone label changed",
            storage.PersistentVolume("Vol_1", labels={BETA_ZONE: "us-west1-a"}),
            storage.PersistentVolume("Vol_1", labels={BETA_ZONE: "us-west1-b"}),
            Q,
        ),
        (
            "a zone label added",
            storage.PersistentVolume("Vol_1", labels={BETA_ZONE: "us-west1-a"}),
            storage.PersistentVolume("Vol_1", labels={BETA_ZONE: "us-west1-a", GA_ZONE: "zone"}),
            Q,
        ),
        (
            "the topology labels unchanged",
            storage.PersistentVolume("Vol_1", labels={BETA_ZONE: "us-west1-a", GA_ZONE: "zone"}),
            storage.PersistentVolume(
                "Vol_1", labels={BETA_ZONE: "us-west1-a", GA_ZONE: "zone", "other": "x"}
            ),
            SKIP,
        ),
    ],
)
def test_zone_after_volume_change(name: str, old: Any, new: Any, want: QueueingHint) -> None:
    assert volume_zone.is_schedulable_after_volume_change(POD_1, old, new) is want, name


# --- NodeVolumeLimits -------------------------------------------------------------------
EBS_POD = pod("p", claim_vol("csi-ebs.csi.aws.com-2"))


@pytest.mark.parametrize(
    ("name", "deleted", "want"),
    [
        (
            "return a Queue when a deleted pod has a PVC",
            pod("d", claim_vol("placeholder"), node_name="n"),
            Q,
        ),
        (
            "return a Queue when a deleted pod has a inline migratable volume",
            pod("d", api.PodVolume("ebs", V.AWS_EBS, disk="vol"), node_name="n"),
            Q,
        ),
        (
            "return a QueueSkip when a deleted pod doesn't have any volume",
            pod("d", node_name="n"),
            SKIP,
        ),
        (
            "return a QueueSkip when a deleted pod is not scheduled.",
            pod("d", claim_vol("csi-ebs.csi.aws.com-0")),
            SKIP,
        ),
        (
            "a pod nominated to a node counts as on it",
            pod("d", ephemeral("e"), nominated_node_name="n"),
            Q,
        ),
        ("an emptyDir frees no attachment", pod("d", EMPTY_DIR, node_name="n"), SKIP),
    ],
)
def test_limits_after_pod_deleted(name: str, deleted: api.Pod, want: QueueingHint) -> None:
    assert node_volume_limits.is_schedulable_after_pod_deleted(EBS_POD, deleted, None) is want, name


@pytest.mark.parametrize(
    ("name", "target", "added", "want"),
    [
        (
            "a pod isn't in the same namespace as an added PVC",
            pod("p", namespace="ns1"),
            claim("x", "ns2"),
            SKIP,
        ),
        (
            "a pod is in the same namespace as an added PVC",
            pod("p", claim_vol("pvc1"), namespace="ns1"),
            claim("pvc1", "ns1"),
            Q,
        ),
        (
            "a pod has an ephemeral volume related to an added PVC",
            pod("pod1", ephemeral("ephemeral"), namespace="ns1"),
            claim("pod1-ephemeral", "ns1"),
            Q,
        ),
        (
            "a pod doesn't have the same PVC as an added PVC",
            pod("p", claim_vol("pvc1"), namespace="ns1"),
            claim("pvc2", "ns1"),
            SKIP,
        ),
        (
            "a pod doesn't have any PVC attached",
            pod("p", namespace="ns1"),
            claim("pvc2", "ns1"),
            SKIP,
        ),
    ],
)
def test_limits_after_claim_added(
    name: str, target: api.Pod, added: storage.PersistentVolumeClaim, want: QueueingHint
) -> None:
    assert node_volume_limits.is_schedulable_after_claim_added(target, None, added) is want, name


EBS = "ebs.csi.aws.com"


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("limit raised, queue", {EBS: 1}, {EBS: 2}, Q),
        ("limit decreased, skip queueing", {EBS: 2}, {EBS: 1}, SKIP),
        ("limit unchanged, skip queueing", {EBS: 1}, {EBS: 1}, SKIP),
        ("a driver newly listed with a count", {}, {EBS: 1}, Q),
        ("a count dropped: no limit any more (upstream: skip)", {EBS: 1}, {EBS: None}, Q),
        ("still no count", {EBS: None}, {EBS: None}, SKIP),
    ],
)
def test_limits_after_csi_node_updated(
    name: str, old: dict[str, int | None], new: dict[str, int | None], want: QueueingHint
) -> None:
    before, after = storage.CSINode("test-node", old), storage.CSINode("test-node", new)
    assert (
        node_volume_limits.is_schedulable_after_csi_node_updated(EBS_POD, before, after) is want
    ), name


# --- VolumeRestrictions -----------------------------------------------------------------
def disk(kind: api.VolumeKind, name: str, **kw: Any) -> api.PodVolume:
    return api.PodVolume("d", kind, disk=name, **kw)


GCE, AWS = disk(V.GCE_PD, "foo"), disk(V.AWS_EBS, "foo")
RBD = disk(V.RBD, "a/b", monitors=("a", "b"))
ISCSI = disk(V.ISCSI, "iqn.2016-12.server:storage.target01")


@pytest.mark.parametrize(
    ("name", "target", "deleted", "want"),
    [
        ("queue when the deleted pod has the same GCE PD", pod("a", GCE), pod("b", GCE), Q),
        ("skip when another GCE PD", pod("a", GCE), pod("b", disk(V.GCE_PD, "bar")), SKIP),
        ("queue when the same AWS EBS volume", pod("a", AWS), pod("b", AWS), Q),
        ("skip when another AWS EBS volume", pod("a", AWS), pod("b", disk(V.AWS_EBS, "bar")), SKIP),
        ("queue when an RBD image on overlapping monitors", pod("a", RBD), pod("b", RBD), Q),
        (
            "skip when another RBD image",
            pod("a", RBD),
            pod("b", disk(V.RBD, "a/c", monitors=("a", "b"))),
            SKIP,
        ),
        ("queue when the same iSCSI IQN", pod("a", ISCSI), pod("b", ISCSI), Q),
        (
            "skip when another iSCSI IQN",
            pod("a", ISCSI),
            pod("b", disk(V.ISCSI, "iqn.2016-12.server:storage.target02")),
            SKIP,
        ),
        (
            "queue when the deleted pod used the same claim (ReadWriteOncePod)",
            pod("pod1", claim_vol("claim-rwop")),
            pod("pod2", claim_vol("claim-rwop")),
            Q,
        ),
        (
            "skip when another claim",
            pod("pod1", claim_vol("claim-1-rwop")),
            pod("pod2", claim_vol("claim-2-rwop")),
            SKIP,
        ),
        (
            "skip when the deleted pod was in another namespace",
            pod("pod1", GCE),
            pod("pod2", GCE, namespace="other"),
            SKIP,
        ),
    ],
)
def test_restrictions_after_pod_deleted(
    name: str, target: api.Pod, deleted: api.Pod, want: QueueingHint
) -> None:
    got = volume_restrictions.is_schedulable_after_pod_deleted(target, deleted, None)
    assert got is want, name


ONE = pod("pod-with-one-pvc", claim_vol("claim-with-rwx-1"), node_name="node-1")
TWO = pod("pod-with-two-pvcs", claim_vol("claim-with-rwx-1"), claim_vol("claim-with-rwx-2"))


@pytest.mark.parametrize(
    ("name", "target", "added", "want"),
    [
        ("queue when the pod has the added PVC", TWO, claim("claim-with-rwx-1"), Q),
        ("skip when the pod does not have the added PVC", ONE, claim("claim-with-rwx-2"), SKIP),
        (
            "skip when the namespaces differ",
            dataclasses.replace(ONE, namespace="kube-system"),
            claim("claim-with-rwx-1"),
            SKIP,
        ),
    ],
)
def test_restrictions_after_claim_added(
    name: str, target: api.Pod, added: storage.PersistentVolumeClaim, want: QueueingHint
) -> None:
    assert volume_restrictions.is_schedulable_after_claim_added(target, None, added) is want, name


# --- registration and plumbing ----------------------------------------------------------
def events(registered: tuple[EventHint, ...] | None) -> dict[ClusterEvent, bool]:
    """Each registered event, and whether it has a hint."""
    assert registered is not None
    return {event: entry.hint is not None for entry in registered for event in entry.events}


def test_each_volume_plugin_registers_upstreams_events_with_hints_on() -> None:
    hints = default_framework().queueing_hints()
    assert events(hints["VolumeBinding"]) == {
        E.STORAGE_CLASS_ADD: True,
        E.STORAGE_CLASS_UPDATE: True,
        E.PVC_ADD: True,
        E.PVC_UPDATE: True,
        E.PV_ADD: False,
        E.PV_UPDATE: False,
        E.NODE_ADD: False,
        E.NODE_LABEL_CHANGE: False,
        E.CSI_NODE_ADD: True,
        E.CSI_NODE_UPDATE: True,
        E.CSI_DRIVER_UPDATE: True,
        E.CSI_STORAGE_CAPACITY_ADD: True,
        E.CSI_STORAGE_CAPACITY_UPDATE: True,
    }
    assert events(hints["VolumeZone"]) == {
        E.STORAGE_CLASS_ADD: True,
        E.NODE_ADD: False,
        E.NODE_LABEL_CHANGE: False,
        E.PVC_ADD: True,
        E.PVC_UPDATE: True,
        E.PV_ADD: True,
        E.PV_UPDATE: True,
    }
    assert events(hints["NodeVolumeLimits"]) == {
        E.CSI_NODE_ADD: False,
        E.CSI_NODE_UPDATE: True,
        E.ASSIGNED_POD_DELETE: True,
        E.UNSCHEDULED_POD_DELETE: True,
        E.PVC_ADD: True,
    }
    assert events(hints["VolumeRestrictions"]) == {
        E.ASSIGNED_POD_DELETE: True,
        E.UNSCHEDULED_POD_DELETE: True,
        E.NODE_ADD: False,
        E.PVC_ADD: True,
    }


def test_a_hint_handed_the_wrong_object_queues() -> None:
    """Upstream's "type conversion error" cases: an error is Queue."""
    hints = QueueingHints({"default-scheduler": default_framework()})
    target = pod("pod-a", claim_vol("pvc-a"))
    for plugin, event in (
        ("VolumeBinding", E.PVC_UPDATE),
        ("VolumeBinding", E.STORAGE_CLASS_UPDATE),
        ("VolumeBinding", E.CSI_STORAGE_CAPACITY_UPDATE),
        ("VolumeZone", E.PV_UPDATE),
        ("NodeVolumeLimits", E.CSI_NODE_UPDATE),
        ("VolumeRestrictions", E.ASSIGNED_POD_DELETE),
    ):
        assert hints.worth_requeuing(target, {plugin}, event, "not-an-object", "not-an-object")


def test_the_storage_informers_hand_the_old_and_new_objects() -> None:
    """An update carries the catalog's copy from before it as the old object, so a PV
    update that leaves its zone alone is skipped, one that moves it is not."""
    catalog = storage.VolumeCatalog()
    seen: list[tuple[ClusterEvent, Any, Any]] = []
    informers = live_volumes.StorageInformers(
        FakeKubeClient(), catalog, lambda e, o, n: seen.append((e, o, n))
    )
    pvs = informers.informers[0]  # one per StorageKind, in its order
    added, modified = client.WatchEventType.ADDED, client.WatchEventType.MODIFIED
    pvs.apply(client.WatchEvent(added, vb.pv("pv-1", labels={GA_ZONE: "a"}, rv="1")))
    pvs.apply(client.WatchEvent(modified, vb.pv("pv-1", labels={GA_ZONE: "a", "x": "y"}, rv="2")))
    pvs.apply(client.WatchEvent(modified, vb.pv("pv-1", labels={GA_ZONE: "b"}, rv="3")))
    assert [(e, o is None) for e, o, _ in seen] == [
        (E.PV_ADD, True),
        (E.PV_UPDATE, False),
        (E.PV_UPDATE, False),
    ]
    verdicts = [volume_zone.is_schedulable_after_volume_change(POD_1, o, n) for _, o, n in seen]
    assert verdicts == [Q, SKIP, Q]
    assert seen[2][1].labels == {GA_ZONE: "a", "x": "y"}
