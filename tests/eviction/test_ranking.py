"""Ranking: each comparator of the kubelet's chains (``buildSignalToRankFunc``) and each
tie-break."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from nodeagent.eviction import ranking
from nodeagent.model import FsLayout, PodInfo, PodUID, PodUsage, Signal

from .builders import Gi, Mi, pod, usage


def order(
    signal: Signal,
    pods: Sequence[PodInfo],
    use: Mapping[str, PodUsage],
    layout: FsLayout = FsLayout.SINGLE,
) -> list[str]:
    usage_by_uid = {PodUID(name): u for name, u in use.items()}
    return [p.name for p, _ in ranking.rank(signal, layout, pods, usage_by_uid)]


MEMORY_CASES = [
    pytest.param(
        [
            pod("within", priority=0, requests={"memory": Gi}),
            pod("over", priority=100, requests={"memory": Mi}),
        ],
        {"within": usage("within", memory=500 * Mi), "over": usage("over", memory=2 * Mi)},
        ["over", "within"],
        id="exceeding-request-beats-priority",
    ),
    pytest.param(
        [pod("high", priority=10), pod("low", priority=0)],
        {"high": usage("high", memory=4 * Gi), "low": usage("low", memory=Mi)},
        ["low", "high"],
        id="then-lower-priority-beats-usage",
    ),
    pytest.param(
        [pod("small", requests={"memory": Gi}), pod("big", requests={"memory": 100 * Mi})],
        {"small": usage("small", memory=Gi + 10 * Mi), "big": usage("big", memory=600 * Mi)},
        ["big", "small"],
        id="then-larger-usage-over-request",
    ),
    pytest.param(
        [
            pod("within-more", requests={"memory": 2 * Gi}),
            pod("within-less", requests={"memory": 2 * Gi}),
        ],
        {
            "within-more": usage("within-more", memory=Gi),
            "within-less": usage("within-less", memory=1500 * Mi),
        },
        ["within-less", "within-more"],
        id="within-request-closest-to-request-first",
    ),
    pytest.param(
        [pod("exceeds", priority=0), pod("unknown", priority=1000, requests={"memory": 8 * Gi})],
        {"exceeds": usage("exceeds", memory=Gi)},
        ["unknown", "exceeds"],
        id="no-stats-first-over-everything",
    ),
    pytest.param(
        [pod("unknown-high", priority=5), pod("unknown-low", priority=1)],
        {"unknown-high": usage("unknown-high", rootfs=1)},  # no memory figure: no stats
        ["unknown-low", "unknown-high"],
        id="no-stats-among-themselves-by-priority",
    ),
    pytest.param(
        [pod("equal", requests={"memory": Gi}), pod("best-effort")],
        {"equal": usage("equal", memory=Gi), "best-effort": usage("best-effort", memory=1)},
        ["best-effort", "equal"],
        id="best-effort-exceeds-with-one-byte-equal-does-not",
    ),
    pytest.param(
        [pod("a"), pod("b"), pod("c")],
        {name: usage(name, memory=Mi) for name in "abc"},
        ["a", "b", "c"],
        id="full-ties-keep-input-order",
    ),
    pytest.param(
        [pod("guaranteed", requests={"memory": Gi}, qos="Guaranteed")],
        {"guaranteed": usage("guaranteed", memory=Mi)},
        ["guaranteed"],
        id="guaranteed-is-not-exempt",
    ),
]


@pytest.mark.parametrize(("pods", "use", "expected"), MEMORY_CASES)
@pytest.mark.parametrize(
    "signal",
    [
        Signal.MEMORY_AVAILABLE,
        Signal.ALLOCATABLE_MEMORY_AVAILABLE,
        Signal.MEMORY_PRESSURE_FULL_AVG10,
    ],
)
def test_memory_chain(
    signal: Signal, pods: list[PodInfo], use: dict[str, PodUsage], expected: list[str]
) -> None:
    assert order(signal, pods, use) == expected


FIGURES = {"rootfs": 10, "logs": 20, "local_volumes": 40}
INODES = {"rootfs_inodes": 1, "logs_inodes": 2, "local_volumes_inodes": 4}


@pytest.mark.parametrize(
    ("layout", "signal", "bytes_used", "inodes_used"),
    [
        pytest.param(FsLayout.SINGLE, Signal.NODEFS_AVAILABLE, 70, 7, id="single-nodefs-all"),
        pytest.param(FsLayout.SINGLE, Signal.IMAGEFS_AVAILABLE, 70, 7, id="single-imagefs-all"),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            Signal.NODEFS_AVAILABLE,
            60,
            6,
            id="dedicated-nodefs-logs-volumes",
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            Signal.IMAGEFS_AVAILABLE,
            10,
            1,
            id="dedicated-imagefs-layers",
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            Signal.CONTAINERFS_AVAILABLE,
            10,
            1,
            id="dedicated-containerfs-layers",
        ),
        pytest.param(FsLayout.SPLIT, Signal.NODEFS_AVAILABLE, 70, 7, id="split-nodefs-all"),
        pytest.param(
            FsLayout.SPLIT, Signal.CONTAINERFS_AVAILABLE, 70, 7, id="split-containerfs-all"
        ),
        pytest.param(
            FsLayout.SPLIT, Signal.IMAGEFS_AVAILABLE, 0, 0, id="split-imagefs-images-only"
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS, Signal.IO_PRESSURE_SOME_AVG10, 60, 6, id="io-psi-as-nodefs"
        ),
    ],
)
def test_what_counts_as_disk_usage_per_layout(
    layout: FsLayout, signal: Signal, bytes_used: int, inodes_used: int
) -> None:
    pods = [pod("p")]
    use = {PodUID("p"): usage("p", **FIGURES, **INODES)}
    ((_, used),) = ranking.rank(signal, layout, pods, use)
    assert used == bytes_used
    inode_signal = Signal(str(signal).replace("available", "inodesFree"))
    if inode_signal is not signal:
        ((_, inodes),) = ranking.rank(inode_signal, layout, pods, use)
        assert inodes == inodes_used


def test_disk_exceeds_compares_with_the_ephemeral_storage_request() -> None:
    pods = [pod("within", requests={"ephemeral-storage": 5 * Gi}), pod("over", priority=100)]
    use = {"within": usage("within", logs=2 * Gi), "over": usage("over", logs=Gi)}
    assert order(Signal.NODEFS_AVAILABLE, pods, use) == ["over", "within"]


def test_inodes_exceed_any_use_but_subtract_the_byte_request() -> None:
    # The kubelet's quirk: no inode requests, so every pod using inodes "exceeds"; the
    # last comparator subtracts the ephemeral-storage request in bytes all the same.
    pods = [pod("more-inodes", requests={"ephemeral-storage": 1000}), pod("fewer-inodes")]
    use = {
        "more-inodes": usage("more-inodes", rootfs_inodes=150),
        "fewer-inodes": usage("fewer-inodes", rootfs_inodes=100),
    }
    assert order(Signal.NODEFS_INODES_FREE, pods, use) == ["fewer-inodes", "more-inodes"]


def test_split_imagefs_degenerates_to_priority_then_smallest_request() -> None:
    pods = [
        pod("big-request", requests={"ephemeral-storage": 10 * Gi}),
        pod("small-request", requests={"ephemeral-storage": Gi}),
        pod("low-priority", priority=-5, requests={"ephemeral-storage": 50 * Gi}),
    ]
    use = {
        name: usage(name, rootfs=Gi, logs=Gi)
        for name in ("big-request", "small-request", "low-priority")
    }
    assert order(Signal.IMAGEFS_AVAILABLE, pods, use, FsLayout.SPLIT) == [
        "low-priority",
        "small-request",
        "big-request",
    ]


@pytest.mark.parametrize(
    ("use", "expected"),
    [
        pytest.param({"a": usage("a", logs=5)}, 5, id="missing-parts-count-zero"),
        pytest.param({"a": usage("a", memory=5)}, None, id="all-parts-missing-is-no-stats"),
        pytest.param({}, None, id="no-record-is-no-stats"),
    ],
)
def test_partial_disk_stats(use: dict[str, PodUsage], expected: int | None) -> None:
    usage_by_uid = {PodUID(name): u for name, u in use.items()}
    ((_, used),) = ranking.rank(Signal.NODEFS_AVAILABLE, FsLayout.SINGLE, [pod("a")], usage_by_uid)
    assert used == expected


@pytest.mark.parametrize(
    ("pods", "use", "expected"),
    [
        pytest.param(
            [pod("many", priority=10), pod("few", priority=0)],
            {"many": usage("many", processes=9000), "few": usage("few", processes=3)},
            ["few", "many"],
            id="priority-first",
        ),
        pytest.param(
            [pod("known"), pod("unknown")],
            {"known": usage("known", processes=9000)},
            ["unknown", "known"],
            id="then-no-stats",
        ),
        pytest.param(
            [pod("few"), pod("many")],
            {"few": usage("few", processes=3), "many": usage("many", processes=9000)},
            ["many", "few"],
            id="then-more-processes",
        ),
        pytest.param(
            [pod("unknown", priority=10), pod("known", priority=0)],
            {"known": usage("known", processes=1)},
            ["known", "unknown"],
            id="priority-beats-no-stats",
        ),
    ],
)
def test_pid_chain(pods: list[PodInfo], use: dict[str, PodUsage], expected: list[str]) -> None:
    assert order(Signal.PID_AVAILABLE, pods, use) == expected


def test_protected_pods_are_not_ranked() -> None:
    pods = [
        pod("critical", critical=True),
        pod("cluster-critical", priority=ranking.CRITICAL_PRIORITY),
        pod("static", static=True),
        pod("mirror", mirror=True),
        pod("daemonset", daemonset=True),
        pod("almost", priority=ranking.CRITICAL_PRIORITY - 1),
    ]
    assert order(Signal.MEMORY_AVAILABLE, pods, {}) == ["daemonset", "almost"]
