"""The container runtime, as node-level reclaim sees it: a CRI v1 client over gRPC.

The kubelet frees disk before it evicts pods by asking the runtime to remove dead
containers and unused images (``buildSignalToNodeReclaimFuncs``); the agent does the
same through the same API, on the socket the kubelet uses (``containerRuntimeEndpoint``:
containerd's ``/run/containerd/containerd.sock`` or CRI-O's ``/var/run/crio/crio.sock``).

:class:`ContainerRuntime` is the narrow interface the rest of the agent uses; it speaks
in the frozen values below, never in protobuf messages, so the planning of what to remove
(:mod:`nodeagent.reclaim.plan`) is a pure function of them and
:class:`~tests.doubles.cri.FakeRuntime` stands in for a runtime in tests.
:class:`GrpcRuntime` is the real one: every call has a deadline
(``containerRuntimeRequestTimeout``), and every failure, whatever gRPC raised, becomes a
:class:`CRIError` naming the call, so a runtime that is down or slow degrades
reclaim, never the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from nodeagent.base.errors import NodeAgentError
from nodeagent.cri import api_pb2 as pb
from nodeagent.cri.endpoint import DEFAULT_ENDPOINT, grpc_target

__all__ = [
    "DEFAULT_ENDPOINT",
    "CRIError",
    "Container",
    "ContainerRuntime",
    "ContainerState",
    "FilesystemUsage",
    "GrpcRuntime",
    "Image",
    "ImageFsInfo",
    "RuntimeVersion",
    "Sandbox",
    "grpc_target",
]

CRI_API_VERSION = "v1"


class ContainerState(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


_STATES = {
    pb.CONTAINER_CREATED: ContainerState.CREATED,
    pb.CONTAINER_RUNNING: ContainerState.RUNNING,
    pb.CONTAINER_EXITED: ContainerState.EXITED,
    pb.CONTAINER_UNKNOWN: ContainerState.UNKNOWN,
}


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A pod sandbox: which pod (UID) a container's sandbox belongs to."""

    id: str
    pod_uid: str
    pod_namespace: str
    pod_name: str
    ready: bool
    created_at: int
    """Nanoseconds since the epoch."""


@dataclass(frozen=True, slots=True)
class Container:
    id: str
    sandbox_id: str
    name: str
    """The container's name in the pod spec (metadata.name)."""
    attempt: int
    state: ContainerState
    created_at: int
    """Nanoseconds since the epoch."""
    image_refs: frozenset[str]
    """Every way the runtime names the container's image (the spec's image, the image
    ref, the image id): the image is in use if any of them names it."""


@dataclass(frozen=True, slots=True)
class Image:
    id: str
    size: int
    """Bytes, as the runtime reports it (``ListImages``)."""
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    pinned: bool = False
    """The runtime asks that it never be garbage-collected (the sandbox image)."""

    @property
    def names(self) -> frozenset[str]:
        """Its id, tags and digests."""
        return frozenset((self.id, *self.repo_tags, *self.repo_digests))

    def describe(self) -> str:
        return self.repo_tags[0] if self.repo_tags else self.id


@dataclass(frozen=True, slots=True)
class FilesystemUsage:
    """One filesystem the runtime stores images (or writable layers) on."""

    mountpoint: str
    used_bytes: int | None
    inodes_used: int | None


@dataclass(frozen=True, slots=True)
class ImageFsInfo:
    image_filesystems: tuple[FilesystemUsage, ...]
    container_filesystems: tuple[FilesystemUsage, ...] = ()
    """Reported only by runtimes that keep writable layers apart from images."""


class CRIError(NodeAgentError):
    """A CRI call failed: the runtime is down, slow past the deadline, or refused."""

    def __init__(self, call: str, detail: str) -> None:
        super().__init__(f"CRI {call}: {detail}")
        self.call = call
        self.detail = detail


class ContainerRuntime(Protocol):
    """What the agent asks of a CRI runtime."""

    def version(self) -> RuntimeVersion: ...

    def list_sandboxes(self) -> Sequence[Sandbox]: ...

    def list_containers(self) -> Sequence[Container]: ...

    def remove_container(self, container_id: str) -> None: ...

    def list_images(self) -> Sequence[Image]: ...

    def remove_image(self, image_id: str) -> None: ...

    def image_fs_info(self) -> ImageFsInfo: ...

    def close(self) -> None: ...


