"""Configuration fields of node-level reclaim and of the container runtime it asks."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from nodeagent.actuators.settings import Seconds, StringList
from nodeagent.cri.endpoint import DEFAULT_ENDPOINT, grpc_target


class NodeReclaimSettings(BaseModel):
    node_reclaim: bool = Field(
        default=True,
        description="Before evicting pods for a disk signal, free what the node itself can"
        " through the container runtime, as the kubelet does: dead containers, then unused"
        " images (only what the pressured filesystem holds), then re-read the filesystems and"
        " evict only if a threshold is still met counting its minimum reclaim.",
    )
    container_runtime_endpoint: str = Field(
        default=DEFAULT_ENDPOINT,
        description="The CRI socket (the kubelet's ``containerRuntimeEndpoint``):"
        " ``unix:///run/containerd/containerd.sock`` (default) or CRI-O's"
        " ``unix:///var/run/crio/crio.sock``.",
    )
    container_runtime_request_timeout: Seconds = Field(
        default=5.0,
        gt=0,
        description="Seconds one CRI call may take before reclaim gives up on it and eviction"
        " goes on (the loop waits for reclaim, as the kubelet does, so this bounds that wait).",
    )
    node_reclaim_interval: Seconds = Field(
        default=10.0,
        description="Seconds (default 10s, the kubelet's cycle) between a reclaim that was not"
        " enough and the next: while the pod evicted after it terminates, the runtime is not"
        " listed again every cycle. After a reclaim that was enough, pressure back is"
        " reclaimed at once.",
    )
    image_inventory_interval: Seconds = Field(
        default=300.0,
        description="Seconds (default 5m, as the kubelet's image detection) between two"
        " listings of the runtime's images and containers, from which reclaim knows which"
        " unused images are oldest (first seen, last seen in use); ``0`` leaves that to"
        " reclaims alone.",
    )
    pinned_images: StringList = Field(
        default_factory=lambda: ["registry.k8s.io/pause", "k8s.gcr.io/pause"],
        description="Images reclaim never removes, besides those the runtime pins: ids, tags,"
        " digests or repositories (every tag). Default: the sandbox (pause) images, which"
        " runtimes before the CRI's ``pinned`` flag (containerd 1.6) do not report as pinned.",
    )

    @field_validator("container_runtime_endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        grpc_target(value)  # raises ValueError with what is allowed
        return value
