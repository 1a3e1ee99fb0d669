"""What the end-to-end tests run: a real tmpfs as nodefs, the fake API server, a stand-in
for the kubelet's cleanup, and the whole agent in a thread of the test process.

The agent is built exactly as ``nodeagent run`` builds it (:meth:`Agent.build` from a
configuration with a kubeconfig), so it talks to the fake API server through the real
``kubernetes`` client over HTTP; only the metrics port is chosen by the kernel.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.agent.config import NodeAgentConfiguration, load_config
from nodeagent.agent.runtime import Agent
from tests.doubles import kube as fake
from tests.fakeapi import fixtures, objects
from tests.processes import LoggedProcess, logged_process
from tests.waiting import eventually

NODE = "node-e2e"
MIB = 1 << 20


def write_kubeconfig(path: Path, server: str) -> Path:
    return fixtures.write_kubeconfig(path, server, token="e2e")


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size_mib: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "nodeagent-e2e", str(path)],
        check=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@dataclass
class Node:
    """The node's disk as the kubelet lays it out, on a tmpfs."""

    root: Path

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def logs_dir(self) -> Path:
        return self.root / "pods-logs"

    def empty_dir(self, uid: str) -> Path:
        return self.kubelet_dir / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "data"

    def write(self, directory: Path, name: str, size: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        chunk = b"\xa5" * MIB
        with open(directory / name, "wb") as file:
            for _ in range(size // MIB):
                file.write(chunk)
            file.write(chunk[: size % MIB])
            file.flush()
            os.fsync(file.fileno())

    def logs(self, namespace: str, name: str, uid: str) -> Path:
        return self.logs_dir / f"{namespace}_{name}_{uid}"

    def remove_pod(self, namespace: str, name: str, uid: str) -> None:
        shutil.rmtree(self.kubelet_dir / "pods" / uid, ignore_errors=True)
        shutil.rmtree(self.logs(namespace, name, uid), ignore_errors=True)


@dataclass
class FakeKubelet:
    """Frees a terminating pod's disk ``cleanup_after`` seconds after its deletion
    started, before the API forgets the pod (as the kubelet reclaims volumes before it
    lets the API server delete the object)."""

    cluster: fake.FakeCluster
    node: Node
    cleanup_after: float = 0.5
    cleaned: dict[str, float] = field(default_factory=dict)
    """Pod name to the monotonic time its disk was freed."""
    _seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            now = time.monotonic()
            for pod in self.cluster.list("pods").items:
                meta = pod["metadata"]
                if not meta.get("deletionTimestamp") or meta["name"] in self.cleaned:
                    continue
                first = self._seen.setdefault(meta["name"], now)
                if now - first >= self.cleanup_after:
                    self.node.remove_pod(meta["namespace"], meta["name"], meta["uid"])
                    self.cleaned[meta["name"]] = time.monotonic()


def e2e_config(nodefs: Node, kubeconfig: Path, **overrides: Any) -> NodeAgentConfiguration:
    fields: dict[str, Any] = {
        "node_name": NODE,
        "kubeconfig": str(kubeconfig),
        "nodefs_path": str(nodefs.root),
        "imagefs_path": str(nodefs.root),
        "kubelet_root_dir": str(nodefs.kubelet_dir),
        "pod_logs_path": str(nodefs.logs_dir),
        "eviction_hard": {"nodefs.available": "8Mi"},
        "eviction_pressure_transition_period": "2s",
        "pod_storage_scan_interval": 0.2,
        "poll_interval": 0.5,
        "filesystem_poll_interval": 0.1,
        "psi_triggers": [],
        "kernel_memcg_notification": False,
        "metrics_address": "127.0.0.1:0",
        "kube_api_retries": 2,
        "kube_api_timeout": 2.0,
    }
    fields.update(overrides)
    return load_config(overrides=fields, environ={})


class RunningAgent:
    """An agent running in a thread: ``with RunningAgent(config) as agent: ...``."""

    def __init__(self, config: NodeAgentConfiguration) -> None:
        self.agent = Agent.build(config)
        self._thread = threading.Thread(target=self.agent.run, name="agent-loop", daemon=True)

    def __enter__(self) -> Agent:
        self.agent.start()
        self._thread.start()
        return self.agent

    def __exit__(self, *exc_info: object) -> None:
        self.agent.request_stop()
        self._thread.join(5)
        assert not self._thread.is_alive(), "the loop did not stop"
        self.agent.close()


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    """:func:`tests.waiting.eventually`, with the argument order the e2e tests use."""
    return eventually(condition, timeout, what)


def seed_pods(cluster: fake.FakeCluster, node: Node) -> dict[str, dict[str, Any]]:
    """The node's pods: a BestEffort pod filling an emptyDir, a web pod with some logs,
    a critical pod and a DaemonSet pod with bigger logs than the web pod (never evicted)."""
    specs = {
        "hog": objects.pod("hog", node_name=NODE),
        "web": objects.pod(
            "web", node_name=NODE, requests={"memory": "64Mi"}, limits={"memory": "64Mi"}
        ),
        "critical": objects.pod(
            "critical", namespace="kube-system", node_name=NODE, priority=2_000_001_000
        ),
        "logs-agent": objects.pod("logs-agent", node_name=NODE, owner_kind="DaemonSet"),
    }
    created = {name: cluster.create("pods", spec) for name, spec in specs.items()}
    uid = {name: obj["metadata"]["uid"] for name, obj in created.items()}
    node.write(node.empty_dir(uid["hog"]), "seed", 1 * MIB)
    node.write(node.logs("default", "web", uid["web"]), "0.log", 256 * 1024)
    node.write(node.logs("default", "logs-agent", uid["logs-agent"]), "0.log", 2 * MIB)
    return created


def condition_status(cluster: fake.FakeCluster, kind: str) -> str | None:
    node = cluster.get("nodes", "", NODE)
    for condition in node.get("status", {}).get("conditions", []):
        if condition["type"] == kind:
            return str(condition["status"])
    return None


def own_taints(cluster: fake.FakeCluster) -> list[tuple[str, str]]:
    node = cluster.get("nodes", "", NODE)
    return [
        (t["key"], t["effect"])
        for t in node.get("spec", {}).get("taints", [])
        if t["key"].startswith("nodeagent.io/")
    ]


def accepted_evictions(cluster: fake.FakeCluster) -> list[tuple[str, int | None]]:
    return [(e.name, e.grace_period_seconds) for e in cluster.evictions if e.outcome == 201]


# --- nodeagent run as a process ---------------------------------------------------------


@contextlib.contextmanager
def agent_process(args: list[str]) -> Iterator[LoggedProcess]:
    """``nodeagent run`` with JSON logs."""
    with logged_process(["run", "--log-format", "json", *args]) as process:
        yield process
