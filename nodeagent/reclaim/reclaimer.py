"""Node-level reclaim, carried out: list what the runtime holds, plan, remove, report.

The engine says which kinds of reclaim can relieve the signal it acts on
(``Decision.node_reclaim``: ``containers``, ``images``, per the filesystem layout);
:class:`NodeReclaimer` lists the runtime's sandboxes, containers and images, plans with
the pure functions of :mod:`nodeagent.reclaim.plan`, and removes dead containers first,
then unused images, asking how many image bytes are still needed once the containers
are gone (their writable layers may have been enough), and again after each batch of
images (their sizes count shared layers, so they may free less). With ``dryRun`` it
logs what it would remove and removes nothing.

A failing call is logged and reclaim goes on with what it can (the kubelet logs and
ignores garbage-collection errors too): a runtime that is down costs the eviction at
most one ``containerRuntimeRequestTimeout`` per call, never the loop.

The agent's view of image age (:class:`~nodeagent.reclaim.plan.ImageRecord`) is kept
here, updated by every reclaim and by an inventory every ``imageInventoryInterval`` in a
thread of its own (:meth:`NodeReclaimer.start`; the kubelet's image manager detects
images every 5 minutes too): the CRI says neither when an image arrived nor when it was
last used, so "oldest" is as the agent saw it. Images first seen together (at the
agent's start) are ordered by id.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from nodeagent.base.clock import Clock
from nodeagent.base.logs import FIELDS
from nodeagent.cri.client import Container, ContainerRuntime, CRIError, Image
from nodeagent.eviction import layout as fs_layout
from nodeagent.eviction.observations import observe
from nodeagent.model import NodeObservations, Signal
from nodeagent.reclaim import plan

__all__ = ["NodeReclaimer", "ReclaimReport", "reclaimed_bytes"]

log = logging.getLogger("nodeagent.reclaim")

_Listed = TypeVar("_Listed")

_FREES: Mapping[str, Signal] = {
    fs_layout.RECLAIM_CONTAINERS: Signal.CONTAINERFS_AVAILABLE,
    fs_layout.RECLAIM_IMAGES: Signal.IMAGEFS_AVAILABLE,
}
"""The signal measuring the filesystem each kind of reclaim frees."""


@dataclass(frozen=True, slots=True)
class ReclaimReport:
    """One reclaim: what was removed (or, in dry run, would have been)."""

    kinds: tuple[str, ...]
    containers: tuple[Container, ...]
    images: tuple[Image, ...]
    image_need: int | None
    """The image bytes the plan aimed at (None: every unused image)."""
    errors: tuple[str, ...]
    dry_run: bool
    seconds: float

    @property
    def image_bytes(self) -> int:
        return sum(image.size for image in self.images)


def reclaimed_bytes(
    before: NodeObservations, after: NodeObservations, kinds: Collection[str]
) -> int:
    """Bytes that became available on the filesystems ``kinds`` free, between two
    collections (each filesystem counted once, whatever signals share it)."""
    layout = after.fs_layout
    signals = {
        fs_layout.filesystem_of(_FREES[kind], layout): _FREES[kind]
        for kind in kinds
        if kind in _FREES
    }
    old = observe(before, signals.values())
    new = observe(after, signals.values())
    total = 0
    for signal in signals.values():
        if signal in old and signal in new:
            total += max(0, new[signal].available - old[signal].available)
    return total


class NodeReclaimer:
    """Removes dead containers and unused images through a :class:`ContainerRuntime`."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        *,
        clock: Clock,
        dry_run: bool,
        pinned_images: Collection[str] = (),
        interval: float = 10.0,
    ) -> None:
        self.runtime = runtime
        self.dry_run = dry_run
        self._clock = clock
        self._pinned = tuple(pinned_images)
        self._interval = interval
        self._last: float = float("-inf")
        self.records: dict[str, plan.ImageRecord] = {}
        self.unreachable: str | None = None
        """Why the runtime's last listing failed (None: it answered): the loop exports it
        as the ``node-reclaim`` component's degradation."""
        self._inventory_lock = threading.Lock()
        """One inventory at a time (the thread's and a reclaim's): a listing taken earlier
        never replaces the records a later one wrote."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the inventory thread ----------------------------------------------------------
    def start(self, inventory_interval: float) -> None:
        """Take an inventory now and every ``inventory_interval`` seconds (0: never), in
        a daemon thread, so image ages are known before the first reclaim."""
        if inventory_interval <= 0:
            return
        self._thread = threading.Thread(
            target=self._inventories,
            args=(inventory_interval,),
            name="image-inventory",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _inventories(self, interval: float) -> None:
        while True:
            was = self.unreachable
            try:
                self.inventory(self._clock.now())
            except CRIError as exc:
                if was is None:  # once per outage, not every interval
                    log.warning("image inventory failed: %s", exc)
            else:
                if was is not None:
                    log.info("image inventory: the container runtime answers again")
            if self._stop.wait(interval):
                return

    def due(self, now: float) -> bool:
        """Whether ``nodeReclaimInterval`` has passed since the last reclaim."""
        return now - self._last >= self._interval

    def reclaim(
        self, kinds: Sequence[str], *, image_need: Callable[[], int | None]
    ) -> ReclaimReport:
        """Remove what ``kinds`` allow (dead containers first); ``image_need`` is asked,
        after the containers are gone and after each batch of images, how many image
        bytes are still wanted."""
        start = self._clock.now()
        self._last = start
        errors: list[str] = []
        removed_containers: tuple[Container, ...] = ()
        containers: list[Container] | None = None
        if fs_layout.RECLAIM_CONTAINERS in kinds:
            removed_containers, containers = self._remove_dead_containers(errors)
        removed_images: tuple[Image, ...] = ()
        need: int | None = None
        if fs_layout.RECLAIM_IMAGES in kinds:
            removed_images, need = self._remove_unused_images(
                containers, removed_containers, image_need, errors
            )
        report = ReclaimReport(
            kinds=tuple(kinds),
            containers=removed_containers,
            images=removed_images,
            image_need=need,
            errors=tuple(errors),
            dry_run=self.dry_run,
            seconds=self._clock.now() - start,
        )
        return report

    def inventory(self, now: float) -> tuple[list[Image], list[Container]]:
        """List images and containers and update the image records (replaced whole, so
        a reader never sees a half-updated map; one inventory at a time)."""
        with self._inventory_lock:
            images, containers = self._listed(
                lambda: (list(self.runtime.list_images()), list(self.runtime.list_containers()))
            )
            self.records = plan.track_images(self.records, images, containers, now)
        return images, containers

    def _listed(self, listing: Callable[[], _Listed]) -> _Listed:
        """``listing()``, noting in :attr:`unreachable` whether the runtime answered."""
        try:
            answer = listing()
        except CRIError as exc:
            self.unreachable = str(exc)
            raise
        self.unreachable = None
        return answer

    # --- steps -------------------------------------------------------------------------
    def _remove_dead_containers(
        self, errors: list[str]
    ) -> tuple[tuple[Container, ...], list[Container] | None]:
        """Returns what was removed and the containers that remain (None if unknown)."""
        try:
            sandboxes, containers = self._listed(
                lambda: (self.runtime.list_sandboxes(), list(self.runtime.list_containers()))
            )
        except CRIError as exc:
            errors.append(str(exc))
            log.warning("node-level reclaim cannot list containers: %s", exc)
            return (), None
        dead = plan.dead_containers(containers, sandboxes)
        pods = {s.id: f"{s.pod_namespace}/{s.pod_name}" for s in sandboxes}
        removed = [
            container
            for container in dead
            if self._remove(
                f"dead container {container.name}",
                functools.partial(self.runtime.remove_container, container.id),
                {
                    "container": container.id,
                    "pod": pods.get(container.sandbox_id, container.sandbox_id),
                    "name": container.name,
                    "attempt": container.attempt,
                },
                errors,
            )
        ]
        gone = {c.id for c in removed}
        return tuple(removed), [c for c in containers if c.id not in gone]

    def _remove_unused_images(
        self,
        containers: list[Container] | None,
        removed_containers: Sequence[Container],
        image_need: Callable[[], int | None],
        errors: list[str],
    ) -> tuple[tuple[Image, ...], int | None]:
        now = self._clock.now()
        try:
            images, listed = self.inventory(now)
        except CRIError as exc:
            errors.append(str(exc))
            log.warning("node-level reclaim cannot list images: %s", exc)
            return (), None
        if containers is None or not self.dry_run:
            # Removed containers are gone from a fresh listing; in a dry run they are not,
            # so the plan drops them by hand to show what a real run would remove.
            containers = listed
        gone = {c.id for c in removed_containers}
        containers = [c for c in containers if c.id not in gone]
        need = first_need = image_need()
        attempted: set[str] = set()
        removed: list[Image] = []
        while True:
            image_plan = plan.plan_images(
                [i for i in images if i.id not in attempted],
                containers,
                self.records,
                pinned_images=self._pinned,
                need=need,
            )
            removed.extend(
                image
                for image in image_plan.remove
                if self._remove(
                    f"unused image {image.describe()}",
                    functools.partial(self.runtime.remove_image, image.id),
                    {"image": image.describe(), "id": image.id, "sizeBytes": image.size},
                    errors,
                )
            )
            attempted.update(image.id for image in image_plan.remove)
            if self.dry_run or need is None or not image_plan.remove:
                break
            # Sizes count layers other images share: the disk says whether they were
            # enough, and if not the next oldest go.
            need = image_need()
            if need is not None and need <= 0:
                break
        return tuple(removed), first_need

    def _remove(
        self,
        what: str,
        remove: Callable[[], None],
        fields: Mapping[str, object],
        errors: list[str],
    ) -> bool:
        """Remove one thing (or, in a dry run, say it would); True when it is gone."""
        fields = {**fields, "dryRun": self.dry_run}
        if self.dry_run:
            log.info("would remove %s", what, extra={FIELDS: fields})
            return True
        try:
            remove()
        except CRIError as exc:
            errors.append(str(exc))
            log.warning("could not remove %s: %s", what, exc, extra={FIELDS: fields})
            return False
        log.info("removed %s", what, extra={FIELDS: fields})
        return True
