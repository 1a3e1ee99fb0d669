"""What node-level reclaim removes: dead containers, unused images, how many bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.cri.client import Container, ContainerState, Image, Sandbox
from nodeagent.model import FsLayout, Signal
from nodeagent.reclaim import plan
from tests.eviction.builders import Gi, Mi, observations, policy


def sandbox(sid: str, uid: str) -> Sandbox:
    return Sandbox(sid, uid, "default", f"pod-{uid}", True, 0)


def container(
    cid: str,
    *,
    sandbox: str = "s1",
    name: str = "app",
    state: ContainerState = ContainerState.EXITED,
    created: int = 0,
    image: str = "sha256:a",
) -> Container:
    return Container(cid, sandbox, name, 0, state, created, frozenset({image}))


def image(iid: str, size: int = 100, *, tags: tuple[str, ...] = (), pinned: bool = False) -> Image:
    return Image(iid, size, tags, (), pinned)


# --- dead containers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "dead"),
    [
        pytest.param([container("c1", created=1)], [], id="the only exited instance is kept"),
        pytest.param(
            [container("c1", created=1), container("c2", created=2), container("c3", created=3)],
            ["c1", "c2"],
            id="older exited instances of a name go, oldest first",
        ),
        pytest.param(
            [
                container("c1", created=1),
                container("c2", created=2, state=ContainerState.RUNNING),
            ],
            [],
            id="a running instance does not count as the kept one",
        ),
        pytest.param(
            [
                container("c1", created=1, state=ContainerState.CREATED),
                container("c2", created=2, state=ContainerState.UNKNOWN),
                container("c3", created=3, state=ContainerState.RUNNING),
            ],
            [],
            id="created, unknown and running are never dead",
        ),
        pytest.param(
            [container("c1", created=1, name="a"), container("c2", created=2, name="b")],
            [],
            id="one kept per container name",
        ),
        pytest.param(
            [container("c1", created=1, sandbox="s1"), container("c2", created=2, sandbox="s2")],
            ["c1"],
            id="sandboxes of the same pod are one pod",
        ),
        pytest.param(
            [container("c1", created=1, sandbox="s1"), container("c2", created=2, sandbox="s3")],
            [],
            id="different pods keep one each",
        ),
        pytest.param(
            [
                container("c1", created=1, sandbox="gone"),
                container("c2", created=2, sandbox="gone"),
            ],
            ["c1"],
            id="a container whose sandbox is gone is grouped by sandbox id",
        ),
    ],
)
def test_dead_containers(containers: list[Container], dead: list[str]) -> None:
    sandboxes = [sandbox("s1", "uid-1"), sandbox("s2", "uid-1"), sandbox("s3", "uid-3")]
    assert [c.id for c in plan.dead_containers(containers, sandboxes)] == dead


# --- unused images -----------------------------------------------------------------------


def test_images_in_use_by_any_container_state_or_name_are_kept() -> None:
    images = [
        image("sha256:a", tags=("app:1",)),
        image("sha256:b", tags=("web:1",)),
        image("sha256:c"),
        image("sha256:d"),
    ]
    containers = [
        container("c1", image="app:1", state=ContainerState.EXITED),  # by tag
        container("c2", image="sha256:b", state=ContainerState.RUNNING),  # by id
        container("c3", image="sha256:c", state=ContainerState.CREATED),
    ]
    result = plan.plan_images(images, containers, {}, pinned_images=(), need=None)
    assert [i.id for i in result.remove] == ["sha256:d"]
    assert {k.image.id: k.reason for k in result.kept} == {
        "sha256:a": plan.Keep.IN_USE,
        "sha256:b": plan.Keep.IN_USE,
        "sha256:c": plan.Keep.IN_USE,
    }


@pytest.mark.parametrize(
    ("img", "pinned_images", "pinned"),
    [
        (image("sha256:p", pinned=True), (), True),
        (image("sha256:p", tags=("registry.k8s.io/pause:3.9",)), ("registry.k8s.io/pause",), True),
        (
            image("sha256:p", tags=("registry.k8s.io/pause:3.9",)),
            ("registry.k8s.io/pause:3.9",),
            True,
        ),
        (
            image("sha256:p", tags=("registry.k8s.io/pause:3.9",)),
            ("registry.k8s.io/pause:3.6",),
            False,
        ),
        (image("sha256:p"), ("sha256:p",), True),
        (image("sha256:p", tags=("reg:5000/app:1",)), ("reg:5000/app",), True),
        (image("sha256:p", tags=("reg:5000/app:1",)), ("reg",), False),
        (Image("sha256:p", 1, (), ("app@sha256:beef",)), ("app",), True),
        (
            image("sha256:p", tags=("registry.k8s.io/pause-extra:1",)),
            ("registry.k8s.io/pause",),
            False,
        ),
    ],
)
def test_pinned_images(img: Image, pinned_images: tuple[str, ...], pinned: bool) -> None:
    assert plan.is_pinned(img, pinned_images) is pinned
    result = plan.plan_images([img], [], {}, pinned_images=pinned_images, need=None)
    assert (not result.remove) is pinned


def test_oldest_first_until_the_need_is_met() -> None:
    images = [image("new", 300), image("used-long-ago", 200), image("never-used", 100)]
    records = {
        "new": plan.ImageRecord(first_seen=50.0),
        "used-long-ago": plan.ImageRecord(first_seen=10.0, last_used=20.0),
        "never-used": plan.ImageRecord(first_seen=40.0),
    }
    order = plan.plan_images(images, [], records, pinned_images=(), need=None)
    assert [i.id for i in order.remove] == ["never-used", "new", "used-long-ago"]
    enough = plan.plan_images(images, [], records, pinned_images=(), need=350)
    assert [i.id for i in enough.remove] == ["never-used", "new"]
    assert enough.bytes == 400
    assert [(k.image.id, k.reason) for k in enough.kept] == [
        ("used-long-ago", plan.Keep.NOT_NEEDED)
    ]
    assert plan.plan_images(images, [], records, pinned_images=(), need=0).remove == ()


def test_track_images_remembers_first_seen_and_last_used() -> None:
    images = [image("a"), image("b")]
    first = plan.track_images({}, images, [container("c", image="a")], now=10.0)
    assert first == {"a": plan.ImageRecord(10.0, 10.0), "b": plan.ImageRecord(10.0, None)}
    second = plan.track_images(first, [image("b"), image("c")], [], now=20.0)
    assert second == {"b": plan.ImageRecord(10.0, None), "c": plan.ImageRecord(20.0, None)}
    # An inventory whose clock was read before the last one's: a use never moves back.
    late = plan.track_images(first, images, [container("c", image="a")], now=5.0)
    assert late["a"] == plan.ImageRecord(10.0, 10.0)


@given(
    sizes=st.lists(st.integers(1, 1000), min_size=0, max_size=12),
    used=st.sets(st.integers(0, 11)),
    pinned=st.sets(st.integers(0, 11)),
    ages=st.lists(st.floats(0, 100), min_size=12, max_size=12),
    need=st.one_of(st.none(), st.integers(-10, 6000)),
)
def test_plan_images_properties(
    sizes: list[int], used: set[int], pinned: set[int], ages: list[float], need: int | None
) -> None:
    images = [image(f"i{n}", size, pinned=n in pinned) for n, size in enumerate(sizes)]
    containers = [container(f"c{n}", image=f"i{n}") for n in used]
    records = {f"i{n}": plan.ImageRecord(first_seen=ages[n]) for n in range(len(sizes))}
    result = plan.plan_images(images, containers, records, pinned_images=(), need=need)
    removed = [i.id for i in result.remove]
    candidates = sorted(
        (i for n, i in enumerate(images) if n not in used and n not in pinned),
        key=lambda i: (records[i.id].first_seen, i.id),
    )
    # Never an image in use or pinned; always the oldest candidates, in age order.
    assert removed == [i.id for i in candidates[: len(removed)]]
    # Enough, and not one image more than needed.
    if need is None:
        assert len(removed) == len(candidates)
    else:
        assert result.bytes >= need or len(removed) == len(candidates)
        assert sum(i.size for i in result.remove[:-1]) < need or not removed
    assert len(result.remove) + len(result.kept) == len(images)


# --- how many image bytes are needed -----------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "signals", "need"),
    [
        pytest.param(
            FsLayout.SINGLE,
            {Signal.NODEFS_AVAILABLE: (800 * Mi, 10 * Gi)},
            3 * Gi - 800 * Mi,
            id="single fs: the largest gap on it, imagefs 2Gi + 1Gi min reclaim - 800Mi",
        ),
        pytest.param(
            FsLayout.SINGLE,
            {Signal.NODEFS_AVAILABLE: (3 * Gi, 10 * Gi)},
            0,
            id="nothing met counting min reclaim: no image needed",
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            {
                Signal.NODEFS_AVAILABLE: (100 * Mi, 10 * Gi),
                Signal.IMAGEFS_AVAILABLE: (5 * Gi, 10 * Gi),
            },
            0,
            id="dedicated imagefs: nodefs pressure is not for images",
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            {
                Signal.NODEFS_AVAILABLE: (5 * Gi, 10 * Gi),
                Signal.IMAGEFS_AVAILABLE: (1 * Gi, 10 * Gi),
            },
            2 * Gi,
            id="dedicated imagefs: 2Gi + 1Gi min reclaim - 1Gi",
        ),
        pytest.param(
            FsLayout.SINGLE,
            {
                Signal.NODEFS_AVAILABLE: (5 * Gi, 10 * Gi),
                Signal.NODEFS_INODES_FREE: (10, 1000),
            },
            None,
            id="an inodes threshold: sizes do not tell, every unused image",
        ),
    ],
)
def test_image_bytes_needed(
    layout: FsLayout, signals: dict[Signal, tuple[int, int]], need: int | None
) -> None:
    rules = policy(
        eviction_hard={
            "nodefs.available": "1Gi",
            "imagefs.available": "2Gi",
            "nodefs.inodesFree": "5%",
        },
        eviction_minimum_reclaim={"nodefs.available": "500Mi", "imagefs.available": "1Gi"},
    )
    assert plan.image_bytes_needed(rules, observations(1.0, signals, layout=layout)) == need
