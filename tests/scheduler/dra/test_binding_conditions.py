"""Devices with binding conditions (``DRADeviceBindingConditions``, beta and on in v1.36):
the allocation records the device's ``bindingConditions`` and
``bindingFailureConditions`` (and, for ``bindsToNode``, the node itself as its node
selector); PreBind waits until the driver reports every binding condition True in the
claim's ``status.devices``, fails on a failure condition or after ``bindingTimeout``; the
next attempt's Filter finds such a claim unavailable and PostFilter deallocates it.

The cases are the binding-condition cases of kube-scheduler's ``TestPlugin``
(``dynamicresources_test.go``), under upstream's names. The waits run on a clock the test
moves (no sleeping), and a driver thread writes the conditions while PreBind waits.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from nodeagent.scheduler import api, framework, objects, resource_claims
from nodeagent.scheduler.framework import CycleState
from nodeagent.scheduler.live.metrics import SchedulerMetrics
from nodeagent.scheduler.plugins import dynamic_resources
from nodeagent.scheduler.plugins.dynamic_resources import DynamicResources
from nodeagent.scheduler.resource_claims import ResourceCatalog
from tests.scheduler import builders
from tests.scheduler import dra_builders as b
from tests.scheduler.dra.plugin_harness import RecordingWriter

WORKER = "worker"
UU = api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
U = api.Code.UNSCHEDULABLE
NOW = 1_800_000_000.0
CONDITIONS = ["condition"]
FAILURES = ["failed"]
ON_WORKER = {
    "nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [WORKER]}]}
    ]
}


class Clock:
    """Monotonic and wall time that move only when PreBind waits."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def monotonic(self) -> float:
        return self.elapsed

    def now(self) -> float:
        return NOW + self.elapsed

    def wait(self, timeout: float) -> None:
        self.elapsed += timeout


def fabric_slice(driver: str = b.DRIVER, device: str = "instance-1") -> dict[str, Any]:
    """kube-scheduler's ``fabricSlice``: a device reachable from the worker (by the
    slice's node selector) that binds to the node it is allocated for."""
    body = b.node_slice(WORKER, 0, driver=driver)
    body["spec"].pop("nodeName")
    body["spec"]["nodeSelector"] = ON_WORKER
    body["spec"]["devices"] = [
        {
            "name": device,
            "bindsToNode": True,
            "bindingConditions": CONDITIONS,
            "bindingFailureConditions": FAILURES,
        }
    ]
    return body


