"""Local ephemeral-storage limits (``localStorageEviction``): the three checks, their
order per pod, every violator in one cycle, memory-backed emptyDirs, the dedicated-imagefs
flag on both layouts that have it, exemptions, the kubelet's messages, and no threshold
eviction in a cycle that evicts for local storage."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent import podinfo as kube_pods
from nodeagent.agent.config import load_config
from nodeagent.eviction import engine, local_storage, replay, trace
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.k8s.pressure import Pressure
from nodeagent.k8s.quantities import QuantityFormat
from nodeagent.model import (
    ContainerInfo,
    ContainerUsage,
    Decision,
    EmptyDirVolume,
    FsLayout,
    LocalStorageLimit,
    PodInfo,
    Signal,
)

from .builders import Gi, Mi, observations, pod, policy, usage

EMPTY_DIR = LocalStorageLimit.EMPTY_DIR
POD = LocalStorageLimit.POD
CONTAINER = LocalStorageLimit.CONTAINER


def decide(
    pods: Sequence[PodInfo],
    usages: dict[str, Any],
    *,
    layout: FsLayout = FsLayout.SINGLE,
    signals: dict[Signal, tuple[int, int]] | None = None,
    **settings: Any,
) -> Decision:
    decision, _ = engine.evaluate(
        policy(**settings),
        engine.EngineState(),
        observations(1.0, signals or {}, pods=usages, layout=layout),
        pods,
        1.0,
    )
    return decision


def verdicts(decision: Decision) -> list[tuple[str, str, int, str]]:
    return [
        (e.pod.name, str(e.signal), e.grace_period_seconds, e.message) for e in decision.evictions
    ]


# --- each check, from ``localStorageEviction``'s cases -------------------------------------

SCRATCH_256 = EmptyDirVolume("scratch", size_limit=256 * Mi)

CASES: list[tuple[str, PodInfo, dict[str, Any], list[tuple[LocalStorageLimit, str]]]] = [
    (
        "emptyDir over its sizeLimit",
        pod("a", volumes=(SCRATCH_256,)),
        {"volumes": {"scratch": 256 * Mi + 1}, "local_volumes": 256 * Mi + 1},
        [(EMPTY_DIR, 'Usage of EmptyDir volume "scratch" exceeds the limit "256Mi". ')],
    ),
    (
        "emptyDir exactly at its sizeLimit is not over it",
        pod("a", volumes=(SCRATCH_256,)),
        {"volumes": {"scratch": 256 * Mi}},
        [],
    ),
    (
        "memory-backed emptyDir is checked against its sizeLimit too",
        pod("a", volumes=(EmptyDirVolume("shm", "Memory", 64 * Mi),)),
        {"volumes": {"shm": 65 * Mi}, "local_volumes": 0},
        [(EMPTY_DIR, 'Usage of EmptyDir volume "shm" exceeds the limit "64Mi". ')],
    ),
    (
        "a zero sizeLimit means no limit",
        pod("a", volumes=(EmptyDirVolume("scratch", size_limit=0),)),
        {"volumes": {"scratch": Gi}},
        [],
    ),
    (
        "usage reported for a volume the spec does not declare is ignored",
        pod("a", volumes=(SCRATCH_256,)),
        {"volumes": {"other": Gi}},
        [],
    ),
    (
        "pod total (layers + logs + local volumes) over the pod limit",
        pod("a", limits={"ephemeral-storage": Gi}),
        {"rootfs": 512 * Mi, "logs": 256 * Mi, "local_volumes": 256 * Mi + 1},
        [(POD, "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ")],
    ),
    (
        "pod total at its limit is not over it",
        pod("a", limits={"ephemeral-storage": Gi}),
        {"rootfs": 512 * Mi, "logs": 256 * Mi, "local_volumes": 256 * Mi},
        [],
    ),
    (
        "a limit that is not a whole power of 1024 prints in bytes, as Quantity.String()",
        pod("a", limits={"ephemeral-storage": 1_000_000_000}),
        {"logs": 1_000_000_001},
        [
            (
                POD,
                "Pod ephemeral local storage usage exceeds the total limit of containers "
                "1000000000. ",
            )
        ],
    ),
    (
        "container over its own limit (logs + writable layer on a single filesystem)",
        pod(
            "a",
            containers=(ContainerInfo("app", 100 * Mi), ContainerInfo("side", 100 * Mi)),
        ),
        {"containers": {"app": ContainerUsage(rootfs=60 * Mi, logs=41 * Mi)}},
        [(CONTAINER, 'Container app exceeded its local ephemeral storage limit "100Mi". ')],
    ),
    (
        "container without a limit cannot break one",
        pod("a", containers=(ContainerInfo("app", None),)),
        {"containers": {"app": ContainerUsage(rootfs=Gi, logs=Gi)}},
        [],
    ),
    (
        "a pod without usage stats is skipped",
        pod("nostats", limits={"ephemeral-storage": 1}, volumes=(SCRATCH_256,)),
        {},
        [],
    ),
]


@pytest.mark.parametrize(
    ("pod_info", "figures", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_check(
    pod_info: PodInfo, figures: dict[str, Any], expected: list[tuple[LocalStorageLimit, str]]
) -> None:
    usages = {pod_info.name: usage(pod_info.name, **figures)} if figures else {}
    decision = decide([pod_info], usages)
    assert [(e.signal, e.message) for e in decision.evictions] == expected
    assert all(e.grace_period_seconds == 1 for e in decision.evictions)


# --- order and scope ---------------------------------------------------------------------


def test_checks_run_in_the_kubelets_order_and_each_pod_is_evicted_once() -> None:
    # one pod breaks all three: the emptyDir check speaks; without the volume the pod
    # check; a single-container pod over its limit is caught by the pod check first.
    everything = pod(
        "all",
        limits={"ephemeral-storage": 100 * Mi},
        containers=(ContainerInfo("app", 100 * Mi),),
        volumes=(EmptyDirVolume("scratch", size_limit=10 * Mi),),
    )
    figures = {
        "rootfs": 80 * Mi,
        "logs": 80 * Mi,
        "local_volumes": 20 * Mi,
        "volumes": {"scratch": 20 * Mi},
        "containers": {"app": ContainerUsage(80 * Mi, 80 * Mi)},
    }
    assert [e.signal for e in decide([everything], {"all": usage("all", **figures)}).evictions] == [
        EMPTY_DIR
    ]
    no_volume = pod(
        "all",
        limits={"ephemeral-storage": 100 * Mi},
        containers=(ContainerInfo("app", 100 * Mi),),
    )
    only = decide([no_volume], {"all": usage("all", **figures)}).evictions
    assert [e.signal for e in only] == [POD]


def test_every_violator_goes_in_the_same_cycle_in_pod_order() -> None:
    pods = [
        pod("v1", volumes=(SCRATCH_256,)),
        pod("fine", limits={"ephemeral-storage": Gi}),
        pod("p1", limits={"ephemeral-storage": Mi}),
        pod("c1", containers=(ContainerInfo("app", Mi),)),
    ]
    usages = {
        "v1": usage("v1", volumes={"scratch": Gi}),
        "fine": usage("fine", logs=Mi),
        "p1": usage("p1", logs=2 * Mi),
        "c1": usage("c1", containers={"app": ContainerUsage(logs=2 * Mi)}),
    }
    decision = decide(pods, usages)
    assert [(e.pod.name, e.signal) for e in decision.evictions] == [
        ("v1", EMPTY_DIR),
        ("p1", POD),
        ("c1", CONTAINER),
    ]
    assert decision.candidates == decision.evictions
    # the reclaim estimate is what the pod holds on disk (its summary total)
    assert [e.reclaim_estimate for e in decision.evictions] == [0, 2 * Mi, 0]


@pytest.mark.parametrize(
    ("layout", "counts_layer"),
    [
        (FsLayout.SINGLE, True),
        (FsLayout.DEDICATED_IMAGEFS, False),
        (FsLayout.SPLIT, False),  # the kubelet's flag is "images elsewhere": set here too
    ],
)
def test_the_writable_layer_counts_for_a_container_only_without_a_dedicated_imagefs(
    layout: FsLayout, counts_layer: bool
) -> None:
    app = pod("a", containers=(ContainerInfo("app", 100 * Mi),))
    layer_heavy = {
        "a": usage("a", containers={"app": ContainerUsage(rootfs=90 * Mi, logs=20 * Mi)})
    }
    evicted = decide([app], layer_heavy, layout=layout).evictions
    assert bool(evicted) is counts_layer
    logs_heavy = {"a": usage("a", containers={"app": ContainerUsage(rootfs=0, logs=101 * Mi)})}
    assert [e.signal for e in decide([app], logs_heavy, layout=layout).evictions] == [CONTAINER]


@pytest.mark.parametrize("layout", list(FsLayout))
def test_the_pod_total_counts_writable_layers_on_every_layout(layout: FsLayout) -> None:
    limited = pod("a", limits={"ephemeral-storage": 100 * Mi})
    figures = {"a": usage("a", rootfs=101 * Mi, logs=0, local_volumes=0)}
    assert [e.signal for e in decide([limited], figures, layout=layout).evictions] == [POD]


@pytest.mark.parametrize(
    "exempt",
    [
        {"critical": True},
        {"static": True},
        {"mirror": True},
        {"priority": 2_000_000_000},
    ],
    ids=["critical", "static", "mirror", "system-cluster-critical priority"],
)
def test_critical_and_static_pods_are_exempt(exempt: dict[str, Any]) -> None:
    over = pod("x", limits={"ephemeral-storage": Mi}, **exempt)
    assert decide([over], {"x": usage("x", logs=Gi)}).evictions == ()


def test_local_storage_capacity_isolation_false_turns_the_checks_off() -> None:
    over = pod("x", limits={"ephemeral-storage": Mi})
    figures = {"x": usage("x", logs=Gi)}
    assert decide([over], figures, local_storage_capacity_isolation=False).evictions == ()
    assert policy().local_storage_capacity_isolation is True


# --- no threshold eviction in that cycle -------------------------------------------------


def test_a_local_storage_eviction_replaces_the_threshold_eviction_of_its_cycle() -> None:
    over = pod("over", limits={"ephemeral-storage": Mi})
    hog = pod("hog")
    usages = {"over": usage("over", logs=2 * Mi), "hog": usage("hog", logs=50 * Gi)}
    pressed = {Signal.NODEFS_AVAILABLE: (Gi, 100 * Gi)}
    decision = decide([over, hog], usages, signals=pressed, eviction_hard="nodefs.available<10%")
    assert [(e.pod.name, e.signal) for e in decision.evictions] == [("over", POD)]
    # the threshold's other candidates follow, for the evictor should it refuse "over"
    assert [(e.pod.name, e.signal) for e in decision.candidates] == [
        ("over", POD),
        ("hog", Signal.NODEFS_AVAILABLE),
    ]
    # thresholds, pressure and conditions are reported as usual
    assert Signal.NODEFS_AVAILABLE in [m.signal for m in decision.thresholds_met]
    assert decision.pressure[Pressure.DISK]
    assert any(c.status for c in decision.conditions)
    record = replay.decision_record(decision)
    assert record["evictions"][0]["signal"] == "ephemeralpodfs.limit"
    assert record["thresholdsMet"][0]["signal"] == "nodefs.available"
    # without the violator, the threshold evicts the hog
    alone = decide([hog], usages, signals=pressed, eviction_hard="nodefs.available<10%")
    assert [(e.pod.name, e.signal) for e in alone.evictions] == [("hog", Signal.NODEFS_AVAILABLE)]


def test_the_threshold_state_advances_in_a_local_storage_cycle() -> None:
    """The kubelet records thresholds met before it checks local storage: the next cycle
    acts on the threshold at once (no grace restart, no stale-sample refusal)."""
    resolved = policy(eviction_hard="nodefs.available<10%")
    over = pod("over", limits={"ephemeral-storage": Mi})
    hog = pod("hog")
    usages = {"over": usage("over", logs=2 * Mi), "hog": usage("hog", logs=50 * Gi)}
    signals = {Signal.NODEFS_AVAILABLE: (Gi, 100 * Gi)}
    first, state = engine.evaluate(
        resolved, engine.EngineState(), observations(1, signals, pods=usages), [over, hog], 1
    )
    assert [e.signal for e in first.evictions] == [POD]
    second, _ = engine.evaluate(
        resolved, state, observations(2, signals, pods={"hog": usages["hog"]}), [hog], 2
    )
    assert [(e.pod.name, e.signal) for e in second.evictions] == [("hog", Signal.NODEFS_AVAILABLE)]


# --- the pod-level limit as the kubelet computes it (from the API object) -----------------


def _container(name: str, limit: str | None) -> dict[str, Any]:
    resources = {"limits": {"ephemeral-storage": limit}} if limit else {}
    return {"name": name, "resources": resources}


POD_LIMIT_CASES = [
    ("one container", {"containers": [_container("a", "1Gi")]}, Gi),
    (
        "containers add up; one without a limit adds nothing",
        {"containers": [_container("a", "1Gi"), _container("b", "512Mi"), _container("c", None)]},
        Gi + 512 * Mi,
    ),
    (
        "init containers by maximum, when one needs more than the app containers",
        {
            "containers": [_container("a", "1Gi")],
            "initContainers": [_container("i1", "3Gi"), _container("i2", "2Gi")],
        },
        3 * Gi,
    ),
    (
        "init containers below the app sum do not count",
        {"containers": [_container("a", "2Gi")], "initContainers": [_container("i", "1Gi")]},
        2 * Gi,
    ),
    (
        "a sidecar adds to the app sum and to every later init container's need",
        {
            "containers": [_container("a", "1Gi")],
            "initContainers": [
                {**_container("s", "512Mi"), "restartPolicy": "Always"},
                _container("i", "3Gi"),
            ],
        },
        3 * Gi + 512 * Mi,
    ),
    (
        "a sidecar below an init container's need still adds to the app sum",
        {
            "containers": [_container("a", "2Gi")],
            "initContainers": [
                _container("i", "2Gi"),
                {**_container("s", "1Gi"), "restartPolicy": "Always"},
            ],
        },
        3 * Gi,
    ),
    (
        "overhead adds to a set limit",
        {"containers": [_container("a", "1Gi")], "overhead": {"ephemeral-storage": "100Mi"}},
        Gi + 100 * Mi,
    ),
    (
        "overhead alone sets no limit",
        {"containers": [_container("a", None)], "overhead": {"ephemeral-storage": "100Mi"}},
        None,
    ),
    ("no container limits: no pod limit", {"containers": [_container("a", None)]}, None),
    (
        "a zero limit is set (PodLimits keeps it): any usage is over it",
        {"containers": [_container("a", "0"), _container("b", None)]},
        0,
    ),
    (
        "a zero init container limit is set too",
        {"containers": [_container("a", None)], "initContainers": [_container("i", "0")]},
        0,
    ),
]


@pytest.mark.parametrize(
    ("spec", "limit"),
    [case[1:] for case in POD_LIMIT_CASES],
    ids=[case[0] for case in POD_LIMIT_CASES],
)
def test_the_pod_level_limit_from_the_api_object(spec: dict[str, Any], limit: int | None) -> None:
    obj = {"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": spec}
    info = kube_pods.pod_info(obj)
    assert info.limits.get("ephemeral-storage") == limit
    # the engine enforces exactly that limit
    if limit is not None:
        at, over = (usage("u", logs=limit), usage("u", logs=limit + 1))
        assert decide([info], {"u": at}).evictions == ()
        assert [e.signal for e in decide([info], {"u": over}).evictions] == [POD]


def test_pod_info_carries_container_limits_and_empty_dirs_from_the_api_object() -> None:
    obj = {
        "metadata": {"name": "p", "namespace": "d", "uid": "u"},
        "spec": {
            "containers": [_container("app", "500M"), _container("side", None)],
            "initContainers": [_container("init", "9Gi")],
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "config", "configMap": {"name": "c"}},
            ],
        },
    }
    info = kube_pods.pod_info(obj)
    assert info.containers == (ContainerInfo("app", 500_000_000, QuantityFormat.DECIMAL_SI),)
    assert info.volumes == (
        EmptyDirVolume("scratch", "", Gi),
        EmptyDirVolume("shm", "Memory", None),
    )


# --- properties -------------------------------------------------------------------------

_figure = st.integers(min_value=0, max_value=4 * Gi)
_limit = st.one_of(st.none(), st.integers(min_value=1, max_value=4 * Gi))


@st.composite
def _pods(draw: st.DrawFn) -> tuple[PodInfo, Any]:
    name = draw(st.sampled_from(["a", "b", "c", "d"]))
    container_limits = draw(st.lists(_limit, max_size=3))
    volume_limits = draw(st.lists(_limit, max_size=2))
    pod_limit = draw(_limit)
    info = pod(
        name,
        limits={} if pod_limit is None else {"ephemeral-storage": pod_limit},
        containers=tuple(ContainerInfo(f"c{i}", lim) for i, lim in enumerate(container_limits)),
        volumes=tuple(
            EmptyDirVolume(f"v{i}", draw(st.sampled_from(["", "Memory"])), lim)
            for i, lim in enumerate(volume_limits)
        ),
        critical=draw(st.booleans()),
    )
    figures = usage(
        name,
        rootfs=draw(_figure),
        logs=draw(_figure),
        local_volumes=draw(_figure),
        containers={
            f"c{i}": ContainerUsage(draw(_figure), draw(_figure))
            for i in range(len(container_limits))
        },
        volumes={f"v{i}": draw(_figure) for i in range(len(volume_limits))},
    )
    return info, figures


@given(
    st.lists(_pods(), max_size=4, unique_by=lambda p: p[0].name),
    st.sampled_from(list(FsLayout)),
)
def test_evicted_pods_are_exactly_the_evictable_violators(
    drawn: list[tuple[PodInfo, Any]], layout: FsLayout
) -> None:
    pods = [info for info, _ in drawn]
    usages = {info.uid: figures for info, figures in drawn}
    evictions = local_storage.limit_evictions(pods, usages, layout)
    dedicated = layout is not FsLayout.SINGLE

    def violates(info: PodInfo) -> bool:
        u = usages[info.uid]
        empty_dir = any(v.size_limit and u.volumes[v.name] > v.size_limit for v in info.volumes)
        limit = info.limits.get("ephemeral-storage")
        total = (u.rootfs or 0) + (u.logs or 0) + (u.local_volumes or 0)
        over_pod = limit is not None and total > limit
        container = any(
            c.ephemeral_storage_limit
            and (u.containers[c.name].logs or 0)
            + (0 if dedicated else (u.containers[c.name].rootfs or 0))
            > c.ephemeral_storage_limit
            for c in info.containers
        )
        return empty_dir or over_pod or container

    expected = [info.name for info in pods if not info.critical and violates(info)]
    assert [e.pod.name for e in evictions] == expected
    assert all(e.grace_period_seconds == 1 for e in evictions)


# --- trace format ------------------------------------------------------------------------


def _line(pod_record: dict[str, Any], layout: str = "single") -> str:
    return json.dumps({"time": 0, "fsLayout": layout, "pods": [pod_record]})


def test_the_trace_takes_containers_and_volumes_with_their_defaults() -> None:
    sample = trace.parse_trace_line(
        _line(
            {
                "name": "web",
                "containers": [
                    {
                        "name": "app",
                        "limits": {"ephemeral-storage": 1073741824},
                        "usage": {"rootfs": 100, "logs": 20},
                    },
                    {
                        "name": "side",
                        "limits": {"ephemeral-storage": "512Mi"},
                        "usage": {"logs": 5},
                    },
                ],
                "volumes": [
                    {
                        "name": "scratch",
                        "emptyDir": {"medium": "", "sizeLimit": 536870912},
                        "usage": 300,
                    },
                    {
                        "name": "shm",
                        "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"},
                        "usage": 7,
                    },
                ],
            }
        ),
        1,
    )
    (info,) = sample.pods
    assert info.containers == (ContainerInfo("app", Gi), ContainerInfo("side", 512 * Mi))
    assert info.volumes == (
        EmptyDirVolume("scratch", "", 512 * Mi),
        EmptyDirVolume("shm", "Memory", 64 * Mi),
    )
    assert info.limits["ephemeral-storage"] == Gi + 512 * Mi  # the containers' sum
    used = sample.observations.pods[info.uid]
    assert (used.rootfs, used.logs, used.local_volumes) == (100, 25, 300)  # shm is memory
    assert used.containers == {
        "app": ContainerUsage(100, 20),
        "side": ContainerUsage(None, 5),
    }
    assert used.volumes == {"scratch": 300, "shm": 7}
    assert used.memory is None  # nothing given, no stats


def test_the_pods_own_figures_win_over_the_defaults() -> None:
    sample = trace.parse_trace_line(
        _line(
            {
                "name": "web",
                "limits": {"ephemeral-storage": "3Gi"},
                "overhead": {"ephemeral-storage": "1Gi"},
                "usage": {"rootfs": 1, "logs": 2, "localVolumes": 3},
                "containers": [
                    {"name": "app", "limits": {"ephemeral-storage": "1Gi"}, "usage": {"rootfs": 9}}
                ],
                "volumes": [{"name": "scratch", "emptyDir": {}, "usage": 99}],
            }
        ),
        1,
    )
    (info,) = sample.pods
    assert info.limits["ephemeral-storage"] == 3 * Gi  # given: the producer computed it
    used = sample.observations.pods[info.uid]
    assert (used.rootfs, used.logs, used.local_volumes) == (1, 2, 3)


def test_overhead_adds_to_the_containers_sum_as_the_kubelet_counts_it() -> None:
    sample = trace.parse_trace_line(
        _line(
            {
                "name": "web",
                "overhead": {"ephemeral-storage": "1Gi"},
                "containers": [{"name": "app", "limits": {"ephemeral-storage": "1Gi"}}],
            }
        ),
        1,
    )
    assert sample.pods[0].limits["ephemeral-storage"] == 2 * Gi
    assert sample.observations.pods == {}  # no usage anywhere: no stats


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"name": "w", "containers": [{"name": "a", "limit": {}}]}, "containers.0.limit"),
        ({"name": "w", "volumes": [{"name": "v", "emptyDir": {"medium": "Disk"}}]}, "medium"),
        ({"name": "w", "volumes": [{"name": "v", "usage": -1}]}, "usage"),
        (
            {"name": "w", "containers": [{"name": "a"}, {"name": "a"}]},
            "container 'a' listed twice",
        ),
        ({"name": "w", "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Q"}}]}, "1Q"),
    ],
)
def test_the_new_fields_are_as_strict_as_the_rest(record: dict[str, Any], problem: str) -> None:
    with pytest.raises(trace.TraceError, match=problem):
        trace.parse_trace_line(_line(record), 3)


@pytest.mark.parametrize(
    ("medium", "on_disk"),
    [("", True), ("Memory", False), ("HugePages", False), ("HugePages-2Mi", False)],
)
def test_only_disk_backed_empty_dirs_default_the_local_volumes(medium: str, on_disk: bool) -> None:
    """The kubelet's pod total counts an emptyDir only with the default medium
    (``IsLocalEphemeralVolume``); hugetlbfs is memory like tmpfs, and the scanner leaves
    both out (another device), so the trace's default must too."""
    sample = trace.parse_trace_line(
        _line(
            {
                "name": "w",
                "containers": [{"name": "a", "limits": {"ephemeral-storage": 4096}}],
                "volumes": [{"name": "v", "emptyDir": {"medium": medium}, "usage": 8192}],
            }
        ),
        1,
    )
    used = sample.observations.pods[sample.pods[0].uid]
    assert used.local_volumes == (8192 if on_disk else None)
    evicted = local_storage.limit_evictions(sample.pods, sample.observations.pods, FsLayout.SINGLE)
    assert [e.signal for e in evicted] == ([POD] if on_disk else [])


