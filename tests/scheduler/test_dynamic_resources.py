"""DynamicResources against kube-scheduler's own plugin test cases
(``dynamicresources_test.go``: ``TestPlugin`` and ``testIsSchedulableAfterClaimChange``;
case ids keep upstream's names), each phase's status word for word.

The plugin's own work is under test here: which claims it reads and refuses, what it
puts in flight and takes back, what PreBind writes and in which order, what PostFilter
deallocates, which events requeue a pod. The device search is the real allocator's
(:mod:`nodeagent.scheduler.dra.allocator`, with its own tests): the classes here select
every device, so what a case decides is which devices are free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nodeagent.scheduler import api, config, framework, objects, planner, registry, resource_claims
from nodeagent.scheduler.dra import model
from nodeagent.scheduler.framework import ClusterEvent, CycleState, QueueingHint
from nodeagent.scheduler.plugins import dynamic_resources
from nodeagent.scheduler.plugins.dynamic_resources import DynamicResources
from nodeagent.scheduler.resource_claims import ResourceCatalog, ResourceClaim
from tests.scheduler import builders
from tests.scheduler import dra_builders as b
from tests.scheduler.dra.plugin_harness import RecordingWriter

UU = api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
U = api.Code.UNSCHEDULABLE
WORKER = "worker"


def setup(
    claims: Sequence[dict[str, Any]] = (),
    *,
    classes: Sequence[str] = (b.CLASS,),
    devices: int = 0,
    in_flight: Sequence[dict[str, Any]] = (),
) -> tuple[DynamicResources, ResourceCatalog, Any]:
    catalog = ResourceCatalog()
    for body in claims:
        catalog.set_claim(resource_claims.parse_resource_claim(body))
    for name in classes:
        catalog.set_class(resource_claims.parse_device_class(b.device_class(name)))
    if devices:
        catalog.set_slice(resource_claims.parse_resource_slice(b.node_slice(WORKER, devices)))
    for body in in_flight:
        assert catalog.signal_pending(resource_claims.parse_resource_claim(body))
    handle = framework.Handle(resources=catalog)
    plugin = DynamicResources(dynamic_resources.Args(), handle)
    snapshot = builders.snapshot([builders.node(WORKER), builders.node("other")])
    return plugin, catalog, snapshot


def status_of(status: api.Status) -> tuple[api.Code, str]:
    return status.code, status.message


# --- PreEnqueue and PreFilter: the pod's claims --------------------------------------------


@pytest.mark.parametrize(
    ("case", "pod", "claims", "message"),
    [
        (
            "missing-claim",
            b.pod_with_template(status=False),
            [b.claim_dict()],
            'pod "default/my-pod": ResourceClaim not created yet',
        ),
        (
            "deleted-claim",
            b.pod_with_template(),
            [
                {
                    **b.claim_dict(allocated=[(WORKER, "instance-0")]),
                    "metadata": {
                        **b.claim_dict()["metadata"],
                        "deletionTimestamp": "2026-01-01T00:00:00Z",
                    },
                }
            ],
            'resourceclaim "my-pod-my-resource" is being deleted',
        ),
        (
            "wrong-claim",
            b.pod_with_template(),
            [b.claim_dict(owner=b.POD_UID + "123")],
            "ResourceClaim default/my-pod-my-resource was not created for Pod default/my-pod"
            " (Pod is not owner)",
        ),
        (
            "claim-not-found",
            b.pod_with_claim("nowhere"),
            [],
            'could not find ResourceClaim "default/nowhere"',
        ),
    ],
)
def test_a_pod_waits_for_its_claims(
    case: str, pod: api.Pod, claims: list[dict[str, Any]], message: str
) -> None:
    plugin, _, snapshot = setup(claims)
    assert status_of(plugin.pre_enqueue(pod)) == (UU, message)
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status_of(status) == (UU, message)
    # PreFilter failed before recording claims: nothing to deallocate
    post = plugin.post_filter(state, pod, snapshot, None, None)  # type: ignore[arg-type]
    assert status_of(post[1]) == (U, "no new claims to deallocate")


def test_a_claim_not_needed_by_the_template_is_skipped() -> None:
    """A generated-claim status without a name: no claim for that entry (upstream:
    ``claimName == nil``), so PreFilter skips the plugin."""
    plugin, _, snapshot = setup()
    pod = b.pod_with_template(generated=None)
    assert plugin.pre_enqueue(pod).is_success
    assert plugin.pre_filter(CycleState(), pod, snapshot)[1].is_skip


def test_empty_pod_skips_every_phase() -> None:
    plugin, _, snapshot = setup()
    pod = builders.pod("plain")
    state = CycleState()
    assert plugin.pre_enqueue(pod).is_success
    assert plugin.pre_filter(state, pod, snapshot)[1].is_skip
    assert plugin.pre_bind_pre_flight(state, pod, WORKER).is_skip


def test_missing_class() -> None:
    plugin, _, snapshot = setup([b.claim_dict(owner=None)], classes=())
    pod = b.pod_with_claim()
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status_of(status) == (UU, f"request req-1: device class {b.CLASS} does not exist")
    post = plugin.post_filter(state, pod, snapshot, None, None)  # type: ignore[arg-type]
    assert status_of(post[1]) == (U, "no new claims to deallocate")


def test_claim_with_prioritized_list_unknown_device_class() -> None:
    plugin, _, snapshot = setup(
        [b.claim_dict(owner=None, first_available=["no-such-class"])], classes=()
    )
    _, status = plugin.pre_filter(CycleState(), b.pod_with_claim(), snapshot)
    assert status_of(status) == (
        UU,
        "request req-1/sub-0: device class no-such-class does not exist",
    )


def test_a_claim_being_allocated_for_another_pod_waits() -> None:
    pending = b.claim_dict(owner=None, allocated=[(WORKER, "instance-0")])
    plugin, _, snapshot = setup([b.claim_dict(owner=None)], devices=1, in_flight=[pending])
    _, status = plugin.pre_filter(CycleState(), b.pod_with_claim(), snapshot)
    assert status_of(status) == (
        UU,
        "resource claim default/my-pod-my-resource is in the process of being allocated",
    )


# --- Filter, PostFilter -----------------------------------------------------------------------


def filter_statuses(
    plugin: DynamicResources, state: CycleState, pod: api.Pod, snapshot: Any
) -> dict[str, tuple[api.Code, str]]:
    """Per node, the per-node form; the vectorized form must agree."""
    import numpy as np

    nodes = np.arange(len(snapshot.nodes))
    mask = plugin.filter(state, pod, snapshot, nodes)
    out = {}
    for i, node in enumerate(snapshot.nodes):
        status = plugin.filter_node(state, pod, snapshot, i)
        assert status.is_success == bool(mask[i]), node.name
        out[node.name] = status_of(status)
    return out


OK = (api.Code.SUCCESS, "")
CANNOT = (UU, "cannot allocate all claims")


@pytest.mark.parametrize(
    ("case", "claims", "devices", "in_flight", "worker"),
    [
        ("no-resources", [b.claim_dict(owner=None)], 0, [], CANNOT),
        ("with-resources", [b.claim_dict(owner=None)], 1, [], OK),
        (
            "exhausted-resources-in-informer-cache",
            [
                b.claim_dict(owner=None),
                b.claim_dict("other", uid="other", owner=None, allocated=[(WORKER, "instance-0")]),
            ],
            1,
            [],
            CANNOT,
        ),
        (
            "exhausted-resources-in-flight-claim",
            [b.claim_dict(owner=None), b.claim_dict("other", uid="other", owner=None)],
            1,
            [b.claim_dict("other", uid="other", owner=None, allocated=[(WORKER, "instance-0")])],
            CANNOT,
        ),
        (
            "other-resources-in-flight-claim",
            [b.claim_dict(owner=None), b.claim_dict("other", uid="other", owner=None)],
            2,
            [b.claim_dict("other", uid="other", owner=None, allocated=[(WORKER, "instance-1")])],
            OK,
        ),
        (
            "structured-ignore-allocated-admin-access",
            [
                b.claim_dict(owner=None),
                {
                    **b.claim_dict(
                        "admin", uid="admin", owner=None, allocated=[(WORKER, "instance-0")]
                    ),
                },
            ],
            1,
            [],
            "admin",
        ),
    ],
)
def test_filter(
    case: str,
    claims: list[dict[str, Any]],
    devices: int,
    in_flight: list[dict[str, Any]],
    worker: Any,
) -> None:
    if worker == "admin":  # the admin-access device is not in use for others
        results = claims[1]["status"]["allocation"]["devices"]["results"]
        results[0]["adminAccess"] = True
        worker = OK
    plugin, _, snapshot = setup(claims, devices=devices, in_flight=in_flight)
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    found = filter_statuses(plugin, state, pod, snapshot)
    assert found == {WORKER: worker, "other": CANNOT}
    if worker != OK:
        post = plugin.post_filter(state, pod, snapshot, None, None)  # type: ignore[arg-type]
        assert status_of(post[1]) == (U, "still not schedulable")


def test_wrong_topology_deallocates_in_post_filter() -> None:
    """An allocated claim whose node selector names another node: Filter rejects every
    node, PostFilter clears the claim's status (nobody else uses it)."""
    allocated = b.claim_dict(owner=None, allocated=[("elsewhere", "instance-0")], node="elsewhere")
    plugin, catalog, snapshot = setup([allocated])
    catalog.writer = writer = RecordingWriter(catalog)
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    statuses = filter_statuses(plugin, state, pod, snapshot)
    assert set(statuses.values()) == {(UU, "resourceclaim not available on the node")}
    offer, status = plugin.post_filter(state, pod, snapshot, None, None)  # type: ignore[arg-type]
    assert offer is None
    assert status_of(status) == (U, "deallocation of ResourceClaim completed")
    assert writer.calls == ["update-status"]
    cleared = catalog.claim("default", "my-pod-my-resource")
    assert cleared is not None and not cleared.allocated and not cleared.reserved_for