def with_binding_conditions(
    body: dict[str, Any],
    *,
    device: str = "instance-1",
    driver: str = b.DRIVER,
    request: str = "req-1",
    allocated_at: str | None = "0001-01-01T00:00:00Z",
    conditions: Sequence[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """``allocationResultWithBindingConditions`` in ``body``'s status, and the device
    status the driver reported (``conditions``: (type, status); ``None``: no entry)."""
    allocation: dict[str, Any] = {
        "devices": {
            "results": [
                {
                    "request": request,
                    "driver": driver,
                    "pool": WORKER,
                    "device": device,
                    "bindingConditions": CONDITIONS,
                    "bindingFailureConditions": FAILURES,
                }
            ]
        },
        "nodeSelector": ON_WORKER,
    }
    if allocated_at is not None:
        allocation["allocationTimestamp"] = allocated_at
    body["status"]["allocation"] = allocation
    body["metadata"]["finalizers"] = [resource_claims.FINALIZER]
    if conditions is not None:
        body["status"]["devices"] = [
            {
                "driver": driver,
                "pool": WORKER,
                "device": device,
                "conditions": [
                    {"type": t, "status": s, "reason": "Test", "message": f"{t} is {s}"}
                    for t, s in conditions
                ],
            }
        ]
    return body


BOUND = [("condition", "True"), ("failed", "False")]
FAILED = [("condition", "False"), ("failed", "True")]


def setup(
    claims: Sequence[dict[str, Any]],
    *,
    slices: Sequence[dict[str, Any]] = (),
    binding_timeout: str = "10m0s",
) -> tuple[DynamicResources, ResourceCatalog, RecordingWriter, Clock, Any]:
    catalog = ResourceCatalog()
    clock = Clock()
    catalog.monotonic, catalog.now = clock.monotonic, clock.now
    catalog.wait_changed = clock.wait  # type: ignore[method-assign]
    catalog.set_class(resource_claims.parse_device_class(b.device_class()))
    for body in slices:
        catalog.set_slice(resource_claims.parse_resource_slice(body))
    for body in claims:
        catalog.set_claim(resource_claims.parse_resource_claim(body))
    catalog.writer = writer = RecordingWriter(catalog)
    args = dynamic_resources.Args(binding_timeout=binding_timeout)
    plugin = DynamicResources(args, framework.Handle(resources=catalog))
    snapshot = builders.snapshot([builders.node(WORKER)])
    return plugin, catalog, writer, clock, snapshot


def two_claims_pod() -> api.Pod:
    return objects.parse_pod(
        {
            "kind": "Pod",
            "metadata": {"name": "my-pod", "namespace": "default", "uid": b.POD_UID},
            "spec": {
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [
                    {"name": "my-resource", "resourceClaimName": "my-pod-my-resource"},
                    {"name": "my-resource-2", "resourceClaimName": "my-pod-my-resource-2"},
                ],
            },
        }
    )


def claim(name: str = "my-pod-my-resource", **kwargs: Any) -> dict[str, Any]:
    return b.claim_dict(name, uid=f"uid-{name}", owner=None, **kwargs)


# --- the allocation records them ----------------------------------------------------------


def test_bind_claim_with_binding_conditions_times_out() -> None:
    """bind-claim-with-binding-conditions: the allocation carries the device's
    conditions and the node (``bindsToNode``); PreBind stamps ``allocationTimestamp``,
    reserves, announces the wait and, with no driver reporting, times out."""
    plugin, catalog, writer, clock, snapshot = setup(
        [claim()], slices=[fabric_slice()], binding_timeout="1s"
    )
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    assert plugin.filter_node(state, pod, snapshot, 0).is_success
    assert plugin.reserve(state, pod, WORKER).is_success
    pending = catalog.pending("uid-my-pod-my-resource")
    assert pending is not None and pending.allocation is not None
    [result] = pending.allocation.results
    assert (result.binding_conditions, result.binding_failure_conditions) == (
        ("condition",),
        ("failed",),
    )
    assert pending.allocation.node_selector is not None
    assert pending.allocation.node_selector.to_api() == ON_WORKER
    assert pending.allocation.allocation_timestamp is None  # set by PreBind
    status = plugin.pre_bind(state, pod, WORKER)
    assert (status.code, status.message) == (
        api.Code.ERROR,
        "device binding timeout: context deadline exceeded",
    )
    assert clock.elapsed == pytest.approx(1.0)
    written = catalog.claim("default", "my-pod-my-resource")
    assert written is not None and written.reserved_for_pod(pod)
    assert written.allocation is not None
    assert written.allocation.allocation_timestamp == resource_claims.rfc3339(NOW)
    assert writer.calls == [
        "update",
        "update-status",
        "event BindingConditionsPending: waiting for binding conditions for device on node worker",
    ]


def test_pre_bind_waits_for_the_driver() -> None:
    """The driver (another thread) reports the condition while PreBind waits: bound."""
    plugin, catalog, _, _, snapshot = setup([claim()], slices=[fabric_slice()])
    catalog.wait_changed = ResourceCatalog.wait_changed.__get__(catalog)  # type: ignore[method-assign]
    catalog.monotonic = time.monotonic
    pod = b.pod_with_claim()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    plugin.filter_node(state, pod, snapshot, 0)
    plugin.reserve(state, pod, WORKER)
    waiting = threading.Event()
    original = catalog.wait_changed

    def wait(timeout: float) -> None:
        waiting.set()
        original(timeout)

    catalog.wait_changed = wait  # type: ignore[method-assign]

    def driver() -> None:
        waiting.wait()
        current = catalog.api_claim("default", "my-pod-my-resource")
        assert current is not None
        body = with_binding_conditions(
            copy.deepcopy(dict(current.raw)),
            allocated_at=resource_claims.rfc3339(NOW),
            conditions=BOUND,
        )
        body["metadata"] = {**body["metadata"], "resourceVersion": "99"}
        catalog.set_claim(resource_claims.parse_resource_claim(body))

    thread = threading.Thread(target=driver)
    thread.start()
    status = plugin.pre_bind(state, pod, WORKER)
    thread.join()
    assert status.is_success, status.message


def test_pre_bind_fails_on_a_failure_condition() -> None:
    """A failure condition reported while PreBind waits: upstream's message."""
    plugin, catalog, _, clock, snapshot = setup([claim()], slices=[fabric_slice()])
    pod = b.pod_with_claim()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    plugin.filter_node(state, pod, snapshot, 0)
    plugin.reserve(state, pod, WORKER)

    def driver_fails(timeout: float) -> None:
        clock.wait(timeout)
        current = catalog.api_claim("default", "my-pod-my-resource")
        assert current is not None
        body = with_binding_conditions(copy.deepcopy(dict(current.raw)), conditions=FAILED)
        body["metadata"] = {**body["metadata"], "resourceVersion": "99"}
        catalog.set_claim(resource_claims.parse_resource_claim(body))

    catalog.wait_changed = driver_fails  # type: ignore[method-assign]
    status = plugin.pre_bind(state, pod, WORKER)
    assert (status.code, status.message) == (
        api.Code.ERROR,
        'device binding failed: claim=my-pod-my-resource, reason=Test, message="failed is True"',
    )


# --- claims already allocated -------------------------------------------------------------


def test_bound_claim_with_succeeded_binding_conditions() -> None:
    plugin, catalog, writer, _, snapshot = setup(
        [with_binding_conditions(claim(), conditions=BOUND)]
    )
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    assert plugin.filter_node(state, pod, snapshot, 0).is_success
    assert plugin.reserve(state, pod, WORKER).is_success
    assert plugin.pre_bind(state, pod, WORKER).is_success
    written = catalog.claim("default", "my-pod-my-resource")
    assert written is not None and written.reserved_for_pod(pod)
    assert writer.calls[0] == "update-status"


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("bound-claim-with-failed-binding", with_binding_conditions(claim(), conditions=FAILED)),
        (
            "bound-claim-with-timed-out-binding",
            with_binding_conditions(
                claim(), allocated_at=resource_claims.rfc3339(NOW - 600), conditions=[]
            ),
        ),
        (
            "bound-claim-with-mixed-binding-conditions",
            with_binding_conditions(
                claim(),
                allocated_at=resource_claims.rfc3339(NOW - 600),
                conditions=[("condition1", "True"), ("condition2", "False")],
            ),
        ),
    ],
)
def test_a_claim_whose_binding_failed_is_deallocated(case: str, body: dict[str, Any]) -> None:
    plugin, catalog, writer, _, snapshot = setup([body], binding_timeout="5m0s")
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    status = plugin.filter_node(state, pod, snapshot, 0)
    assert (status.code, status.message) == (UU, "resourceclaim not available on the node")
    post = plugin.post_filter(state, pod, snapshot, None, None)  # type: ignore[arg-type]
    assert (post[1].code, post[1].message) == (U, "deallocation of ResourceClaim completed")
    cleared = catalog.claim("default", "my-pod-my-resource")
    assert cleared is not None and cleared.allocation is None
    assert "devices" not in cleared.raw["status"]
    assert writer.calls == ["update-status"]