def test_an_old_trace_line_still_loads_without_container_or_volume_detail() -> None:
    sample = trace.parse_trace_line(
        _line({"name": "old", "usage": {"rootfs": 5, "logs": 6, "localVolumes": 7}}), 1
    )
    (info,) = sample.pods
    assert (info.containers, info.volumes) == ((), ())
    used = sample.observations.pods[info.uid]
    assert (used.rootfs, used.logs, used.local_volumes, dict(used.containers)) == (5, 6, 7, {})


# --- the shipped example, against an oracle computed from its lines ----------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _oracle_violation(record: dict[str, Any]) -> str | None:
    """``localStorageEviction`` on one trace pod record, written out here (not the engine)."""
    if record.get("priority", 0) >= 2_000_000_000:
        return None
    q = trace._amount  # the trace's own quantity reading, shared on purpose
    for volume in record.get("volumes", []):
        limit = q(volume.get("emptyDir", {}).get("sizeLimit", 0) or 0)
        if limit and volume.get("usage", 0) > limit:
            return "emptydirfs.limit"
    containers = record.get("containers", [])
    limits = [q(c["limits"]["ephemeral-storage"]) for c in containers if c.get("limits")]
    used = sum(c["usage"].get("rootfs", 0) + c["usage"].get("logs", 0) for c in containers)
    used += sum(
        v.get("usage", 0)
        for v in record.get("volumes", [])
        if v["emptyDir"].get("medium", "") == ""  # disk-backed only
    )
    if limits and used > sum(limits):
        return "ephemeralpodfs.limit"
    for c in containers:
        if c.get("limits") and sum(c["usage"].values()) > q(c["limits"]["ephemeral-storage"]):
            return "ephemeralcontainerfs.limit"
    return None