def test_a_claim_used_by_another_pod_is_not_deallocated() -> None:
    allocated = b.claim_dict(
        owner=None,
        allocated=[("elsewhere", "instance-0")],
        node="elsewhere",
        reserved=[("someone", "else")],
    )
    plugin, catalog, snapshot = setup([allocated])
    catalog.writer = writer = RecordingWriter(catalog)
    pod = b.pod_with_claim()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    filter_statuses(plugin, state, pod, snapshot)
    status = plugin.post_filter(state, pod, snapshot, None, None)[1]  # type: ignore[arg-type]
    assert status_of(status) == (U, "still not schedulable")
    assert writer.calls == []


# --- Reserve, Unreserve, PreBind ----------------------------------------------------------------


def scheduled(
    claims: Sequence[dict[str, Any]], devices: int = 1
) -> tuple[DynamicResources, ResourceCatalog, CycleState, api.Pod]:
    plugin, catalog, snapshot = setup(claims, devices=devices)
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    assert filter_statuses(plugin, state, pod, snapshot)[WORKER] == OK
    assert plugin.reserve(state, pod, WORKER).is_success
    return plugin, catalog, state, pod


def test_reserve_puts_the_allocation_in_flight_and_unreserve_takes_it_back() -> None:
    """``skip-bind``: the allocation is in flight after Reserve (the next pod sees the
    device taken) and gone after Unreserve."""
    plugin, catalog, state, pod = scheduled([b.claim_dict(owner=None)])
    pending = catalog.pending("claim-uid")
    assert pending is not None and pending.allocated
    assert catalog.devices_in_use() == {model.DeviceID(b.DRIVER, WORKER, "instance-0")}
    snapshot = builders.snapshot([builders.node(WORKER)])
    # another pod's cycle meanwhile: the claim is being allocated
    _, status = plugin.pre_filter(CycleState(), pod, snapshot)
    assert "is in the process of being allocated" in status.message
    plugin.unreserve(state, pod, WORKER)
    assert catalog.pending("claim-uid") is None
    assert catalog.devices_in_use() == frozenset()