def test_not_timed_out_yet_is_available() -> None:
    """Waiting for its conditions, within the timeout: still this pod's to bind."""
    body = with_binding_conditions(
        claim(), allocated_at=resource_claims.rfc3339(NOW - 60), conditions=[]
    )
    plugin, _, _, _, snapshot = setup([body], binding_timeout="5m0s")
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    assert plugin.filter_node(state, pod, snapshot, 0).is_success


def test_prebind_fail_with_binding_timeout() -> None:
    """prebind-fail-with-binding-timeout: allocated 10 s short of the timeout; PreBind
    waits, and the claim's own timeout ends it first."""
    body = with_binding_conditions(
        claim(), allocated_at=resource_claims.rfc3339(NOW - 590), conditions=[]
    )
    plugin, _, _, clock, snapshot = setup([body])
    pod = b.pod_with_claim()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    assert plugin.filter_node(state, pod, snapshot, 0).is_success
    assert plugin.reserve(state, pod, WORKER).is_success
    status = plugin.pre_bind(state, pod, WORKER)
    assert (status.code, status.message) == (
        api.Code.ERROR,
        "device binding timeout: claim=my-pod-my-resource",
    )
    assert 10 <= clock.elapsed <= 12


def test_bound_claim_without_binding_conditions() -> None:
    """bound-claim-without-binding-conditions: reserved, stamped, no wait."""
    plugin, catalog, writer, clock, snapshot = setup(
        [claim(allocated=[(WORKER, "instance-0")], node=WORKER)]
    )
    pod = b.pod_with_claim()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    assert plugin.filter_node(state, pod, snapshot, 0).is_success
    assert plugin.pre_bind(state, pod, WORKER).is_success
    written = catalog.claim("default", "my-pod-my-resource")
    assert written is not None and written.allocation is not None
    assert written.allocation.allocation_timestamp == resource_claims.rfc3339(NOW)
    assert clock.elapsed == 0 and writer.calls == ["update-status"]


