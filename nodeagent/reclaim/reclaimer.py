"""Node-level reclaim, carried out: list what the runtime holds, plan, remove, report.

The engine says which kinds of reclaim can relieve the signal it acts on
(``Decision.node_reclaim``: ``containers``, ``images``, per the filesystem layout);
:class:`NodeReclaimer` lists the runtime's sandboxes, containers and images, plans with
the pure functions of :mod:`nodeagent.reclaim.plan`, and removes dead containers first,
then unused images, asking how many image bytes are still needed only once the
containers are gone (their writable layers may have been enough). With ``dryRun`` it
logs what it would remove and removes nothing.

A failing call is logged and reclaim goes on with what it can (the kubelet logs and
ignores garbage-collection errors too): a runtime that is down costs the eviction at
most one ``containerRuntimeRequestTimeout`` per call, never the loop.

The agent's view of image age (:class:`~nodeagent.reclaim.plan.ImageRecord`) is kept
here, updated by every inventory: the CRI does not say when an image was last used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from nodeagent.agent.logs import FIELDS
from nodeagent.clock import Clock
from nodeagent.cri.client import Container, ContainerRuntime, CRIError, Image
from nodeagent.eviction import layout as fs_layout
from nodeagent.eviction.observations import observe
from nodeagent.model import NodeObservations, Signal
from nodeagent.reclaim import plan

__all__ = ["NodeReclaimer", "ReclaimReport", "reclaimed_bytes"]

log = logging.getLogger("nodeagent.reclaim")

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

    def due(self, now: float) -> bool:
        """Whether ``nodeReclaimInterval`` has passed since the last reclaim."""
        return now - self._last >= self._interval

    def reclaim(
        self, kinds: Sequence[str], *, image_need: Callable[[], int | None]
    ) -> ReclaimReport:
        """Remove what ``kinds`` allow (dead containers first); ``image_need`` is asked,
        after the containers are gone, how many image bytes are still wanted."""
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
        """List images and containers and update the image records."""
        images = list(self.runtime.list_images())
        containers = list(self.runtime.list_containers())
        self.records = plan.track_images(self.records, images, containers, now)
        return images, containers

    # --- steps -------------------------------------------------------------------------
    def _remove_dead_containers(
        self, errors: list[str]
    ) -> tuple[tuple[Container, ...], list[Container] | None]:
        """Returns what was removed and the containers that remain (None if unknown)."""
        try:
            sandboxes = self.runtime.list_sandboxes()
            containers = list(self.runtime.list_containers())
        except CRIError as exc:
            errors.append(str(exc))
            log.warning("node-level reclaim cannot list containers: %s", exc)
            return (), None
        dead = plan.dead_containers(containers, sandboxes)
        pods = {s.id: f"{s.pod_namespace}/{s.pod_name}" for s in sandboxes}
        removed: list[Container] = []
        for container in dead:
            fields = {
                "container": container.id,
                "pod": pods.get(container.sandbox_id, container.sandbox_id),
                "name": container.name,
                "attempt": container.attempt,
                "dryRun": self.dry_run,
            }
            if self.dry_run:
                log.info("would remove dead container %s", container.name, extra={FIELDS: fields})
                removed.append(container)
                continue
            try:
                self.runtime.remove_container(container.id)
            except CRIError as exc:
                errors.append(str(exc))
                log.warning("could not remove dead container: %s", exc, extra={FIELDS: fields})
                continue
            log.info("removed dead container %s", container.name, extra={FIELDS: fields})
            removed.append(container)
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
        need = image_need()
        image_plan = plan.plan_images(
            images, containers, self.records, pinned_images=self._pinned, need=need
        )
        removed: list[Image] = []
        for image in image_plan.remove:
            fields = {
                "image": image.describe(),
                "id": image.id,
                "sizeBytes": image.size,
                "dryRun": self.dry_run,
            }
            if self.dry_run:
                log.info("would remove unused image %s", image.describe(), extra={FIELDS: fields})
                removed.append(image)
                continue
            try:
                self.runtime.remove_image(image.id)
            except CRIError as exc:
                errors.append(str(exc))
                log.warning("could not remove unused image: %s", exc, extra={FIELDS: fields})
                continue
            log.info("removed unused image %s", image.describe(), extra={FIELDS: fields})
            removed.append(image)
        return tuple(removed), need