def test_prebind_writes_the_finalizer_then_allocation_and_reservation() -> None:
    """``with-resources``: a normal update adds the finalizer, then one status update
    records the allocation and the pod in reservedFor; the written claim is assumed and
    the allocation leaves the in-flight set."""
    plugin, catalog, state, pod = scheduled([b.claim_dict(owner=None)])
    catalog.writer = writer = RecordingWriter(catalog)
    assert plugin.pre_bind_pre_flight(state, pod, WORKER).is_success
    assert plugin.pre_bind(state, pod, WORKER).is_success
    assert writer.calls == ["update", "update-status"]
    stored = catalog.claim("default", "my-pod-my-resource")
    assert stored is not None
    assert resource_claims.FINALIZER in stored.finalizers
    assert stored.reserved_for_pod(pod)
    assert stored.raw["status"]["allocation"]["devices"]["results"] == [
        {"request": "req-1", "driver": b.DRIVER, "pool": WORKER, "device": "instance-0"}
    ]
    assert catalog.pending("claim-uid") is None
    assert catalog.devices_in_use() == {model.DeviceID(b.DRIVER, WORKER, "instance-0")}


def test_prebind_retries_a_conflict_with_the_latest_claim() -> None:
    plugin, catalog, state, pod = scheduled([b.claim_dict(owner=None)])
    catalog.writer = writer = RecordingWriter(catalog, conflicts=1)
    assert plugin.pre_bind(state, pod, WORKER).is_success
    assert writer.calls == ["update", "update-status", "get", "update-status"]


