"""The pod-resources rule with status resources, case by case from component-helpers'
``resource/helpers_test.go`` (v0.36.3: ``TestPodResourceRequests``,
``TestPodResourceLimits``, ``TestAggregateContainerRequestsAndLimits``), the pod-level
cases written from ``PodRequests``/``PodLimits``, and the kubelet's view
(``GetResourceRequestQuantity`` over the allocated pod).

Pods are written as the API sends them and read by the real reader, so the table also
covers reading the status: container and init-container statuses, the two resize
conditions, pod-level ``status.resources`` and ``allocatedResources``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from nodeagent.agent.podinfo import read_resources, requests_and_limits
from nodeagent.k8s import resources
from nodeagent.k8s.quantities import quantity_value
from nodeagent.scheduler import objects

Res = Mapping[str, str]


def amounts(values: Res) -> dict[str, int]:
    return {
        name: int(quantity_value(text) * (1000 if name == "cpu" else 1))
        for name, text in values.items()
    }


def ctr(
    name: str, requests: Res | None = None, limits: Res | None = None, *, always: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "app", "resources": {}}
    if requests is not None:
        out["resources"]["requests"] = dict(requests)
    if limits is not None:
        out["resources"]["limits"] = dict(limits)
    if always:
        out["restartPolicy"] = "Always"
    return out


def st(
    name: str, requests: Res | None = None, limits: Res | None = None, allocated: Res | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if requests is not None or limits is not None:
        out["resources"] = {"requests": dict(requests or {}), "limits": dict(limits or {})}
    if allocated is not None:
        out["allocatedResources"] = dict(allocated)
    return out


INFEASIBLE = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
DEFERRED = [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]
IN_PROGRESS = [{"type": "PodResizeInProgress", "status": "True"}]


def pod(
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "containerStatuses": statuses or [],
        "initContainerStatuses": init_statuses or [],
        "conditions": conditions or [],
    }
    for key in ("resources", "allocatedResources"):
        if f"status_{key}" in spec:
            status[key] = spec.pop(f"status_{key}")
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": containers or [], "initContainers": init or [], **spec},
        "status": status,
    }


def read(raw: Mapping[str, Any]) -> resources.PodResources:
    return resources.read_pod_resources(
        objects.STRICT,
        raw["spec"],
        objects.FieldPath("Pod", "spec"),
        status=raw["status"],
        status_where=objects.FieldPath("Pod", "status"),
    )


C1 = "container-1"
R1 = "restartable-init-1"

# (id, pod, use_status, expected requests)
REQUESTS = [
    (
        "resized, infeasible",
        pod([ctr(C1, {"cpu": "4"})], statuses=[st(C1, {"cpu": "2"})], conditions=INFEASIBLE),
        True,
        {"cpu": "2"},
    ),
    (
        "resized, infeasible & in-progress",
        pod(
            [ctr(C1, {"cpu": "6"})],
            statuses=[st(C1, {"cpu": "2"}, allocated={"cpu": "4"})],
            conditions=INFEASIBLE,
        ),
        True,
        {"cpu": "4"},
    ),
    (
        "resized, no resize status",
        pod([ctr(C1, {"cpu": "4"})], statuses=[st(C1, {"cpu": "2"})]),
        True,
        {"cpu": "4"},
    ),
    (
        "resized: per-resource 3-way maximum",
        pod(
            [ctr(C1, {"cpu": "30m", "memory": "20M", "ephemeral-storage": "10G"})],
            statuses=[
                st(
                    C1,
                    {"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"},
                    allocated={"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"},
                )
            ],
        ),
        True,
        {"cpu": "30m", "memory": "30M", "ephemeral-storage": "30G"},
    ),
    (
        "resized, infeasible, but don't use status",
        pod([ctr(C1, {"cpu": "4"})], statuses=[st(C1, {"cpu": "2"})], conditions=INFEASIBLE),
        False,
        {"cpu": "4"},
    ),
    (
        "resized, restartable init container, infeasible",
        pod(
            init=[ctr(R1, {"cpu": "4"}, always=True)],
            init_statuses=[st(R1, {"cpu": "2"})],
            conditions=INFEASIBLE,
        ),
        True,
        {"cpu": "2"},
    ),
    (
        "resized, restartable init container, no resize status",
        pod(init=[ctr(R1, {"cpu": "4"}, always=True)], init_statuses=[st(R1, {"cpu": "2"})]),
        True,
        {"cpu": "4"},
    ),
    (
        "resized, restartable init container, infeasible, but don't use status",
        pod(
            init=[ctr(R1, {"cpu": "4"}, always=True)],
            init_statuses=[st(R1, {"cpu": "2"})],
            conditions=INFEASIBLE,
        ),
        False,
        {"cpu": "4"},
    ),
    (
        "regularcontainers with empty requests, but status with non-empty requests",
        pod([ctr(C1)], statuses=[st(C1, {"cpu": "2"})]),
        True,
        {"cpu": "2"},
    ),
    (
        "always-restart init containers with empty requests, but status with non-empty requests",
        pod(init=[ctr(C1, always=True)], init_statuses=[st(C1, {"cpu": "2"})]),
        True,
        {"cpu": "2"},
    ),
    # not upstream's: the rule's other branches
    (
        "deferred counts the spec like no condition",
        pod([ctr(C1, {"cpu": "4"})], statuses=[st(C1, {"cpu": "2"})], conditions=DEFERRED),
        True,
        {"cpu": "4"},
    ),
    (
        "in progress: the larger of spec and actual (a resize down counts the old)",
        pod(
            [ctr(C1, {"cpu": "1"})],
            statuses=[st(C1, {"cpu": "2"}, allocated={"cpu": "1"})],
            conditions=IN_PROGRESS,
        ),
        True,
        {"cpu": "2"},
    ),
    (
        "allocatedResources without resources is not read",
        pod([ctr(C1, {"cpu": "1"})], statuses=[st(C1, allocated={"cpu": "3"})]),
        True,
        {"cpu": "1"},
    ),
    (
        "an ordinary init container's status is not read",
        pod(init=[ctr("i", {"cpu": "4"})], init_statuses=[st("i", {"cpu": "8"})]),
        True,
        {"cpu": "4"},
    ),
    (
        "a status of a container the spec no longer has is ignored",
        pod([ctr(C1, {"cpu": "1"})], statuses=[st("gone", {"cpu": "8"})]),
        True,
        {"cpu": "1"},
    ),
    (
        "pod level: the larger of spec, actual and allocated",
        pod(
            [ctr(C1, {"cpu": "1"})],
            resources={"requests": {"cpu": "2", "memory": "1Gi"}},
            status_resources={"requests": {"cpu": "3", "memory": "512Mi"}},
            status_allocatedResources={"cpu": "2", "memory": "2Gi"},
        ),
        True,
        {"cpu": "3", "memory": "2Gi"},
    ),
    (
        "pod level, infeasible: actual and allocated only, 0 where neither names it",
        pod(
            [ctr(C1, {"cpu": "1"})],
            resources={"requests": {"cpu": "4", "memory": "1Gi"}},
            status_resources={"requests": {"cpu": "3"}},
            conditions=INFEASIBLE,
        ),
        True,
        {"cpu": "3", "memory": "0"},
    ),
    (
        "pod level, overhead added after the status",
        pod(
            [ctr(C1, {"cpu": "1"})],
            resources={"requests": {"cpu": "2"}},
            overhead={"cpu": "250m"},
            status_resources={"requests": {"cpu": "1"}},
        ),
        True,
        {"cpu": "2250m"},
    ),
]


@pytest.mark.parametrize(
    ("raw", "use_status", "expected"),
    [pytest.param(p, u, e, id=i) for i, p, u, e in REQUESTS],
)
def test_pod_requests(raw: dict[str, Any], use_status: bool, expected: Res) -> None:
    assert resources.pod_requests(read(raw), use_status=use_status) == amounts(expected)


LIMITS = [
    (
        "pod scaled up",
        pod([ctr(C1, limits={"memory": "2Gi"})], statuses=[st(C1, limits={"memory": "1Gi"})]),
        True,
        {"memory": "2Gi"},
    ),
    (
        "pod scaled down",
        pod([ctr(C1, limits={"memory": "1Gi"})], statuses=[st(C1, limits={"memory": "2Gi"})]),
        True,
        {"memory": "2Gi"},
    ),
    (
        "pod scaled down, don't use status",
        pod([ctr(C1, limits={"memory": "1Gi"})], statuses=[st(C1, limits={"memory": "2Gi"})]),
        False,
        {"memory": "1Gi"},
    ),
    (
        "pod scaled up with restartable init containers",
        pod(
            init=[ctr(R1, limits={"memory": "2Gi"}, always=True)],
            init_statuses=[st(R1, limits={"memory": "1Gi"})],
        ),
        True,
        {"memory": "2Gi"},
    ),
    (
        "pod scaled down with restartable init containers",
        pod(
            init=[ctr(R1, limits={"memory": "1Gi"}, always=True)],
            init_statuses=[st(R1, limits={"memory": "2Gi"})],
        ),
        True,
        {"memory": "2Gi"},
    ),
    (
        "pod scaled down with restartable init containers, don't use status",
        pod(
            init=[ctr(R1, limits={"memory": "1Gi"}, always=True)],
            init_statuses=[st(R1, limits={"memory": "2Gi"})],
        ),
        False,
        {"memory": "1Gi"},
    ),
    (
        "infeasible: the actual limits alone",
        pod(
            [ctr(C1, limits={"memory": "4Gi", "cpu": "2"})],
            statuses=[st(C1, limits={"memory": "1Gi"})],
            conditions=INFEASIBLE,
        ),
        True,
        {"memory": "1Gi"},
    ),
    (
        "overhead only on a non-zero limit",
        pod([ctr(C1, limits={"memory": "0", "cpu": "1"})], overhead={"memory": "1Mi", "cpu": "1"}),
        True,
        {"memory": "0", "cpu": "2"},
    ),
    (
        "pod level limits: the larger of spec and actual",
        pod(
            [ctr(C1, {"cpu": "1"})],
            resources={"limits": {"memory": "1Gi"}},
            status_resources={"limits": {"memory": "2Gi"}},
        ),
        True,
        {"memory": "2Gi"},
    ),
]


@pytest.mark.parametrize(
    ("raw", "use_status", "expected"),
    [pytest.param(p, u, e, id=i) for i, p, u, e in LIMITS],
)
def test_pod_limits(raw: dict[str, Any], use_status: bool, expected: Res) -> None:
    assert resources.pod_limits(read(raw), use_status=use_status) == amounts(expected)


def test_the_scheduler_counts_status_resources() -> None:
    raw = pod([ctr(C1, {"cpu": "1"})], statuses=[st(C1, {"cpu": "3"}, allocated={"cpu": "1"})])
    parsed = objects.parse_pod(raw)
    assert parsed.requests == {"cpu": 3000}
    assert parsed.nonzero_cpu == 3000
    assert parsed.nonzero_memory == resources.DEFAULT_MEMORY_REQUEST


def test_a_bad_status_quantity_names_its_path() -> None:
    raw = pod([ctr(C1, {"cpu": "1"})], statuses=[st(C1, {"cpu": "lots"})])
    with pytest.raises(
        Exception, match=r"status\.containerStatuses\[0\]\.resources\.requests\.cpu"
    ):
        objects.parse_pod(raw)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], resources.ResizePending.NONE),
        (INFEASIBLE, resources.ResizePending.INFEASIBLE),
        (DEFERRED, resources.ResizePending.DEFERRED),
        ([{"type": "PodResizePending", "reason": "Whatever"}], resources.ResizePending.OTHER),
        # IsPodResizeInfeasible reads the first PodResizePending condition only
        (DEFERRED + INFEASIBLE, resources.ResizePending.DEFERRED),
    ],
)
def test_resize_pending_reason(
    conditions: list[dict[str, Any]], expected: resources.ResizePending
) -> None:
    assert read(pod(conditions=conditions)).resize_pending is expected


# API defaulting of pod-level resources (defaultHugePagePodLimits, defaultPodRequests)
@pytest.mark.parametrize(
    ("spec_resources", "containers", "expected_requests", "expected_limits"),
    [
        pytest.param(
            {"requests": {"cpu": "1"}},
            [ctr(C1, {"memory": "1Gi"})],
            {"cpu": "1"},
            {},
            id="requests-only-no-defaulting",
        ),
        pytest.param(
            {"limits": {"cpu": "2", "memory": "2Gi"}},
            [ctr(C1, {"cpu": "500m"})],
            {"cpu": "500m", "memory": "2Gi"},
            {"cpu": "2", "memory": "2Gi"},
            id="requests-from-containers-then-limits",
        ),
        pytest.param(
            {"limits": {"memory": "2Gi"}},
            [ctr(C1, limits={"hugepages-2Mi": "4Mi"})],
            {"memory": "2Gi", "hugepages-2Mi": "4Mi"},
            {"memory": "2Gi", "hugepages-2Mi": "4Mi"},
            id="hugepages-limit-from-containers",
        ),
    ],
)
def test_pod_level_defaulting(
    spec_resources: dict[str, Any],
    containers: list[dict[str, Any]],
    expected_requests: Res,
    expected_limits: Res,
) -> None:
    read_back = read(pod(containers, resources=spec_resources))
    assert dict(read_back.pod_requests) == amounts(expected_requests)
    assert dict(read_back.pod_limits) == amounts(expected_limits)


def test_requests_scaled_down() -> None:
    assert resources.requests_scaled_down({"cpu": 2000}, {"cpu": 1000})
    assert resources.requests_scaled_down({"cpu": 2000, "memory": 1}, {"cpu": 2000})
    assert not resources.requests_scaled_down({"cpu": 1000}, {"cpu": 1000, "memory": 5})
    assert not resources.requests_scaled_down({"cpu": 1000}, {"cpu": 2000})


# The kubelet's eviction manager reads the allocated pod (getAllocatedPods).
GI = 1024**3
KUBELET = [
    (
        "resize up granted, in progress: the new request counts",
        pod(
            [ctr(C1, {"memory": "2Gi"}, {"memory": "2Gi"})],
            statuses=[st(C1, {"memory": "1Gi"}, {"memory": "1Gi"}, allocated={"memory": "2Gi"})],
            conditions=IN_PROGRESS,
        ),
        {"memory": 2 * GI},
        {"memory": 2 * GI},
    ),
    (
        "resize up deferred: the old request counts, and the old limit",
        pod(
            [ctr(C1, {"memory": "2Gi"}, {"memory": "2Gi"})],
            statuses=[st(C1, {"memory": "1Gi"}, {"memory": "1Gi"}, allocated={"memory": "1Gi"})],
            conditions=DEFERRED,
        ),
        {"memory": GI},
        {"memory": GI},
    ),
    (
        "resize deferred: ephemeral-storage (not resizable) stays the spec's",
        pod(
            [ctr(C1, {"cpu": "2"}, {"cpu": "2", "ephemeral-storage": "1Gi"})],
            statuses=[st(C1, {"cpu": "1"}, {"cpu": "1"}, allocated={"cpu": "1"})],
            conditions=DEFERRED,
        ),
        {"cpu": 1000, "ephemeral-storage": GI},
        {"cpu": 1000, "ephemeral-storage": GI},
    ),
    (
        "no status yet: the spec",
        pod([ctr(C1, {"memory": "1Gi", "ephemeral-storage": "1Gi"})]),
        {"memory": GI, "ephemeral-storage": GI},
        {},
    ),
    (
        "overhead only on a non-zero request",
        pod([ctr(C1, {"memory": "1Gi"})], overhead={"memory": "1Mi", "cpu": "250m"}),
        {"memory": GI + 1024**2},
        {},
    ),
    (
        "pod-level resources: the containers are skipped",
        pod(
            [ctr(C1, {"memory": "1Gi", "ephemeral-storage": "1Gi"})],
            resources={"requests": {"memory": "3Gi"}},
        ),
        {"memory": 3 * GI},
        {},
    ),
    (
        "pod level resize deferred: the allocated pod-level request (less overhead)",
        pod(
            [ctr(C1, {"memory": "1Gi"})],
            resources={"requests": {"memory": "3Gi"}, "limits": {"memory": "3Gi"}},
            overhead={"memory": "1Mi"},
            status_resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "2Gi"}},
            status_allocatedResources={"memory": "2049Mi"},
            conditions=DEFERRED,
        ),
        {"memory": 2 * GI + 1024**2},
        {"memory": 2 * GI + 1024**2},
    ),
]


@pytest.mark.parametrize(
    ("raw", "requests", "limits"),
    [pytest.param(p, r, lim, id=i) for i, p, r, lim in KUBELET],
)
def test_kubelet_view(
    raw: dict[str, Any], requests: Mapping[str, int], limits: Mapping[str, int]
) -> None:
    got_requests, got_limits = requests_and_limits(read_resources(raw["spec"], raw["status"]))
    assert got_requests == requests
    assert got_limits == limits


# --- properties -------------------------------------------------------------------------
_cpu = hs.sampled_from(["0", "100m", "250m", "1", "1500m", "2"])
_mem = hs.sampled_from(["0", "64Mi", "1Gi", "2Gi"])
_list = hs.fixed_dictionaries({}, optional={"cpu": _cpu, "memory": _mem})


@hs.composite
def resized_pods(draw: hs.DrawFn) -> dict[str, Any]:
    containers = [ctr(f"c{i}", draw(_list)) for i in range(draw(hs.integers(1, 3)))]
    init = [
        ctr(f"i{i}", draw(_list), always=draw(hs.booleans()))
        for i in range(draw(hs.integers(0, 2)))
    ]
    statuses = [
        st(c["name"], draw(_list), allocated=draw(hs.none() | _list))
        for c in containers
        if draw(hs.booleans())
    ]
    init_statuses = [
        st(c["name"], draw(_list), allocated=draw(hs.none() | _list))
        for c in init
        if draw(hs.booleans())
    ]
    conditions = draw(hs.sampled_from([[], DEFERRED, INFEASIBLE, IN_PROGRESS]))
    return pod(containers, init, statuses, init_statuses, conditions)


@given(resized_pods())
def test_status_only_ever_adds_unless_infeasible(raw: dict[str, Any]) -> None:
    resources_ = read(raw)
    with_status = resources.pod_requests(resources_)
    spec_only = resources.pod_requests(resources_, use_status=False)
    if not resources_.infeasible:
        for name, amount in spec_only.items():
            assert with_status.get(name, 0) >= amount


@given(resized_pods())
def test_a_status_that_repeats_the_spec_changes_nothing(raw: dict[str, Any]) -> None:
    spec_containers = {
        c["name"]: c for c in raw["spec"]["containers"] + raw["spec"]["initContainers"]
    }
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in raw["status"][key]:
            requests = dict(spec_containers[entry["name"]]["resources"].get("requests") or {})
            entry["resources"] = {"requests": requests}
            entry["allocatedResources"] = requests
    raw["status"]["conditions"] = [
        c for c in raw["status"]["conditions"] if c["type"] != "PodResizePending"
    ]
    resources_ = read(raw)
    assert resources.pod_requests(resources_) == resources.pod_requests(
        resources_, use_status=False
    )
