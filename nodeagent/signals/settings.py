"""Configuration fields that say where the node's signals are read from."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from nodeagent.base import durations
from nodeagent.signals.cgroups import normalize_cgroup


class SignalSourceSettings(BaseModel):
    host_root: Path = Field(
        default=Path("/"),
        description="The host's root as this process sees it: ``/`` on bare metal, ``/host``"
        " in a DaemonSet that mounts the host's /proc, /sys and kubelet dirs under /host."
        " Every reader resolves its paths below it.",
    )
    node_cgroup: str = Field(
        default="/",
        description='The cgroup treated as "the node", relative to the cgroup mount (``/``'
        " or ``/mynode.slice``). With a memory limit, that limit is the capacity of"
        " ``memory.available``, so an operator can guard one slice. Default: the root.",
    )
    kubepods_cgroup: str | None = Field(
        default=None,
        description="The node-allocatable cgroup holding the pods (``/kubepods`` or"
        " ``/kubepods.slice``). Default: auto-detected, under the node cgroup first, then at"
        " the root.",
    )
    nodefs_path: Path = Field(
        default=Path("/var/lib/kubelet"),
        description="A path on the filesystem the kubelet root dir lives on (nodefs).",
    )
    imagefs_path: Path | None = Field(
        default=None,
        description="A path on the container runtime's image filesystem (imagefs):"
        " ``/var/lib/containerd`` for containerd, ``/var/lib/containers`` for CRI-O. Default:"
        " where the runtime on ``containerRuntimeEndpoint`` says (CRI ``ImageFsInfo``, as the"
        " kubelet finds it; with the writable-layer filesystem too when the runtime reports"
        " one), else ``/var/lib/containerd``.",
    )
    containerfs_path: Path | None = Field(
        default=None,
        description="A path on the writable-layer filesystem when the runtime splits it from"
        " images (containerfs). Default: unset, and containerfs follows the detected layout"
        " (nodefs on a single filesystem, imagefs with a dedicated imagefs).",
    )
    pod_logs_path: Path = Field(
        default=Path("/var/log/pods"),
        description="Where the kubelet keeps pod logs (``<ns>_<name>_<uid>/``).",
    )
    kubelet_root_dir: Path = Field(
        default=Path("/var/lib/kubelet"),
        description="The kubelet's ``--root-dir``; pod volumes are under ``pods/<uid>/volumes``.",
    )
    pod_storage_scan_interval: float = Field(
        default=30.0,
        description="Seconds between walks of the pods' logs, emptyDir volumes and writable"
        " layers (also accepts ``30s``, ``1m``). The walks cost far more than the per-second"
        " cgroup reads, and disk fills slowly; the kubelet's cAdvisor rescans about every"
        " minute. ``0`` disables per-pod ephemeral-storage usage.",
    )

    stats_housekeeping_interval: float = Field(
        default=0.0,
        description="Serve every signal from a sample that a housekeeping thread takes once per"
        " this interval (at a random phase), as the kubelet's Summary API serves cAdvisor's:"
        " each cycle then decides on stats up to this old. For comparing the agent with such"
        " a reader (benchmarks); kernel notifications then wake the loop only to the latest"
        " sample, and the adaptive memory poll is unavailable. ``0`` (default) reads every"
        " signal at each cycle, as an agent should.",
    )

    @field_validator("kubepods_cgroup", "containerfs_path", "imagefs_path", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # An empty value (``NODEAGENT_KUBEPODS_CGROUP=`` from a template) means the
        # default, not the root cgroup or the current directory.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("node_cgroup")
    @classmethod
    def _cgroup_path(cls, value: str) -> str:
        return normalize_cgroup(value)

    @field_validator("kubepods_cgroup")
    @classmethod
    def _kubepods_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        cgroup = normalize_cgroup(value)
        if cgroup == "/":
            raise ValueError(
                "must not be the root cgroup: pods live below kubepods "
                "(leave it unset to auto-detect)"
            )
        return cgroup

    @field_validator(
        "host_root",
        "nodefs_path",
        "imagefs_path",
        "containerfs_path",
        "pod_logs_path",
        "kubelet_root_dir",
    )
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @field_validator("pod_storage_scan_interval", mode="before")
    @classmethod
    def _duration(cls, value: str | float) -> float:
        return durations.parse_seconds(value)

    @field_validator("stats_housekeeping_interval", mode="before")
    @classmethod
    def _housekeeping_interval(cls, value: str | float) -> float:
        seconds = durations.parse_seconds(value)
        if seconds > MAX_HOUSEKEEPING_INTERVAL_S:
            raise ValueError(f"expected 0 (off) or an interval up to 1h, got {value!r}")
        return seconds


MAX_HOUSEKEEPING_INTERVAL_S = 3600.0