def test_prebind_fails_when_the_claim_got_allocated_elsewhere() -> None:
    """``bind-failure-concurrent-deallocation``'s sibling: the status update conflicts,
    and the latest claim is allocated already: PreBind errors (the pod backs off)."""
    plugin, catalog, state, pod = scheduled([b.claim_dict(owner=None)])
    catalog.writer = RecordingWriter(catalog, conflicts=1)
    catalog.set_claim(
        resource_claims.parse_resource_claim(
            {
                **b.claim_dict(owner=None, allocated=[(WORKER, "instance-0")]),
                "metadata": {**b.claim_dict()["metadata"], "resourceVersion": "99"},
            }
        )
    )
    status = plugin.pre_bind(state, pod, WORKER)
    assert status.code is api.Code.ERROR
    assert (
        status.message == "claim default/my-pod-my-resource got allocated elsewhere in the meantime"
    )
    assert catalog.pending("claim-uid") is None


def test_good_topology_only_reserves() -> None:
    """An allocated claim on the node: PreBind adds the pod to reservedFor, nothing else."""
    allocated = b.claim_dict(owner=None, allocated=[(WORKER, "instance-0")], node=WORKER)
    plugin, catalog, state, pod = scheduled([allocated], devices=0)
    catalog.writer = writer = RecordingWriter(catalog)
    assert plugin.pre_bind(state, pod, WORKER).is_success
    assert writer.calls == ["update-status"]
    stored = catalog.claim("default", "my-pod-my-resource")
    assert stored is not None and [c.name for c in stored.reserved_for] == ["my-pod"]
    plugin.unreserve(state, pod, WORKER)  # the binding failed afterwards
    assert writer.calls[-1] == f"unreserve {b.POD_UID}"


def test_offline_prebind_commits() -> None:
    """The planner: no API, the claim is allocated and reserved in the catalog."""
    plugin, catalog, state, pod = scheduled([b.claim_dict(owner=None)])
    assert plugin.pre_bind(state, pod, WORKER).is_success
    stored = catalog.claim("default", "my-pod-my-resource")
    assert stored is not None and stored.allocated and stored.reserved_for_pod(pod)
    assert catalog.pending("claim-uid") is None


# --- QueueingHints (testIsSchedulableAfterClaimChange) ---------------------------------------


def parsed(body: dict[str, Any]) -> ResourceClaim:
    return resource_claims.parse_resource_claim(body)


PENDING = b.claim_dict(owner=None)
ALLOCATED_OTHER = b.claim_dict("other", uid="other", owner=None, allocated=[(WORKER, "x")])