@pytest.mark.parametrize("isolation", [True, False])
def test_the_local_storage_example(isolation: bool) -> None:
    config = load_config(
        EXAMPLES / "local-storage.yaml",
        environ={},
        overrides={"local_storage_capacity_isolation": isolation},
    )
    text = (EXAMPLES / "local-storage.jsonl").read_text().splitlines()
    samples = [trace.parse_trace_line(t, n) for n, t in enumerate(text, start=1)]
    decisions = [c.decision for c in replay.replay(EvictionPolicy.from_settings(config), samples)]
    lines = [json.loads(t) for t in text]
    limit_evictions_seen = threshold_evictions_seen = 0
    for line, decision in zip(lines, decisions, strict=True):
        nodefs = line["signals"]["nodefs.available"]
        below = nodefs["available"] < nodefs["capacity"] // 10
        violators = [
            (f"{p.get('namespace', 'default')}/{p['name']}", v)
            for p in line["pods"]
            if isolation and (v := _oracle_violation(p)) is not None
        ]
        got = [(e.pod.key, str(e.signal)) for e in decision.evictions]
        if below:
            assert decision.pressure[Pressure.DISK]
        if violators:
            assert got == violators
            assert all(e.grace_period_seconds == 1 for e in decision.evictions)
            limit_evictions_seen += len(got)
        elif below:
            assert [signal for _, signal in got] == ["nodefs.available"]
            threshold_evictions_seen += 1
        else:
            assert got == []
    assert limit_evictions_seen == (3 if isolation else 0)
    # with the checks on, the threshold waits one cycle for the renderer's eviction
    assert threshold_evictions_seen == (1 if isolation else 2)


