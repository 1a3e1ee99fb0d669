"""NodeReclaimer and the reclaim-then-recheck step, against the in-memory runtime."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from nodeagent.base.clock import FakeClock
from nodeagent.cri.client import Container, ContainerState, Image
from nodeagent.eviction import engine
from nodeagent.eviction.layout import RECLAIM_CONTAINERS, RECLAIM_IMAGES
from nodeagent.model import Decision, FsLayout, NodeObservations, Signal
from nodeagent.reclaim import plan
from nodeagent.reclaim.cycle import reclaim_before_evicting
from nodeagent.reclaim.reclaimer import NodeReclaimer, reclaimed_bytes
from tests.doubles.cri import FakeRuntime
from tests.eviction.builders import Gi, Mi, observations, pod, policy, usage
from tests.reclaim.test_plan import container, image, sandbox


def runtime() -> FakeRuntime:
    """Pod uid-1 ran ``app`` three times (all exited) on image a; b and c are unused
    (b older), p is pinned by the runtime, w is used by a running container."""
    return FakeRuntime(
        sandboxes=[sandbox("s1", "uid-1")],
        containers=[
            container("old", created=1, image="sha256:a"),
            container("mid", created=2, image="sha256:a"),
            container("new", created=3, image="sha256:a"),
            container("web", name="web", state=ContainerState.RUNNING, image="sha256:w"),
        ],
        images=[
            image("sha256:a", 100),
            image("sha256:b", 200),
            image("sha256:c", 300),
            image("sha256:p", 400, pinned=True),
            image("sha256:w", 500),
        ],
    )


def reclaimer(fake: FakeRuntime, *, dry_run: bool = False) -> NodeReclaimer:
    clock = FakeClock(start=10.0)
    made = NodeReclaimer(fake, clock=clock, dry_run=dry_run, interval=10.0)
    fake.images.sort(key=lambda i: i.id)
    made.inventory(1.0)  # b and everything else first seen at 1
    fake.images.append(image("sha256:c2", 50))  # then c2, newer
    made.inventory(5.0)
    return made


def test_dead_containers_then_unused_images_oldest_first() -> None:
    fake = runtime()
    report = reclaimer(fake).reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None)
    assert fake.removed("remove_container") == ["old", "mid"]
    assert fake.removed("remove_image") == ["sha256:b", "sha256:c", "sha256:c2"]
    assert [c.id for c in fake.containers] == ["new", "web"]
    assert {i.id for i in fake.images} == {"sha256:a", "sha256:p", "sha256:w"}
    assert (len(report.containers), report.image_bytes, report.errors) == (2, 550, ())
    # Containers first, then the images are listed and planned.
    calls = [name for name, _ in fake.calls if name.startswith("remove")]
    assert calls == ["remove_container"] * 2 + ["remove_image"] * 3


def test_image_need_is_asked_after_the_containers_are_gone() -> None:
    fake = runtime()
    asked_with: list[int] = []

    def need() -> int:
        asked_with.append(len(fake.containers))
        return 250 - sum(size for image, size in sizes.items() if image not in fake.images)

    made = reclaimer(fake)
    sizes = {image: image.size for image in fake.images}
    made.reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=need)
    assert fake.removed("remove_image") == ["sha256:b", "sha256:c"]  # 200 < 250 <= 500
    assert asked_with == [2, 2]  # after the containers, then after the images


def test_an_image_whose_containers_reclaim_removed_is_unused() -> None:
    fake = FakeRuntime(
        sandboxes=[sandbox("s1", "uid-1")],
        containers=[container("x1", created=1, image="sha256:x"), container("y", name="y")],
        images=[image("sha256:x", 10), image("sha256:a", 10)],
    )
    # x1 is the only instance of its name: kept, so its image stays.
    reclaimer(fake).reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None)
    assert fake.removed("remove_image") == ["sha256:c2"]
    fake.containers.insert(0, container("x0", created=0, image="sha256:old"))
    fake.images.append(image("sha256:old", 10))
    reclaimer(fake).reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None)
    assert "x0" in fake.removed("remove_container")
    assert "sha256:old" in fake.removed("remove_image")


@pytest.mark.parametrize(
    ("kinds", "containers", "images"),
    [
        ((RECLAIM_CONTAINERS,), ["old", "mid"], []),
        ((RECLAIM_IMAGES,), [], ["sha256:b", "sha256:c", "sha256:c2"]),
    ],
)
def test_only_the_kinds_asked_for(
    kinds: tuple[str, ...], containers: list[str], images: list[str]
) -> None:
    fake = runtime()
    reclaimer(fake).reclaim(kinds, image_need=lambda: None)
    assert fake.removed("remove_container") == containers
    assert fake.removed("remove_image") == images


def test_dry_run_removes_nothing_and_logs_what_it_would(caplog: pytest.LogCaptureFixture) -> None:
    fake = runtime()
    with caplog.at_level(logging.INFO, logger="nodeagent.reclaim"):
        report = reclaimer(fake, dry_run=True).reclaim(
            (RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None
        )
    assert not fake.removed("remove_container") and not fake.removed("remove_image")
    assert [c.id for c in report.containers] == ["old", "mid"]
    assert [i.id for i in report.images] == ["sha256:b", "sha256:c", "sha256:c2"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("would remove dead container app") == 2
    assert "would remove unused image sha256:b" in messages


def test_failures_are_reported_and_reclaim_goes_on() -> None:
    fake = runtime()
    fake.failures["remove_container"] = "UNAVAILABLE: gone"
    report = reclaimer(fake).reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None)
    assert report.containers == () and len(report.errors) == 2
    assert "CRI remove_container: UNAVAILABLE: gone" in report.errors[0]
    assert len(report.images) == 3
    made = reclaimer(fake)
    fake.failures["list_images"] = "DEADLINE_EXCEEDED"
    report = made.reclaim((RECLAIM_IMAGES,), image_need=lambda: None)
    assert report.images == () and report.errors == ("CRI list_images: DEADLINE_EXCEEDED",)


def test_one_reclaim_per_interval() -> None:
    fake = runtime()
    made = reclaimer(fake)
    assert made.due(10.0)
    made.reclaim((RECLAIM_IMAGES,), image_need=lambda: 0)
    assert not made.due(19.9) and made.due(20.0)


# --- reclaim, re-read, re-check -------------------------------------------------------


class Disk:
    """A filesystem the fake runtime frees space on: 10Gi, ``available`` free."""

    def __init__(self, available: int, layout: FsLayout = FsLayout.SINGLE) -> None:
        self.available = available
        self.layout = layout
        self.time = 1.0

    def free(self, removed: Container | Image) -> None:
        self.available += removed.size if isinstance(removed, Image) else 50 * Mi

    def read(self) -> NodeObservations:
        self.time += 0.1
        return observations(
            self.time,
            {Signal.NODEFS_AVAILABLE: (self.available, 10 * Gi)},
            layout=self.layout,
            pods={name: usage(name, rootfs=400 * Mi) for name in ("p1", "p2", "p3")},
        )


RULES = policy(
    eviction_hard={"nodefs.available": "1Gi"},
    eviction_minimum_reclaim={"nodefs.available": "500Mi"},
)


def decide(disk: Disk) -> tuple[Decision, NodeObservations]:
    before = disk.read()
    decision, _ = engine.evaluate(RULES, engine.EngineState(), before, [pod("p")], before.time)
    return decision, before


@pytest.mark.parametrize(
    ("available", "enough", "images_removed"),
    [
        pytest.param(950 * Mi, True, 2, id="two dead containers + b, c: 950+100+500 >= 1Gi+500Mi"),
        pytest.param(500 * Mi, False, 3, id="everything freed still short of 1Gi+500Mi"),
    ],
)
def test_pod_eviction_is_skipped_only_when_reclaim_ends_the_pressure(
    available: int, enough: bool, images_removed: int
) -> None:
    disk = Disk(available)
    fake = runtime()
    fake.images = [Image(i.id, i.size * Mi, pinned=i.pinned) for i in fake.images]
    fake.on_remove = disk.free
    decision, before = decide(disk)
    assert decision.node_reclaim == (RECLAIM_CONTAINERS, RECLAIM_IMAGES)
    assert decision.evictions  # what the engine would do without reclaim

    after_decision, after = reclaim_before_evicting(
        reclaimer(fake), RULES, decision, before, disk.read
    )
    result = after_decision.node_reclaim_result
    assert result is not None
    assert (result.enough, result.containers_removed, result.images_removed) == (
        enough,
        2,
        images_removed,
    )
    assert result.bytes_reclaimed == disk.available - available
    assert bool(after_decision.evictions) is not enough
    assert plan.image_bytes_needed(RULES, after) == (
        0 if enough else 1 * Gi + 500 * Mi - disk.available
    )


def test_relief_evicts_only_for_the_gap_reclaim_left() -> None:
    """Relief chose three 400Mi pods for a 1024Mi gap; reclaim freed about 600Mi (two
    dead containers, every unused image), so two pods cover the 424Mi left."""
    rules = policy(
        eviction_hard={"nodefs.available": "1Gi"},
        eviction_minimum_reclaim={"nodefs.available": "500Mi"},
        eviction_strategy="relief",
    )
    disk = Disk(500 * Mi)
    fake = runtime()
    fake.images = [Image(i.id, i.size * Mi, pinned=i.pinned) for i in fake.images]
    fake.on_remove = disk.free
    before = disk.read()
    pods = [pod(name) for name in ("p1", "p2", "p3")]
    decision, _ = engine.evaluate(rules, engine.EngineState(), before, pods, before.time)
    assert len(decision.evictions) == 3
    after_decision, _ = reclaim_before_evicting(reclaimer(fake), rules, decision, before, disk.read)
    assert disk.available == 1100 * Mi + 50  # c2 weighs 50 bytes
    assert after_decision.evictions == decision.evictions[:2]
    assert after_decision.candidates == decision.candidates


def test_reclaimed_bytes_counts_each_filesystem_once() -> None:
    before = observations(
        1.0,
        {Signal.NODEFS_AVAILABLE: (1 * Gi, 10 * Gi), Signal.IMAGEFS_AVAILABLE: (2 * Gi, 10 * Gi)},
        layout=FsLayout.SPLIT,
    )
    after = observations(
        2.0,
        {Signal.NODEFS_AVAILABLE: (3 * Gi, 10 * Gi), Signal.IMAGEFS_AVAILABLE: (5 * Gi, 10 * Gi)},
        layout=FsLayout.SPLIT,
    )
    kinds = (RECLAIM_CONTAINERS, RECLAIM_IMAGES)
    assert reclaimed_bytes(before, after, kinds) == 5 * Gi  # containerfs = nodefs here
    assert reclaimed_bytes(before, after, (RECLAIM_IMAGES,)) == 3 * Gi
    single_before = observations(1.0, {Signal.NODEFS_AVAILABLE: (1 * Gi, 10 * Gi)})
    single_after = observations(2.0, {Signal.NODEFS_AVAILABLE: (2 * Gi, 10 * Gi)})
    assert reclaimed_bytes(single_before, single_after, kinds) == 1 * Gi


def test_the_inventory_thread_records_ages_before_any_reclaim() -> None:
    fake = runtime()
    made = NodeReclaimer(fake, clock=FakeClock(start=3.0), dry_run=False)
    made.start(inventory_interval=0.01)
    try:
        deadline = time.monotonic() + 5
        while fake.removed("list_images").count("") < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        made.stop(timeout=2.0)
    assert made.records["sha256:b"] == plan.ImageRecord(first_seen=3.0)
    assert made.records["sha256:a"] == plan.ImageRecord(first_seen=3.0, last_used=3.0)
    fake.failures["list_images"] = "UNAVAILABLE"
    failing = NodeReclaimer(fake, clock=FakeClock(), dry_run=False)
    failing.start(inventory_interval=0.01)  # a failing runtime does not kill the thread
    deadline = time.monotonic() + 5.0
    while fake.removed("list_images").count("") < 4:  # listed again after failing
        assert time.monotonic() < deadline
        time.sleep(0.01)
    failing.stop(timeout=2.0)
    assert failing.records == {}
    assert failing.unreachable == "CRI list_images: UNAVAILABLE"  # the loop exports it


class _GatedRuntime(FakeRuntime):
    """Its first ``list_images`` answers with the images as they were when it was asked,
    but only once :attr:`gate` is set: an inventory slowed between listing and updating."""

    def __init__(self, base: FakeRuntime) -> None:
        super().__init__(base.sandboxes, base.containers, base.images)
        self.gate = threading.Event()
        self.listing = threading.Event()

    def list_images(self) -> list[Image]:
        answer = super().list_images()
        if not self.listing.is_set():
            self.listing.set()
            assert self.gate.wait(5.0)
        return answer


def test_a_slow_inventory_never_undoes_a_newer_one() -> None:
    """The inventory thread and a reclaim list the runtime at once: the one that listed
    earlier must not overwrite what the later one saw (an image pulled in between
    forgotten, an in-use image's last use moved back)."""
    gated = _GatedRuntime(runtime())
    made = NodeReclaimer(gated, clock=FakeClock(), dry_run=False)
    slow = threading.Thread(target=made.inventory, args=(1.0,))
    slow.start()
    assert gated.listing.wait(5.0)
    gated.images.append(image("sha256:n", 10))  # pulled while the slow listing waits
    fast = threading.Thread(target=made.inventory, args=(2.0,))
    fast.start()
    fast.join(0.2)
    gated.gate.set()
    slow.join(5.0)
    fast.join(5.0)
    assert made.records["sha256:n"] == plan.ImageRecord(first_seen=2.0)
    assert made.records["sha256:a"] == plan.ImageRecord(first_seen=1.0, last_used=2.0)


_RECHECK = policy(
    eviction_hard={"nodefs.available": "1Gi"},
    eviction_minimum_reclaim={"nodefs.available": "500Mi"},
    eviction_soft={"memory.available": "2Gi"},
    eviction_soft_grace_period={"memory.available": "1m"},
)


@pytest.mark.parametrize(
    ("nodefs", "memory", "clear"),
    [
        pytest.param(2 * Gi, 8 * Gi, True, id="nodefs past threshold+minReclaim"),
        pytest.param(1 * Gi + 400 * Mi, 8 * Gi, False, id="above 1Gi, below 1Gi+500Mi"),
        pytest.param(1 * Gi + 500 * Mi, 8 * Gi, True, id="exactly threshold+minReclaim"),
        pytest.param(2 * Gi, 1 * Gi, False, id="an unrelated soft threshold, grace not run"),
        pytest.param(2 * Gi, None, True, id="an unobserved signal counts for nothing"),
    ],
)
def test_the_recheck_is_every_threshold_with_min_reclaim_ignoring_grace(
    nodefs: int, memory: int | None, clear: bool
) -> None:
    """``reclaimNodeLevelResources``: after reclaim, pod eviction is skipped only if no
    configured threshold, of any signal, hard or soft, ignoring grace periods, is met
    counting its minimum reclaim (the global check, quirk included)."""
    signals = {Signal.NODEFS_AVAILABLE: (nodefs, 100 * Gi)}
    if memory is not None:
        signals[Signal.MEMORY_AVAILABLE] = (memory, 16 * Gi)
    assert engine.thresholds_clear(_RECHECK, observations(1.0, signals)) is clear


class SharedLayersDisk(Disk):
    """Each removed image frees only half its ``ListImages`` size: the rest are layers
    another image still holds."""

    def free(self, removed: Container | Image) -> None:
        self.available += removed.size // 2 if isinstance(removed, Image) else 50 * Mi


def test_images_go_on_until_the_disk_itself_says_enough() -> None:
    """Image sizes count shared layers, so the images whose sizes cover the need may free
    less: reclaim re-reads after them and goes on with the next oldest while a threshold
    is still met counting its minimum reclaim, rather than evict a pod the next image
    would have spared."""
    disk = SharedLayersDisk(950 * Mi)
    fake = runtime()
    fake.images = [Image(i.id, i.size * Mi, pinned=i.pinned) for i in fake.images]
    fake.images.append(Image("sha256:d", 600 * Mi))  # first seen with b and c, after them
    fake.on_remove = disk.free
    decision, before = decide(disk)
    after_decision, _ = reclaim_before_evicting(reclaimer(fake), RULES, decision, before, disk.read)
    # 950 + 100 (containers) + (200 + 300) / 2 = 1300Mi < 1Gi+500Mi: d too, not c2.
    assert fake.removed("remove_image") == ["sha256:b", "sha256:c", "sha256:d"]
    result = after_decision.node_reclaim_result
    assert result is not None and result.enough
    assert after_decision.evictions == ()