@pytest.mark.parametrize(
    ("case", "pod", "claims", "old", "new", "hint"),
    [
        (
            "skip-deletes",
            b.pod_with_template(status=False),
            [],
            parsed(b.claim_dict()),
            None,
            "skip",
        ),
        (
            "skip-wrong-claim",
            b.pod_with_template(status=False),
            [],
            None,
            parsed(b.claim_dict(owner="x")),
            "skip",
        ),
        (
            "skip-unrelated-claim",
            b.pod_with_template(),
            [b.claim_dict()],
            None,
            parsed(b.claim_dict("my-pod-my-resource-foo", uid="claim-uid123")),
            "skip",
        ),
        ("queue-on-add", b.pod_with_claim(), [PENDING], None, parsed(PENDING), "queue"),
        (
            "skip-adding-finalizer",
            b.pod_with_claim(),
            [PENDING],
            parsed(PENDING),
            parsed({**PENDING, "metadata": {**PENDING["metadata"], "finalizers": ["foo"]}}),
            "skip",
        ),
        (
            "queue-on-status-change",
            b.pod_with_claim(),
            [PENDING],
            parsed(PENDING),
            parsed(b.claim_dict(owner=None, allocated=[])),
            "queue",
        ),
        (
            "claim-deallocate",
            b.pod_with_claim(),
            [PENDING, ALLOCATED_OTHER],
            parsed(ALLOCATED_OTHER),
            parsed(b.claim_dict("other", uid="other", owner=None)),
            "queue",
        ),
    ],
)
def test_claim_change_hint(  # noqa: PLR0917 - one parameter per table column
    case: str,
    pod: api.Pod,
    claims: list[dict[str, Any]],
    old: ResourceClaim | None,
    new: ResourceClaim | None,
    hint: str,
) -> None:
    plugin, _, _ = setup(claims)
    want = QueueingHint.QUEUE if hint == "queue" else QueueingHint.QUEUE_SKIP
    assert plugin.after_claim_change(pod, old, new) is want


@pytest.mark.parametrize("old", [None, "not-a-claim"])
def test_claim_change_hint_on_a_wrong_object_raises(old: object) -> None:
    """``backoff-wrong-new-object``/``backoff-wrong-old-object``: an error (the queue
    then requeues the pod, as upstream)."""
    plugin, _, _ = setup([PENDING])
    new: object = "not-a-claim" if old is None else parsed(PENDING)
    with pytest.raises(TypeError):
        plugin.after_claim_change(b.pod_with_claim(), old, new)


def test_pod_change_hint_queues_once_the_generated_claim_is_named() -> None:
    plugin, _, _ = setup([b.claim_dict()])
    waiting = b.pod_with_template(status=False)
    named = b.pod_with_template()
    assert plugin.after_pod_change(waiting, waiting, named) is QueueingHint.QUEUE
    assert plugin.after_pod_change(waiting, waiting, waiting) is QueueingHint.QUEUE_SKIP
    other = builders.pod("someone-else")
    assert plugin.after_pod_change(waiting, other, other) is QueueingHint.QUEUE_SKIP


def test_registered_events() -> None:
    plugin, _, _ = setup()
    events = {e for entry in plugin.events_to_register() for e in entry.events}
    assert events == {
        ClusterEvent.NODE_ADD,
        ClusterEvent.NODE_LABEL_CHANGE,
        ClusterEvent.NODE_ALLOCATABLE_CHANGE,
        ClusterEvent.RESOURCE_CLAIM_ADD,
        ClusterEvent.RESOURCE_CLAIM_UPDATE,
        ClusterEvent.UNSCHEDULED_POD_GENERATED_RESOURCE_CLAIM,
        ClusterEvent.DEVICE_CLASS_ADD,
        ClusterEvent.DEVICE_CLASS_UPDATE,
        ClusterEvent.RESOURCE_SLICE_ADD,
        ClusterEvent.RESOURCE_SLICE_UPDATE,
    }


def test_generated_claim_status_is_its_own_pod_update_event() -> None:
    waiting = b.pod_with_template(status=False)
    named = b.pod_with_template()
    assert framework.pod_update_events(waiting, named) == [
        ClusterEvent.UNSCHEDULED_POD_GENERATED_RESOURCE_CLAIM
    ]


# --- the catalog: assume cache and devices in use ------------------------------------------


def _version(body: dict[str, Any], rv: str) -> ResourceClaim:
    return parsed({**body, "metadata": {**body["metadata"], "resourceVersion": rv}})


def test_an_assumed_claim_is_read_until_the_informer_catches_up() -> None:
    """``AssumeClaimAfterAPICall``: the written version is read until the informer
    delivers one at least as new; an older delivery does not undo it."""
    catalog = ResourceCatalog()
    catalog.set_claim(_version(PENDING, "5"))
    written = _version(b.claim_dict(owner=None, allocated=[(WORKER, "d")]), "7")
    catalog.assume(written)
    key = ("default", "my-pod-my-resource")
    assert catalog.claim(*key) == written and catalog.api_claim(*key) == _version(PENDING, "5")
    assert catalog.devices_in_use() == {model.DeviceID(b.DRIVER, WORKER, "d")}
    catalog.set_claim(_version(PENDING, "6"))  # a late event from before the write
    assert catalog.claim(*key) == written
    catalog.set_claim(_version(b.claim_dict(owner=None, allocated=[(WORKER, "d")]), "7"))
    assert catalog.claim(*key) == catalog.api_claim(*key)
    assert catalog.devices_in_use() == {model.DeviceID(b.DRIVER, WORKER, "d")}
    catalog.set_claim(catalog.api_claim(*key), present=False)  # type: ignore[arg-type]
    assert catalog.claim(*key) is None and catalog.devices_in_use() == frozenset()