# --- limits print as the kubelet's Quantity.String() prints them ---------------------------


def _init_pod(containers: list[dict[str, Any]], init: list[dict[str, Any]]) -> PodInfo:
    spec = {"containers": containers, "initContainers": init}
    return kube_pods.pod_info(
        {"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": spec}
    )


def _sidecar(name: str, limit: str) -> dict[str, Any]:
    return {**_container(name, limit), "restartPolicy": "Always"}


@pytest.mark.parametrize(
    ("info", "printed"),
    [
        # PodLimits' maximum copies the larger quantity, format and all
        (_init_pod([_container("a", "1G")], [_container("i", "2Gi")]), "2Gi"),
        (_init_pod([_container("a", "1Gi")], [_container("i", "3G")]), "3G"),
        (_init_pod([_container("a", "2Gi")], [_container("i", "1G")]), "2Gi"),
        # an init container's need adds the sidecars before it to its own quantity
        (
            _init_pod([_container("a", "1Gi")], [_sidecar("s", "1Gi"), _container("i", "4Gi")]),
            "5Gi",
        ),
        (_init_pod([_container("a", "1Gi")], [_sidecar("s", "1G"), _container("i", "3G")]), "4G"),
        # a sidecar adds to the app sum, whose first addend keeps its format
        (_init_pod([_container("a", "1G")], [_sidecar("s", "1Gi")]), "2073741824"),
        (_init_pod([_container("a", None)], [_sidecar("s", "500M")]), "500M"),
    ],
    ids=[
        "init-binary",
        "init-decimal",
        "app-wins",
        "init-plus-sidecar",
        "sum-of-init",
        "sidecar-sum",
        "sidecar-only",
    ],
)
def test_a_dominating_init_container_lends_its_format(info: PodInfo, printed: str) -> None:
    limit = info.limits["ephemeral-storage"]
    (eviction,) = decide([info], {"u": usage("u", logs=limit + 1)}).evictions
    assert eviction.message == (
        f"Pod ephemeral local storage usage exceeds the total limit of containers {printed}. "
    )


