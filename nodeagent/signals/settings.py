"""Configuration fields that say where the node's signals are read from."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


class SignalSourceSettings(BaseModel):
    host_root: Path = Path("/")
    """The host's root as this process sees it: ``/`` on bare metal, ``/host`` in a
    DaemonSet that mounts the host's /proc, /sys and kubelet dirs under /host. Every
    reader resolves its paths below it."""
    node_cgroup: str | None = None
    """The cgroup treated as "the node", relative to the cgroup mount (``/`` or
    ``/mynode.slice``). With a memory limit, that limit is the capacity of
    ``memory.available``, so an operator can guard one slice. Default: the root."""
    kubepods_cgroup: str | None = None
    """The node-allocatable cgroup holding the pods (``/kubepods`` or
    ``/kubepods.slice``). Default: auto-detected."""
    nodefs_path: Path = Path("/var/lib/kubelet")
    """A path on the filesystem the kubelet root dir lives on (nodefs)."""
    imagefs_path: Path = Path("/var/lib/containerd")
    """A path on the container runtime's image filesystem (imagefs)."""
    containerfs_path: Path | None = None
    """A path on the writable-layer filesystem when the runtime splits it from images
    (containerfs). Default: the same as imagefs."""
    pod_logs_path: Path = Path("/var/log/pods")
    """Where the kubelet keeps pod logs (``<ns>_<name>_<uid>/``)."""