def test_restore_drops_the_assumption_and_its_devices() -> None:
    catalog = ResourceCatalog()
    catalog.set_claim(_version(PENDING, "5"))
    catalog.assume(_version(b.claim_dict(owner=None, allocated=[(WORKER, "d")]), "7"))
    catalog.restore("default/my-pod-my-resource")
    assert catalog.claim("default", "my-pod-my-resource") == _version(PENDING, "5")
    assert catalog.devices_in_use() == frozenset()


def test_devices_held_by_two_claims_stay_in_use_until_both_let_go() -> None:
    """Admin access shares a device; the count per device keeps it in use while any
    exclusive holder remains (and admin-access results never count)."""
    catalog = ResourceCatalog()
    one = b.claim_dict("one", uid="1", owner=None, allocated=[(WORKER, "d")])
    admin = b.claim_dict("admin", uid="2", owner=None, allocated=[(WORKER, "d")])
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    catalog.set_claim(parsed(one))
    catalog.set_claim(parsed(admin))
    assert catalog.devices_in_use() == {model.DeviceID(b.DRIVER, WORKER, "d")}
    catalog.set_claim(parsed(b.claim_dict("one", uid="1", owner=None)))  # deallocated
    assert catalog.devices_in_use() == frozenset()


def test_shared_device_allocations_are_listed_for_the_allocator() -> None:
    """Consumable capacity: a result with a share ID is not a dedicated device; the
    allocation is handed to the allocator's in-use state with its share."""
    catalog = ResourceCatalog()
    shared = b.claim_dict("s", uid="s", owner=None, allocated=[(WORKER, "d")])
    shared["status"]["allocation"]["devices"]["results"][0]["shareID"] = "share-1"
    catalog.set_claim(parsed(shared))
    assert catalog.devices_in_use() == frozenset()
    [allocation] = catalog.shared_allocations()
    assert allocation.results[0].share_id == "share-1"


def test_a_pod_held_for_its_claim_goes_once_the_claim_appears() -> None:
    """The live scheduler runs PreEnqueue again for the held pods when a claim is added
    (``recheck_gated``): the pod waiting for it goes to the active queue."""
    from nodeagent.base.clock import FakeClock
    from nodeagent.scheduler.live.events import QueueingHints
    from nodeagent.scheduler.live.queue import SchedulingQueue, Where
    from nodeagent.scheduler.plugins import priority_sort

    plugin, catalog, _ = setup()
    clock = FakeClock()
    queue = SchedulingQueue(
        less=priority_sort.PrioritySort().less,
        pre_enqueue=plugin.pre_enqueue,
        clock=clock.now,
        hints=QueueingHints({}),
    )
    waiting = b.pod_with_claim()
    queue.add(waiting)
    assert queue.where(waiting.uid) is Where.GATED
    assert queue.recheck_gated(ClusterEvent.RESOURCE_CLAIM_ADD) == 0
    catalog.set_claim(parsed(PENDING))
    assert queue.recheck_gated(ClusterEvent.RESOURCE_CLAIM_ADD) == 1
    assert queue.where(waiting.uid) is Where.ACTIVE


