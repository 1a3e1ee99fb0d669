"""A real Kubernetes node on this machine for the ``node`` tests and the real-kubelet OOM
race: the kubelet built by tests/controlplane/build.sh (the pinned k8s.io/kubernetes),
Debian's containerd and runc, a CNI bridge from Debian's containernetworking-plugins, and
the images of :mod:`tests.node.images`, registered with a :class:`ControlPlane`.

Everything is the node's own: containerd runs with its own configuration, root, state and
socket (never the machine's); its root (the image filesystem) and the kubelet's root dir
with the pod logs (the node filesystem) are tmpfs mounts of a stated size, so disk
pressure is a few MiB away; the pods' bridge (``nabr*``, 10.244.N.0/24) carries nothing
routed off the machine (no masquerade, no default route out of it); the kubelet's cgroups
live under a cgroup root of the node's own (``/nodeagent-node-<pid>`` in every v1
hierarchy), so :meth:`Node.stop` removes all of it.

Node allocatable is enforced (``enforceNodeAllocatable: [pods]``) and ``kubeReserved`` +
``systemReserved`` leave the pods ``allocatable_memory``: the kubepods cgroup's memory
limit, the memory the OOM race ramps toward. This machine's host is cgroup v1, which the
kubelet refuses since v1.35 unless ``failCgroupV1: false``; PID 1 is not systemd, so both
the kubelet and containerd use the ``cgroupfs`` driver.

The kubelet sets kernel parameters as it does on any node (``vm.overcommit_memory=1``,
``vm.panic_on_oom=0``, ``kernel.panic=10``, ``kernel.panic_on_oops=1``); their values
before it started are restored at :meth:`Node.stop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import urllib3
import yaml
from google.protobuf.message import Message

from nodeagent.cri.client import GrpcRuntime
from tests.controlplane.cluster import ControlPlane, binaries_directory, free_port
from tests.cri import lifecycle_pb2 as lc
from tests.cri.containerd import write_config
from tests.node import images

MIB = 1 << 20
GIB = 1 << 30
CGROUP = Path("/sys/fs/cgroup")
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops")
"""What the kubelet's container manager sets (``setupKernelTunables``): restored after."""
READY_TIMEOUT = 180.0
WORKLOAD_CACHE = Path.home() / ".cache" / "nodeagent" / "node-images"


def unavailable() -> str | None:
    """Why this machine cannot run the node, in one line; None when it can."""
    if os.geteuid() != 0:
        return "a kubelet needs root (cgroups, mounts, a bridge)"
    if os.uname().machine != "x86_64":
        return "the node's images are built for x86-64"
    for tool in ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install containerd runc iproute2)"
    for plugin in ("bridge", "host-local", "loopback"):
        if not os.access(f"/usr/lib/cni/{plugin}", os.X_OK):
            return f"no CNI plugin {plugin} (apt-get install containernetworking-plugins)"
    if not (CGROUP / "memory" / "memory.limit_in_bytes").exists():
        return (
            "the node is written for a cgroup v1 host (memory hierarchy at /sys/fs/cgroup/memory)"
        )
    missing = images.compiler_missing()
    if missing:
        return missing
    if not os.access(binaries_directory() / "kubelet", os.X_OK):
        return f"no kubelet in {binaries_directory()}: run tests/controlplane/build.sh"
    return None


def hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (``cpu``, ``memory``, ``name=systemd`` ...)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mountpoint, kind, *_ = line.split()
        if kind == "cgroup" and mountpoint.startswith(str(CGROUP)):
            found.append(Path(mountpoint))
    return found


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout: float = 20.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
                return
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)


def spawn(name: str, argv: list[str], log: Path) -> Process:
    with log.open("ab") as out:
        popen = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Process(name, popen, log)


