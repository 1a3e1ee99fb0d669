"""A real containerd (Debian's, with its CRI plugin) started by a test, all of it in a
temporary directory: its root on a small tmpfs the test mounts as the image filesystem,
its state and gRPC socket beside it, images imported from tarballs the tests build
(:mod:`tests.cri.images`), and pods made through the CRI with host networking (no CNI).

The sandbox image is one of those tarballs, named in containerd's configuration, since
nothing can be pulled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from nodeagent.cri.client import ContainerState, GrpcRuntime
from tests.cri import images
from tests.cri import lifecycle_pb2 as lc

SANDBOX_IMAGE = "nodeagent.test/pause:1"


def available() -> str | None:
    """Why a real containerd cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (mounts, containerd)"
    for tool in ("containerd", "ctr", "runc", "containerd-shim-runc-v2"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install containerd runc)"
    if os.uname().machine != "x86_64":
        return "the test images' programs are x86-64 machine code"
    return None


_Response = TypeVar("_Response", bound=Message)


def write_config(
    path: Path,
    *,
    root: Path,
    state: Path,
    socket: Path,
    opt: Path,
    sandbox_image: str,
    cni_bin: Path,
    cni_conf: Path,
    restrict_oom_score_adj: bool,
) -> Path:
    """Write a containerd configuration to ``path``: its own root, state and socket, the
    CRI plugin with ``sandbox_image``, runc with the ``cgroupfs`` driver on overlayfs, and
    the snapshotters this machine cannot run disabled. ``restrict_oom_score_adj`` keeps a
    container's score no lower than containerd's own: lowering one needs
    CAP_SYS_RESOURCE, which a VM's sandboxed root may lack, and runc's init then dies
    before the container starts. Both the standalone runtime here and the node tests'
    (``tests.node.node``) are configured by this one function."""
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    path.write_text(
        f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = {"true" if restrict_oom_score_adj else "false"}
  {cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    {cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      {cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  {cri}.cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
"""
    )
    return path


class Containerd:
    """One containerd; :meth:`start`, then :meth:`stop` (removes its pods, unmounts)."""

    def __init__(
        self,
        base: Path,
        *,
        imagefs: Path | None = None,
        imagefs_mib: int = 64,
    ) -> None:
        self.base = base
        self.imagefs = imagefs or base / "imagefs"
        self.root = self.imagefs / "root"
        self.state = base / "state"
        self.socket = base / "containerd.sock"
        self.endpoint = f"unix://{self.socket}"
        self.logs = base / "pods"
        self._imagefs_mib = imagefs_mib
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: grpc.Channel | None = None
        self.runtime: GrpcRuntime | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.imagefs.mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self._imagefs_mib}m", "tmpfs", self.imagefs],
            check=True,
        )
        for directory in (self.root, self.state, self.logs, self.base / "cni", self.base / "opt"):
            directory.mkdir(parents=True, exist_ok=True)
        config = write_config(
            self.base / "config.toml",
            root=self.root,
            state=self.state,
            socket=self.socket,
            opt=self.base / "opt",
            sandbox_image=SANDBOX_IMAGE,
            cni_bin=self.base / "cni",
            cni_conf=self.base / "cni",
            restrict_oom_score_adj=True,
        )
        self._process = subprocess.Popen(
            ["containerd", "--config", str(config)],
            stdout=(self.base / "containerd.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.runtime = GrpcRuntime(self.endpoint, timeout=10.0)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.runtime.version()
                break
            except Exception:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise RuntimeError(f"containerd did not start: {self.log_tail()}") from None
                time.sleep(0.05)
        self._channel = grpc.insecure_channel(self.endpoint)
        self.import_image(
            images.build_image(self.base / "pause.tar", SANDBOX_IMAGE, program=images.PAUSE_PROGRAM)
        )

    def stop(self) -> None:
        if self.runtime is not None:
            try:
                for sandbox in self.runtime.list_sandboxes():
                    self._call(
                        "StopPodSandbox", lc.StopPodSandboxRequest(pod_sandbox_id=sandbox.id)
                    )
                    self._call(
                        "RemovePodSandbox", lc.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id)
                    )
            except Exception:  # best effort: the process is stopped below anyway
                pass
            self.runtime.close()
        if self._channel is not None:
            self._channel.close()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        subprocess.run(["umount", "-l", self.imagefs], check=False)

    def log_tail(self, lines: int = 20) -> str:
        path = self.base / "containerd.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # --- images ----------------------------------------------------------------------------
    def import_image(self, tarball: Path) -> None:
        subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", "images", "import", tarball],
            check=True,
            capture_output=True,
        )

    def build_and_import(self, tag: str, *, padding: int = 0) -> str:
        """Import a fresh image that exits at once; returns its id."""
        name = tag.replace("/", "_").replace(":", "_") + ".tar"
        self.import_image(
            images.build_image(self.base / name, tag, program=images.EXIT_PROGRAM, padding=padding)
        )
        assert self.runtime is not None
        return next(i.id for i in self.runtime.list_images() if tag in i.repo_tags)

    # --- pods ------------------------------------------------------------------------------
    def _call(self, method: str, request: Message) -> bytes:
        assert self._channel is not None
        call: grpc.UnaryUnaryMultiCallable[Message, bytes] = self._channel.unary_unary(
            f"/runtime.v1.RuntimeService/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=None,
        )
        answer: bytes = call(request, timeout=30)
        return answer

    def _sandbox_config(self, name: str, uid: str) -> lc.PodSandboxConfig:
        directory = self.logs / uid
        directory.mkdir(exist_ok=True)
        return lc.PodSandboxConfig(
            metadata=lc.PodSandboxMetadata(name=name, uid=uid, namespace="default"),
            log_directory=str(directory),
            linux=lc.LinuxPodSandboxConfig(
                security_context=lc.LinuxSandboxSecurityContext(
                    namespace_options=lc.NamespaceOption(network=lc.NODE)
                )
            ),
        )

    def run_sandbox(self, name: str, uid: str) -> str:
        answer = self._call(
            "RunPodSandbox", lc.RunPodSandboxRequest(config=self._sandbox_config(name, uid))
        )
        return lc.RunPodSandboxResponse.FromString(answer).pod_sandbox_id

    def run_container(
        self, sandbox_id: str, pod: tuple[str, str], name: str, image: str, attempt: int = 0
    ) -> str:
        """Create and start a container of ``image`` (whose program exits at once) in the
        sandbox of ``pod`` (name, uid); returns its id once it has exited."""
        answer = self._call(
            "CreateContainer",
            lc.CreateContainerRequest(
                pod_sandbox_id=sandbox_id,
                config=lc.ContainerConfig(
                    metadata=lc.ContainerMetadata(name=name, attempt=attempt),
                    image=lc.ImageSpec(image=image),
                    log_path=f"{name}_{attempt}.log",
                ),
                sandbox_config=self._sandbox_config(*pod),
            ),
        )
        container_id = lc.CreateContainerResponse.FromString(answer).container_id
        self._call("StartContainer", lc.StartContainerRequest(container_id=container_id))
        assert self.runtime is not None
        runtime = self.runtime
        wait_for(
            lambda: any(
                c.id == container_id and c.state is ContainerState.EXITED
                for c in runtime.list_containers()
            ),
            what=f"container {name} to exit",
        )
        return container_id


def wait_for(condition: Callable[[], bool], *, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


MiB = 1 << 20
PINNED = ("nodeagent.test/pause", "nodeagent.test/keep:1")
"""``pinnedImages`` for the tests: containerd 1.6 reports no image as pinned (the CRI's
``pinned`` flag came with 1.7), so the sandbox image and one more are pinned by name."""


def start(imagefs: Path | None = None) -> Containerd:
    # A short base directory: the gRPC socket's path must fit a sockaddr_un.
    runtime = Containerd(Path(tempfile.mkdtemp(prefix="cri-", dir="/tmp")), imagefs=imagefs)
    try:
        runtime.start()
    except BaseException:
        runtime.stop()
        raise
    return runtime


def stop(runtime: Containerd) -> None:
    runtime.stop()
    shutil.rmtree(runtime.base, ignore_errors=True)


def free_bytes(path: Path) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


def run_app_three_times(runtime: Containerd, image: str) -> list[str]:
    """Pod p1's container ``app`` exited three times (attempts 0, 1, 2)."""
    sandbox = runtime.run_sandbox("p1", "uid-p1")
    return [
        runtime.run_container(sandbox, ("p1", "uid-p1"), "app", image, attempt=attempt)
        for attempt in range(3)
    ]
