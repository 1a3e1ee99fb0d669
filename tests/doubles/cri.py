"""An in-memory container runtime for tests: :class:`ContainerRuntime` without a socket.

It holds sandboxes, containers and images as given, removes them when asked, records
every call, and can be told to fail a call (:attr:`FakeRuntime.failures`) the way a real
runtime does (:class:`~nodeagent.cri.client.CRIError`). ``on_remove`` lets a test free
space on a fake filesystem when something is removed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent.cri.client import (
    Container,
    CRIError,
    FilesystemUsage,
    Image,
    ImageFsInfo,
    RuntimeVersion,
    Sandbox,
)


@dataclass
class FakeRuntime:
    sandboxes: list[Sandbox] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    image_filesystems: tuple[FilesystemUsage, ...] = ()
    container_filesystems: tuple[FilesystemUsage, ...] = ()
    failures: dict[str, str] = field(default_factory=dict)
    """Method name (``remove_image``) -> the detail of the error it raises."""
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(method, argument) of every call, in order."""
    on_remove: Callable[[Container | Image], None] | None = None
    closed: bool = False

    def _enter(self, method: str, argument: str = "") -> None:
        self.calls.append((method, argument))
        if method in self.failures:
            raise CRIError(method, self.failures[method])

    def version(self) -> RuntimeVersion:
        self._enter("version")
        return RuntimeVersion("fake", "0.0.0", "v1")

    def list_sandboxes(self) -> list[Sandbox]:
        self._enter("list_sandboxes")
        return list(self.sandboxes)

    def list_containers(self) -> list[Container]:
        self._enter("list_containers")
        return list(self.containers)

    def remove_container(self, container_id: str) -> None:
        self._enter("remove_container", container_id)
        for container in [c for c in self.containers if c.id == container_id]:
            self.containers.remove(container)
            if self.on_remove is not None:
                self.on_remove(container)

    def list_images(self) -> list[Image]:
        self._enter("list_images")
        return list(self.images)

    def remove_image(self, image_id: str) -> None:
        self._enter("remove_image", image_id)
        for image in [i for i in self.images if i.id == image_id]:
            self.images.remove(image)
            if self.on_remove is not None:
                self.on_remove(image)

    def image_fs_info(self) -> ImageFsInfo:
        self._enter("image_fs_info")
        return ImageFsInfo(self.image_filesystems, self.container_filesystems)

    def close(self) -> None:
        self.closed = True

    def removed(self, method: str) -> list[str]:
        """The arguments of every ``method`` call (``remove_image``), in order."""
        return [argument for name, argument in self.calls if name == method]
