"""What node-level reclaim removes: pure functions of the runtime's inventory.

The kubelet frees disk through the runtime before it evicts a pod for a disk signal
(``reclaimNodeLevelResources``). The rules, as the agent applies them:

* **Dead containers** are exited containers that are not the newest exited instance of
  their pod's container name: one is kept per (pod, container name), as the kubelet's
  container garbage collection keeps ``MaxPerPodContainer = 1`` so that
  ``kubectl logs --previous`` still works. Running, created and unknown containers are
  never touched.
* **Unused images** are images no container uses (running or exited but not yet
  removed; a container removed in the same reclaim no longer counts) and that are not
  pinned (by the runtime's ``pinned`` flag, which the sandbox image carries, or by the
  agent's ``pinnedImages``). They are removed oldest first (least recently seen in use,
  then first seen, by the agent's :class:`ImageRecord` s), and only until their sizes
  (from ``ListImages``) add up to what the image filesystem needs to end the pressure
  with its minimum reclaim (the reclaimer re-reads the filesystem after them and plans
  again while it falls short: sizes count shared layers); the kubelet removes every
  unused image, which throws away images the next pod start would pull again.

How much the image filesystem needs comes from the thresholds themselves
(:func:`image_bytes_needed`); a threshold on inodes there makes it unknown (image sizes
say nothing of inodes), and every unused image goes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from nodeagent.cri.client import Container, ContainerState, Image, Sandbox
from nodeagent.eviction import layout as fs_layout
from nodeagent.eviction import thresholds as thr
from nodeagent.eviction.observations import observe
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.model import SIGNAL_RESOURCE, NodeObservations, Resource

__all__ = [
    "ImagePlan",
    "ImageRecord",
    "Keep",
    "KeptImage",
    "dead_containers",
    "image_bytes_needed",
    "images_in_use",
    "is_pinned",
    "plan_images",
    "track_images",
]


@dataclass(frozen=True, slots=True)
class ImageRecord:
    """What the agent has seen of one image, for "oldest first"."""

    first_seen: float
    last_used: float | None = None
    """The last time a container was seen using it (None: never, since the agent
    started)."""


def images_in_use(images: Iterable[Image], containers: Iterable[Container]) -> frozenset[str]:
    """Ids of the images some container uses, whatever its state."""
    refs = frozenset(ref for container in containers for ref in container.image_refs)
    return frozenset(image.id for image in images if image.names & refs)


def track_images(
    records: Mapping[str, ImageRecord],
    images: Sequence[Image],
    containers: Sequence[Container],
    now: float,
) -> dict[str, ImageRecord]:
    """``records`` brought up to date with one inventory: new images first seen ``now``,
    images in use last used ``now`` (never earlier than a use already recorded: an
    inventory whose ``now`` was read before another's finished), vanished images
    forgotten."""
    used = images_in_use(images, containers)
    updated = {}
    for image in images:
        record = records.get(image.id) or ImageRecord(first_seen=now)
        if image.id in used:
            last_used = now if record.last_used is None else max(record.last_used, now)
            record = ImageRecord(record.first_seen, last_used)
        updated[image.id] = record
    return updated


def dead_containers(
    containers: Sequence[Container], sandboxes: Sequence[Sandbox]
) -> tuple[Container, ...]:
    """Exited containers other than the newest exited one of each (pod, container name),
    oldest first. A container whose sandbox is gone is grouped by its sandbox id."""
    pod_of = {sandbox.id: sandbox.pod_uid or sandbox.id for sandbox in sandboxes}
    units: dict[tuple[str, str], list[Container]] = defaultdict(list)
    for container in containers:
        if container.state is ContainerState.EXITED:
            pod = pod_of.get(container.sandbox_id, container.sandbox_id)
            units[(pod, container.name)].append(container)
    dead = []
    for unit in units.values():
        unit.sort(key=lambda c: (c.created_at, c.id), reverse=True)
        dead.extend(unit[1:])
    return tuple(sorted(dead, key=lambda c: (c.created_at, c.id)))


def _repository(reference: str) -> str:
    """``registry:5000/app:1.2`` or ``app@sha256:...`` -> ``registry:5000/app``."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def is_pinned(image: Image, pinned_images: Collection[str]) -> bool:
    """The runtime pins it, or ``pinnedImages`` names it: by id, tag or digest, or by
    repository (``registry.k8s.io/pause`` pins every tag of it)."""
    if image.pinned:
        return True
    if not pinned_images:
        return False
    repositories = {_repository(ref) for ref in (*image.repo_tags, *image.repo_digests)}
    return any(entry in image.names or entry in repositories for entry in pinned_images)


class Keep(StrEnum):
    """Why an image stays."""

    IN_USE = "in use"
    PINNED = "pinned"
    NOT_NEEDED = "not needed"
    """Unused, but the images before it in age order already free enough."""


@dataclass(frozen=True, slots=True)
class KeptImage:
    image: Image
    reason: Keep


@dataclass(frozen=True, slots=True)
class ImagePlan:
    remove: tuple[Image, ...]
    """In removal order (oldest first)."""
    kept: tuple[KeptImage, ...]
    need: int | None
    """Bytes the plan aimed at; None: every unused image."""

    @property
    def bytes(self) -> int:
        """What the removed images weigh by the runtime's sizes."""
        return sum(image.size for image in self.remove)


def plan_images(
    images: Sequence[Image],
    containers: Sequence[Container],
    records: Mapping[str, ImageRecord],
    *,
    pinned_images: Collection[str],
    need: int | None,
) -> ImagePlan:
    """Unused, unpinned images to remove, oldest first, until their sizes reach ``need``
    bytes (``None``: all of them; ``0`` or less: none)."""
    used = images_in_use(images, containers)
    kept: list[KeptImage] = []
    candidates: list[Image] = []
    for image in images:
        if image.id in used:
            kept.append(KeptImage(image, Keep.IN_USE))
        elif is_pinned(image, pinned_images):
            kept.append(KeptImage(image, Keep.PINNED))
        else:
            candidates.append(image)

    def age(image: Image) -> tuple[float, float, str]:
        record = records.get(image.id)
        if record is None:
            return (float("-inf"), float("-inf"), image.id)
        last_used = record.last_used if record.last_used is not None else float("-inf")
        return (last_used, record.first_seen, image.id)

    candidates.sort(key=age)
    remove: list[Image] = []
    freed = 0
    for image in candidates:
        if need is not None and freed >= need:
            kept.append(KeptImage(image, Keep.NOT_NEEDED))
            continue
        remove.append(image)
        freed += image.size
    return ImagePlan(tuple(remove), tuple(kept), need)


def image_bytes_needed(policy: EvictionPolicy, observations: NodeObservations) -> int | None:
    """Bytes the image filesystem must gain so that no threshold on a signal that
    removing images relieves is met counting its minimum reclaim; ``None`` when such a
    threshold on inodes is met (then every unused image goes)."""
    layout = observations.fs_layout
    observed = observe(observations, policy.signals_for(layout))
    need = 0
    for threshold in policy.thresholds_for(layout):
        if fs_layout.RECLAIM_IMAGES not in fs_layout.reclaim_kinds(threshold.signal, layout):
            continue
        value = observed.get(threshold.signal)
        if value is None:
            continue
        gap = (
            thr.threshold_quantity(threshold, value.capacity)
            + thr.reclaim_quantity(threshold, value.capacity)
            - value.available
        )
        if gap <= 0:
            continue
        if SIGNAL_RESOURCE[threshold.signal] is Resource.INODES:
            return None
        need = max(need, gap)
    return need