def test_preemption_after_a_deallocation_judges_the_claim_as_the_cycle_read_it() -> None:
    """PostFilter deallocates an idle claim allocated on a node the pod may not use
    (tainted); DefaultPreemption runs next in the same PostFilter, and its dry run must
    see the claim as that cycle's PreFilter read it (v1.36.3 shares the cycle's
    ``stateData`` through ``CycleState.Clone``): still allocated on the tainted node, so
    no node is a candidate and nobody is evicted. Deallocating first is meant to spare
    pods doing useful work (``applyDynamicResources``); a later cycle may place or
    preempt with the claim free."""
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    filler = builders.container(requests={"cpu": "4"})
    objs = [
        builders.node_dict("tainted", taints=[taint]),
        builders.node_dict("busy"),
        builders.node_dict("idle"),
        builders.pod_dict("filler", containers=[filler], node_name="busy", priority=0),
        b.device_class(),
        b.node_slice("tainted"),
        b.node_slice("busy"),
        b.claim_dict(owner=None, allocated=[("tainted", "instance-0")], node="tainted"),
        {
            **builders.pod_dict(
                "my-pod",
                requests={"cpu": "1"},
                priority=100,
                resourceClaims=[{"name": "r", "resourceClaimName": "my-pod-my-resource"}],
            ),
        },
    ]
    objs[-1]["metadata"]["uid"] = b.POD_UID
    cluster = objects.read_cluster(objs)
    configuration = config.parse_configuration(None, registry.in_tree_registry())
    (placement,) = planner.plan(cluster, configuration, seed=0, now=0.0).placements
    assert placement.status is planner.Outcome.UNSCHEDULABLE, placement
    assert placement.victims == ()
    assert "deallocation of ResourceClaim completed" in (placement.message or "")


def test_reserve_allocates_what_filter_found_on_the_node_chosen() -> None:
    """Filter keeps no allocation per node (Score reads none here): Reserve asks the
    cycle's allocator again for the node chosen and puts in flight the device Filter
    found there; a node that failed Filter has no allocation to reserve."""
    catalog = ResourceCatalog()
    catalog.set_claim(resource_claims.parse_resource_claim(b.claim_dict(owner=None)))
    catalog.set_claim(
        resource_claims.parse_resource_claim(
            b.claim_dict("other", uid="other", owner=None, allocated=[("b", "instance-0")])
        )
    )
    catalog.set_class(resource_claims.parse_device_class(b.device_class()))
    for name, devices in (("a", 0), ("b", 2), ("c", 2)):
        if devices:
            catalog.set_slice(resource_claims.parse_resource_slice(b.node_slice(name, devices)))
    plugin = DynamicResources(dynamic_resources.Args(), framework.Handle(resources=catalog))
    snapshot = builders.snapshot([builders.node(n) for n in ("a", "b", "c")])
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    assert filter_statuses(plugin, state, pod, snapshot) == {"a": CANNOT, "b": OK, "c": OK}
    failed = plugin.reserve(state, pod, "a")
    assert failed.code is api.Code.ERROR
    assert failed.message == "claim allocation not found for node"
    assert plugin.reserve(state, pod, "b").is_success
    pending = catalog.pending("claim-uid")
    assert pending is not None and pending.allocation is not None
    assert [str(r.device_id) for r in pending.allocation.results] == [
        f"{b.DRIVER}/b/instance-1"  # instance-0 is the other claim's
    ]
    assert pending.allocation.node_selector == model.NodeSelector(
        (api.SelectorTerm(match_fields=(api.Requirement("metadata.name", "In", ("b",)),)),)
    )


def test_score_reads_the_subrequest_each_node_chose() -> None:
    """firstAvailable: the allocations Filter found are kept for Score, which ranks a
    node where the first subrequest was met above one where only the second was."""
    catalog = ResourceCatalog()
    catalog.set_claim(
        resource_claims.parse_resource_claim(
            b.claim_dict(owner=None, first_available=["big", b.CLASS])
        )
    )
    catalog.set_class(resource_claims.parse_device_class(b.device_class()))
    catalog.set_class(
        resource_claims.parse_device_class(
            b.device_class("big", selector='device.driver == "big-driver"')
        )
    )
    catalog.set_slice(resource_claims.parse_resource_slice(b.node_slice("small", 1)))
    catalog.set_slice(
        resource_claims.parse_resource_slice(b.node_slice("large", 1, driver="big-driver"))
    )
    plugin = DynamicResources(dynamic_resources.Args(), framework.Handle(resources=catalog))
    snapshot = builders.snapshot([builders.node("small"), builders.node("large")])
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    assert filter_statuses(plugin, state, pod, snapshot) == {"small": OK, "large": OK}
    import numpy as np

    assert plugin.pre_score(state, pod, snapshot, np.arange(2)).is_success
    small, large = plugin.score(state, pod, snapshot, np.arange(2)).tolist()
    assert large > small > 0