def _api_pod(
    containers: list[dict[str, Any]], volumes: list[dict[str, Any]] | None = None
) -> PodInfo:
    spec: dict[str, Any] = {"containers": containers, "volumes": volumes or []}
    return kube_pods.pod_info(
        {"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": spec}
    )


@pytest.mark.parametrize(
    ("info", "figures", "message"),
    [
        (
            _api_pod([_container("app", "1G")]),
            {"logs": 10**9 + 1},
            "Pod ephemeral local storage usage exceeds the total limit of containers 1G. ",
        ),
        (
            _api_pod([_container("app", "1G"), _container("side", "500M")]),
            {"logs": 2 * 10**9},
            "Pod ephemeral local storage usage exceeds the total limit of containers 1500M. ",
        ),
        (
            _api_pod([_container("app", "1Gi"), _container("side", "512Mi")]),
            {"logs": 2 * Gi},
            "Pod ephemeral local storage usage exceeds the total limit of containers 1536Mi. ",
        ),
        (
            _api_pod(
                [_container("app", "1G"), _container("side", "4G")],
            ),
            {"containers": {"app": ContainerUsage(rootfs=0, logs=10**9 + 1)}},
            'Container app exceeded its local ephemeral storage limit "1G". ',
        ),
        (
            _api_pod(
                [_container("app", None)],
                [{"name": "scratch", "emptyDir": {"sizeLimit": "500M"}}],
            ),
            {"volumes": {"scratch": 5 * 10**8 + 1}},
            'Usage of EmptyDir volume "scratch" exceeds the limit "500M". ',
        ),
        (
            _api_pod(
                [_container("app", None)],
                [{"name": "scratch", "emptyDir": {"sizeLimit": "2Gi"}}],
            ),
            {"volumes": {"scratch": 2 * Gi + 1}},
            'Usage of EmptyDir volume "scratch" exceeds the limit "2Gi". ',
        ),
        (
            _api_pod([_container("app", "0")]),
            {"logs": 1},
            "Pod ephemeral local storage usage exceeds the total limit of containers 0. ",
        ),
    ],
    ids=[
        "decimal",
        "decimal-sum",
        "binary-sum",
        "container-decimal",
        "sizeLimit-decimal",
        "sizeLimit-binary",
        "zero",
    ],
)
def test_limits_print_in_the_format_they_were_written(
    info: PodInfo, figures: dict[str, Any], message: str
) -> None:
    assert [e.message for e in decide([info], {"u": usage("u", **figures)}).evictions] == [message]