def test_add_allocation_timestamp_failure() -> None:
    """add-allocation-timestamp-failure: deallocated elsewhere before PreBind."""
    allocated = claim(allocated=[(WORKER, "instance-0")], node=WORKER)
    plugin, catalog, _, _, snapshot = setup([allocated])
    pod = b.pod_with_claim()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    plugin.filter_node(state, pod, snapshot, 0)
    cleared = claim()
    cleared["metadata"]["resourceVersion"] = "7"
    catalog.set_claim(resource_claims.parse_resource_claim(cleared))
    status = plugin.pre_bind(state, pod, WORKER)
    assert (status.code, status.message) == (
        api.Code.ERROR,
        "claim default/my-pod-my-resource got deallocated elsewhere in the meantime",
    )


@pytest.mark.parametrize(
    ("case", "second", "want"),
    [
        ("multi-claims-binding-conditions-all-success", BOUND, None),
        ("multi-claims-binding-conditions-one-fail", FAILED, "my-pod-my-resource-2"),
    ],
)
def test_two_claims(case: str, second: list[tuple[str, str]], want: str | None) -> None:
    first = with_binding_conditions(claim(), conditions=BOUND)
    other = with_binding_conditions(
        claim("my-pod-my-resource-2"),
        driver="other-driver",
        device="instance-2",
        request="req-2",
        conditions=second,
    )
    plugin, catalog, _, _, snapshot = setup([first, other])
    pod = two_claims_pod()
    state = CycleState()
    assert plugin.pre_filter(state, pod, snapshot)[1].is_success
    status = plugin.filter_node(state, pod, snapshot, 0)
    if want is None:
        assert status.is_success
        assert plugin.pre_bind(state, pod, WORKER).is_success
        return
    assert (status.code, status.message) == (UU, "resourceclaim not available on the node")
    post = plugin.post_filter(state, pod, snapshot, None, None)  # type: ignore[arg-type]
    assert post[1].message == "deallocation of ResourceClaim completed"
    kept, cleared = (catalog.claim("default", n) for n in ("my-pod-my-resource", want))
    assert kept is not None and kept.allocated
    assert cleared is not None and not cleared.allocated


def test_binding_timeout_must_be_a_second() -> None:
    with pytest.raises(ValueError, match="must be at least 1 second"):
        dynamic_resources.Args(binding_timeout="500ms")


# --- kube-scheduler's metrics of the wait -------------------------------------------------


def _sample(metrics: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


@pytest.mark.parametrize("outcome", ["success", "failure", "timeout"])
def test_the_wait_is_counted_and_timed_by_how_it_ended(outcome: str) -> None:
    """``scheduler_dra_bindingconditions_allocations_total`` counts the device with
    binding conditions, ``..._wait_duration_seconds`` times the wait, both labelled with
    the profile (the pod's scheduler), the driver and how the wait ended."""
    plugin, catalog, _, clock, snapshot = setup(
        [claim()], slices=[fabric_slice()], binding_timeout="2s"
    )
    metrics = SchedulerMetrics(("default-scheduler",), process_metrics=False)
    catalog.observer = metrics
    pod = b.pod_with_claim()
    state = CycleState()
    plugin.pre_filter(state, pod, snapshot)
    plugin.filter_node(state, pod, snapshot, 0)
    plugin.reserve(state, pod, WORKER)

    def driver_reports(timeout: float) -> None:
        clock.wait(min(timeout, 0.5))
        if outcome == "timeout":
            return
        current = catalog.api_claim("default", "my-pod-my-resource")
        assert current is not None
        reported = BOUND if outcome == "success" else FAILED
        body = with_binding_conditions(
            copy.deepcopy(dict(current.raw)),
            allocated_at=resource_claims.rfc3339(NOW),
            conditions=reported,
        )
        body["metadata"] = {**body["metadata"], "resourceVersion": "99"}
        catalog.set_claim(resource_claims.parse_resource_claim(body))

    catalog.wait_changed = driver_reports  # type: ignore[method-assign]
    status = plugin.pre_bind(state, pod, WORKER)
    assert status.is_success == (outcome == "success")
    labels = {"profile": "default-scheduler", "driver": b.DRIVER, "status": outcome}
    assert _sample(metrics, "scheduler_dra_bindingconditions_allocations_total", **labels) == 1
    waited = 0.5 if outcome != "timeout" else 2.0
    assert _sample(
        metrics, "scheduler_dra_bindingconditions_wait_duration_seconds_sum", **labels
    ) == pytest.approx(waited)
    for other in {"success", "failure", "timeout", "error"} - {outcome}:
        assert (
            _sample(
                metrics,
                "scheduler_dra_bindingconditions_allocations_total",
                **{**labels, "status": other},
            )
            is None
        )