_Response = TypeVar("_Response", bound=Message)

_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The kubelet's limit for CRI messages: a node with thousands of images lists more
than gRPC's default 4 MiB."""


class GrpcRuntime:
    """:class:`ContainerRuntime` over a gRPC channel to the runtime's socket."""

    def __init__(self, endpoint: str, *, timeout: float) -> None:
        self.endpoint = endpoint
        self._timeout = timeout
        self._channel = grpc.insecure_channel(
            grpc_target(endpoint),
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ],
        )

    def _call(
        self, service: str, method: str, request: Message, response: type[_Response]
    ) -> _Response:
        stub: Callable[..., _Response] = self._channel.unary_unary(
            f"/runtime.v1.{service}/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        try:
            return stub(request, timeout=self._timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            name = code.name if code is not None else "ERROR"
            raise CRIError(method, f"{name}: {details} ({self.endpoint})") from exc

    def version(self) -> RuntimeVersion:
        answer = self._call(
            "RuntimeService",
            "Version",
            pb.VersionRequest(version=CRI_API_VERSION),
            pb.VersionResponse,
        )
        return RuntimeVersion(
            answer.runtime_name, answer.runtime_version, answer.runtime_api_version
        )

    def list_sandboxes(self) -> list[Sandbox]:
        answer = self._call(
            "RuntimeService",
            "ListPodSandbox",
            pb.ListPodSandboxRequest(),
            pb.ListPodSandboxResponse,
        )
        return [
            Sandbox(
                id=item.id,
                pod_uid=item.metadata.uid,
                pod_namespace=item.metadata.namespace,
                pod_name=item.metadata.name,
                ready=item.state == pb.SANDBOX_READY,
                created_at=item.created_at,
            )
            for item in answer.items
        ]

    def list_containers(self) -> list[Container]:
        answer = self._call(
            "RuntimeService",
            "ListContainers",
            pb.ListContainersRequest(),
            pb.ListContainersResponse,
        )
        return [
            Container(
                id=item.id,
                sandbox_id=item.pod_sandbox_id,
                name=item.metadata.name,
                attempt=item.metadata.attempt,
                state=_STATES.get(item.state, ContainerState.UNKNOWN),
                created_at=item.created_at,
                image_refs=frozenset(
                    ref for ref in (item.image.image, item.image_ref, item.image_id) if ref
                ),
            )
            for item in answer.containers
        ]

    def remove_container(self, container_id: str) -> None:
        self._call(
            "RuntimeService",
            "RemoveContainer",
            pb.RemoveContainerRequest(container_id=container_id),
            pb.RemoveContainerResponse,
        )

    def list_images(self) -> list[Image]:
        answer = self._call(
            "ImageService", "ListImages", pb.ListImagesRequest(), pb.ListImagesResponse
        )
        return [
            Image(
                id=item.id,
                size=item.size,
                repo_tags=tuple(item.repo_tags),
                repo_digests=tuple(item.repo_digests),
                pinned=item.pinned,
            )
            for item in answer.images
        ]

    def remove_image(self, image_id: str) -> None:
        self._call(
            "ImageService",
            "RemoveImage",
            pb.RemoveImageRequest(image=pb.ImageSpec(image=image_id)),
            pb.RemoveImageResponse,
        )

    def image_fs_info(self) -> ImageFsInfo:
        answer = self._call(
            "ImageService", "ImageFsInfo", pb.ImageFsInfoRequest(), pb.ImageFsInfoResponse
        )
        return ImageFsInfo(
            image_filesystems=tuple(_usage(fs) for fs in answer.image_filesystems),
            container_filesystems=tuple(_usage(fs) for fs in answer.container_filesystems),
        )

    def close(self) -> None:
        self._channel.close()


def _usage(fs: pb.FilesystemUsage) -> FilesystemUsage:
    return FilesystemUsage(
        mountpoint=fs.fs_id.mountpoint,
        used_bytes=fs.used_bytes.value if fs.HasField("used_bytes") else None,
        inodes_used=fs.inodes_used.value if fs.HasField("inodes_used") else None,
    )