@dataclass
class BringUp:
    """How long each part of :meth:`Node.start` took, in seconds."""

    containerd: float = 0.0
    images: float = 0.0
    kubelet: float = 0.0
    """The kubelet's start to the node's Ready condition."""

    @property
    def total(self) -> float:
        return self.containerd + self.images + self.kubelet

    def __str__(self) -> str:
        return (
            f"{self.total:.1f} s (containerd {self.containerd:.1f} s, images"
            f" {self.images:.1f} s, kubelet to Ready {self.kubelet:.1f} s)"
        )


@dataclass
class Node:
    """One kubelet node under ``base``; :meth:`start`, then :meth:`stop` (also on failure)."""

    plane: ControlPlane
    base: Path
    name: str = "node-1"
    allocatable_memory: int = 2 * GIB
    """The kubepods cgroup's memory limit: capacity - kubeReserved - systemReserved."""
    nodefs_mib: int = 256
    imagefs_mib: int = 256
    eviction_hard: Mapping[str, str] = field(
        default_factory=lambda: {
            "memory.available": "100Mi",
            "nodefs.available": "10%",
            "nodefs.inodesFree": "5%",
            "imagefs.available": "15%",
        }
    )
    kubelet_extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields merged over the KubeletConfiguration written at start."""
    times: BringUp = field(default_factory=BringUp)

    def __post_init__(self) -> None:
        self.index = os.getpid() % 200 + 20
        self.bridge = f"nabr{self.index}"
        self.subnet = f"10.244.{self.index}"
        self.ip = f"{self.subnet}.1"
        self.cgroup_root = f"/nodeagent-node-{os.getpid()}"
        self.nodefs = self.base / "nodefs"
        self.imagefs = self.base / "imagefs"
        self.kubelet_root = self.nodefs / "kubelet"
        self.pod_logs = self.nodefs / "pods"
        self.containerd_root = self.imagefs / "containerd"
        self.state = self.base / "containerd-state"
        self.socket = self.base / "containerd.sock"
        self.endpoint = f"unix://{self.socket}"
        self.cni = self.base / "net.d"
        self.logs = self.base / "logs"
        self.port = free_port()
        self.containerd: Process | None = None
        self.kubelet: Process | None = None
        self._mounted: list[Path] = []
        self._sysctls: dict[str, str] = {}
        self._summary_pool: urllib3.PoolManager | None = None
        self.kubelet_restarts = 0

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for path in SYSCTLS:
            self._sysctls[path] = (Path("/proc/sys") / path).read_text().strip()
        for mount, mib in ((self.nodefs, self.nodefs_mib), (self.imagefs, self.imagefs_mib)):
            mount.mkdir(parents=True)
            # a source of its own: cAdvisor tells filesystems apart by device or mountpoint
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={mib}m", f"nodeagent-{mount.name}", mount],
                check=True,
            )
            self._mounted.append(mount)
        for directory in (self.kubelet_root, self.pod_logs, self.containerd_root, self.cni):
            directory.mkdir(parents=True, exist_ok=True)
        self._make_cgroup_root()
        self._make_bridge()
        started = time.monotonic()
        self._start_containerd()
        self.times.containerd = time.monotonic() - started
        started = time.monotonic()
        for tarball in images.node_images(self.base, WORKLOAD_CACHE):
            self.ctr("images", "import", str(tarball))
        self.times.images = time.monotonic() - started
        self._write_kubelet_files()
        started = time.monotonic()
        self.start_kubelet()
        self.wait_ready(newer_than=self.condition("Ready").get("lastHeartbeatTime"))
        self.times.kubelet = time.monotonic() - started

    def stop(self) -> None:
        """Stop the kubelet, then every pod's containers and containerd; remove the
        cgroups, the bridge and the mounts; restore the kernel parameters."""
        if self.kubelet is not None:
            self.kubelet.stop()
            # the machine is gone: a node made again under this name registers afresh
            with contextlib.suppress(Exception):
                self.plane.admin.request("DELETE", f"/api/v1/nodes/{self.name}")
        if self.containerd is not None and self.containerd.alive():
            # through the CRI, as the kubelet would: containers stopped, each sandbox's
            # network namespace (under /run/netns) and veth released
            with contextlib.suppress(Exception):
                self._remove_sandboxes()
            self.containerd.stop()
        self._kill_cgroup_tree()
        subprocess.run(["ip", "link", "del", self.bridge], check=False, capture_output=True)
        # containers' overlays, sandboxes' shm, the kubelet's volumes: all under base
        for inner in reversed(_mounts_under(self.base)):
            subprocess.run(["umount", "-l", inner], check=False, capture_output=True)
        self._mounted.clear()
        for path, value in self._sysctls.items():
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / path).write_text(value)
        if self._summary_pool is not None:
            self._summary_pool.clear()

    # --- containerd ------------------------------------------------------------------------
    def _start_containerd(self) -> None:
        config = write_config(
            self.base / "containerd.toml",
            root=self.containerd_root,
            state=self.state,
            socket=self.socket,
            opt=self.base / "opt",
            sandbox_image=images.PAUSE,
            cni_bin=Path("/usr/lib/cni"),
            cni_conf=self.cni,
            restrict_oom_score_adj=not _can_lower_oom_score_adj(),
        )
        self.containerd = spawn(
            "containerd",
            ["containerd", "--config", str(config)],
            self.logs / "containerd.log",
        )
        deadline = time.monotonic() + 30
        while self.ctr("version", check=False, timeout=5).strip() == "":
            if not self.containerd.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start:\n{self.containerd.tail()}")
            time.sleep(0.05)

    def _remove_sandboxes(self) -> None:
        runtime = GrpcRuntime(self.endpoint, timeout=30.0)
        channel = grpc.insecure_channel(self.endpoint)
        try:
            for sandbox in runtime.list_sandboxes():
                requests: tuple[tuple[str, Message], ...] = (
                    ("StopPodSandbox", lc.StopPodSandboxRequest(pod_sandbox_id=sandbox.id)),
                    ("RemovePodSandbox", lc.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id)),
                )
                for method, request in requests:
                    call: grpc.UnaryUnaryMultiCallable[Message, bytes] = channel.unary_unary(
                        f"/runtime.v1.RuntimeService/{method}",
                        request_serializer=type(request).SerializeToString,
                        response_deserializer=None,
                    )
                    call(request, timeout=30)
        finally:
            channel.close()
            runtime.close()

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        done = subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout if done.returncode == 0 else ""

    # --- network ---------------------------------------------------------------------------
    def _make_bridge(self) -> None:
        """The pods' bridge, made before the kubelet so that the node has its address
        (the bridge plugin adopts an existing bridge and its gateway address)."""
        subprocess.run(["ip", "link", "del", self.bridge], check=False, capture_output=True)
        for command in (
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.ip}/24", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ):
            subprocess.run(command, check=True)
        (self.cni / "10-nodeagent.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "nodeagent-test",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": self.bridge,
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": f"{self.subnet}.0/24"}]],
                                "dataDir": str(self.base / "ipam"),
                            },
                        },
                        {"type": "loopback"},
                    ],
                },
                indent=1,
            )
        )

    # --- cgroups ---------------------------------------------------------------------------
    def _make_cgroup_root(self) -> None:
        for hierarchy in hierarchies():
            directory = hierarchy / self.cgroup_root.lstrip("/")
            directory.mkdir(exist_ok=True)
            if (hierarchy / "cpuset.cpus").exists():
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (directory / name).write_text((hierarchy / name).read_text())

    def memory_cgroup(self, relative: str = "") -> Path:
        """The node's memory cgroup directory (``relative`` below its root)."""
        return CGROUP / "memory" / self.cgroup_root.lstrip("/") / relative.lstrip("/")

    @property
    def kubepods(self) -> Path:
        return self.memory_cgroup("kubepods")

    def _kill_cgroup_tree(self) -> None:
        for hierarchy in hierarchies():
            top = hierarchy / self.cgroup_root.lstrip("/")
            if not top.exists():
                continue
            for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
                for _ in range(100):
                    try:
                        for pid in Path(directory, "cgroup.procs").read_text().split():
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(int(pid), signal.SIGKILL)
                        os.rmdir(directory)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.02)

    # --- the kubelet -----------------------------------------------------------------------
    def _write_kubelet_files(self) -> None:
        plane = self.plane
        self.kubeconfig = plane.node_kubeconfig(self.name)
        self.serving = plane.ca.issue(
            f"kubelet-{self.name}", f"system:node:{self.name}", hosts=(self.ip, self.name)
        )
        capacity = _mem_total()
        kube_reserved = 256 * MIB
        system_reserved = capacity - self.allocatable_memory - kube_reserved
        if system_reserved < 0:
            raise RuntimeError(
                f"the machine has {capacity} bytes, less than {self.allocatable_memory} to allocate"
            )
        configuration: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "kubeReserved": {"memory": str(kube_reserved), "cpu": "100m"},
            "systemReserved": {"memory": str(system_reserved)},
            "evictionHard": dict(self.eviction_hard),
            "containerRuntimeEndpoint": self.endpoint,
            "address": self.ip,
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "tlsCertFile": str(self.serving.certificate),
            "tlsPrivateKeyFile": str(self.serving.key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(plane.ca.certificate)},
            },
            "authorization": {"mode": "Webhook"},
            "podLogsDir": str(self.pod_logs),
            "failSwapOn": False,
            "resolvConf": "/etc/resolv.conf",
            # the kubelet's status every few seconds (default: a patch only on a change
            # or every 5 minutes, the Lease every 10 s): the coexistence test sees many
            "nodeStatusUpdateFrequency": "2s",
            "nodeStatusReportFrequency": "4s",
            # emptyDir usage measured every 10 s (default 1m: the Summary API, and the
            # kubelet's own local-storage eviction, see a filled emptyDir a minute late)
            "volumeStatsAggPeriod": "10s",
            "serializeImagePulls": False,
            "registerNode": True,
            "maxPods": 30,
        }
        configuration.update(self.kubelet_extra)
        self.kubelet_config = self.base / "kubelet.yaml"
        self.kubelet_config.write_text(yaml.safe_dump(configuration))

    def start_kubelet(self) -> None:
        self.kubelet = spawn(
            "kubelet",
            [
                str(binaries_directory() / "kubelet"),
                f"--config={self.kubelet_config}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={self.base / 'kubelet-pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                "--v=2",
            ],
            self.logs / "kubelet.log",
        )

    def restart_kubelet(self, *, wait: bool = False) -> None:
        """SIGTERM the kubelet and start it again (its pods keep running); with
        ``wait``, until the new one has posted the node's status."""
        assert self.kubelet is not None
        beat = self.condition("Ready").get("lastHeartbeatTime")
        self.kubelet.stop()
        self.kubelet_restarts += 1
        self.start_kubelet()
        if wait:
            self.wait_ready(newer_than=beat)

    @contextlib.contextmanager
    def reconfigured(self, **fields: Any) -> Iterator[None]:
        """The kubelet restarted with ``fields`` over its configuration (a node's
        operator editing the KubeletConfiguration), and restarted as it was after."""
        saved = self.kubelet_config.read_text()
        configuration = yaml.safe_load(saved)
        configuration.update(fields)
        self.kubelet_config.write_text(yaml.safe_dump(configuration))
        try:
            self.restart_kubelet(wait=True)
            yield
        finally:
            self.kubelet_config.write_text(saved)
            self.restart_kubelet(wait=True)

    def condition(self, kind: str) -> dict[str, Any]:
        """The Node's condition ``kind`` as the API has it (empty if there is none)."""
        status, node = self.plane.admin.request("GET", f"/api/v1/nodes/{self.name}")
        if status == 404:  # not registered (yet)
            return {}
        if status != 200:
            raise RuntimeError(f"GET node {self.name}: {status} {node}")
        for condition in node["status"].get("conditions") or ():
            if condition["type"] == kind:
                return dict(condition)
        return {}

    def wait_ready(self, timeout: float = READY_TIMEOUT, newer_than: str | None = None) -> None:
        """Wait for the node's Ready condition (posted after the heartbeat ``newer_than``
        when given: a restarted kubelet's own)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.kubelet is not None
            if not self.kubelet.alive():
                raise RuntimeError(f"the kubelet exited:\n{self.kubelet.tail()}")
            with contextlib.suppress(Exception):
                ready = self.condition("Ready")
                if ready.get("status") == "True" and (
                    newer_than is None or ready.get("lastHeartbeatTime") != newer_than
                ):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"node {self.name} not Ready in {timeout:.0f} s:\n" + self.kubelet.tail()
                )
            time.sleep(0.2)

    def wait_calm(self, timeout: float = 120) -> None:
        """Wait until the kubelet has posted (since this call) MemoryPressure and
        DiskPressure False and the node carries no pressure taint of the node lifecycle
        controller's: while they are there the kubelet's admission refuses pods and the
        schedulers place none. Each test starts on a calm node."""
        beat = self.condition("Ready").get("lastHeartbeatTime")
        deadline = time.monotonic() + timeout
        while True:
            node = self.plane.admin.get(f"/api/v1/nodes/{self.name}")
            statuses = {c["type"]: c for c in node["status"].get("conditions") or ()}
            taints = [t["key"] for t in node["spec"].get("taints") or ()]
            if (
                statuses.get("Ready", {}).get("lastHeartbeatTime") != beat
                and all(
                    statuses.get(kind, {}).get("status") == "False"
                    for kind in ("MemoryPressure", "DiskPressure")
                )
                and not any(key.startswith("node.kubernetes.io/") for key in taints)
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {self.name} not calm in {timeout:.0f} s: {statuses}")
            time.sleep(0.2)

    # --- the kubelet's Summary API ---------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """``/stats/summary`` from the kubelet itself, as the admin (x509, authorized by
        the kubelet through a SubjectAccessReview)."""
        if self._summary_pool is None:
            self._summary_pool = urllib3.PoolManager(
                cert_reqs="CERT_REQUIRED",
                ca_certs=str(self.plane.ca.certificate),
                cert_file=str(self.plane.admin_credentials.certificate),
                key_file=str(self.plane.admin_credentials.key),
                timeout=urllib3.Timeout(connect=5.0, read=30.0),
                retries=False,
            )
        response = self._summary_pool.request("GET", f"https://{self.ip}:{self.port}/stats/summary")
        if response.status != 200:
            raise RuntimeError(f"/stats/summary: {response.status} {response.data[:200]!r}")
        result: dict[str, Any] = json.loads(response.data)
        return result


def wait_pods_gone(node: Node, namespace: str, timeout: float = 90) -> None:
    """Wait until ``namespace`` has no pods left (the kubelet confirmed every deletion)."""
    deadline = time.monotonic() + timeout
    path = f"/api/v1/namespaces/{namespace}/pods"
    while node.plane.admin.get(path)["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of {namespace} still there after {timeout:.0f} s")
        time.sleep(0.2)


def _can_lower_oom_score_adj() -> bool:
    """Whether this process may set a negative ``oom_score_adj`` (CAP_SYS_RESOURCE)."""
    probe = subprocess.run(
        ["sh", "-c", "echo -998 > /proc/self/oom_score_adj"], capture_output=True, check=False
    )
    return probe.returncode == 0


def _mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def _mounts_under(top: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        mountpoint = line.split()[1].replace("\\040", " ")
        if mountpoint == str(top) or mountpoint.startswith(f"{top}/"):
            found.append(mountpoint)
    return sorted(found, key=len)


@contextlib.contextmanager
def running(plane: ControlPlane, base: Path, **kwargs: Any) -> Iterator[Node]:
    node = Node(plane, base, **kwargs)
    try:
        node.start()
        yield node
    finally:
        node.stop()
