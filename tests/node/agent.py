"""``nodeagent run`` beside the real kubelet, as a host process (the bare-metal mode of
systemd/nodeagent.service): this tree's code, the node's own paths, the shipped RBAC
(manifests/, applied with ``kubectl apply --server-side``) and its node-confinement
policy.

The policy lets the agent's ServiceAccount change only the Node its token is bound to,
so the agent's credentials are what the kubelet would mount into the DaemonSet's pod: a
token bound to a pod of the agent's ServiceAccount on this node (:func:`identity`).
That pod (``nodeagent-anchor``) runs the pause program from the node's own image,
``system-node-critical`` as the DaemonSet's, so never an eviction candidate.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.controlplane import objects as o
from tests.controlplane.cluster import ControlPlane, free_port
from tests.node import images, pods
from tests.node.node import Node, Process

REPO = Path(__file__).resolve().parents[2]
ANCHOR = "nodeagent-anchor"
AGENT_NAMESPACE = "nodeagent-system"
AGENT_ACCOUNT = "nodeagent"
AGENT_USER = f"system:serviceaccount:{AGENT_NAMESPACE}:{AGENT_ACCOUNT}"
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")


def identity(node: Node) -> Path:
    """Apply the shipped manifests (once), run the anchor pod on ``node``, and return a
    kubeconfig holding a token bound to it."""
    plane = node.plane
    status, _ = plane.admin.request("GET", f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{ANCHOR}")
    if status != 200:
        plane.apply(o.kustomize(o.MANIFESTS))
        anchor = pods.workload(ANCHOR, AGENT_NAMESPACE, ["pause"], node=node.name, grace=1)
        anchor["spec"].update(
            {
                "serviceAccountName": AGENT_ACCOUNT,
                "automountServiceAccountToken": False,
                "priorityClassName": "system-node-critical",
                "tolerations": [{"operator": "Exists"}],
            }
        )
        anchor["metadata"]["labels"] = {"app.kubernetes.io/name": "nodeagent-anchor"}
        pods.create(plane, anchor)
        pods.wait_running(plane, AGENT_NAMESPACE, ANCHOR)
    token = plane.service_account_token(AGENT_NAMESPACE, AGENT_ACCOUNT, create=False, pod=ANCHOR)
    return plane.write_kubeconfig(f"agent-{node.name}", token=token)


@dataclass
class RunningAgent:
    process: Process
    metrics_port: int

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """The agent's /metrics as {sample name: [(labels, value)]}."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as r:
            text = r.read().decode()
        found: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return found

    def sample(self, name: str, **labels: str) -> float | None:
        """The sum of the samples ``name`` whose labels include ``labels`` (None: none)."""
        values = [
            value
            for have, value in self.metrics().get(name, ())
            if all(have.get(k) == v for k, v in labels.items())
        ]
        return sum(values) if values else None

    def refused(self) -> list[dict[str, str]]:
        """API requests answered 401, 403 or 422 (the RBAC or the policy said no)."""
        return [
            labels
            for labels, value in self.metrics().get("nodeagent_api_requests_total", ())
            if labels.get("code") in {"401", "403", "422"} and value
        ]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def wait_ready(agent: RunningAgent, timeout: float = 60) -> None:
    """Wait until the agent's /readyz answers 200 (its first cycle done, its pods
    listed)."""
    deadline = time.monotonic() + timeout
    while not agent.ready():
        if not agent.process.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the agent is not ready:\n{agent.process.tail()}")
        time.sleep(0.1)


def node_flags(node: Node) -> list[str]:
    """The agent's paths on this node: the kubelet's cgroup root as the node cgroup (the
    kubepods cgroup under it), the two tmpfs filesystems, the runtime's socket."""
    return [
        "--host-root=/",
        f"--node-name={node.name}",
        f"--node-cgroup={node.cgroup_root}",
        f"--nodefs-path={node.nodefs}",
        f"--imagefs-path={node.containerd_root}",
        f"--kubelet-root-dir={node.kubelet_root}",
        f"--pod-logs-path={node.pod_logs}",
        f"--container-runtime-endpoint={node.endpoint}",
        f"--pinned-images={images.PAUSE}",
    ]


@contextlib.contextmanager
def running(
    node: Node, arguments: Sequence[str] = (), *, name: str = "agent"
) -> Iterator[RunningAgent]:
    """``nodeagent run`` for ``node`` with ``arguments`` on top of :func:`node_flags`,
    its metrics on loopback (plain HTTP: nothing but the test reaches it)."""
    kubeconfig = identity(node)
    port = free_port()
    log = node.logs / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KUBERNETES_SERVICE_HOST": ""}
    with log.open("ab") as out:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodeagent",
                "run",
                f"--kubeconfig={kubeconfig}",
                *node_flags(node),
                f"--metrics-address=127.0.0.1:{port}",
                "--metrics-auth=none",
                "--log-format=json",
                *arguments,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    agent = RunningAgent(Process(name, popen, log), port)
    try:
        yield agent
    finally:
        agent.process.stop()
        clear_agent_state(node)


def clear_agent_state(node: Node) -> None:
    """Take the agent's conditions, taints and annotation off the Node, as an operator
    removing the agent would: a stopped agent leaves them as they were (a restart adopts
    them), and the next test's schedulers would honour them."""
    plane = node.plane
    for _ in range(20):  # the kubelet updates the same object: retry on a conflict
        current = plane.admin.get(f"/api/v1/nodes/{node.name}")
        spec, meta = current["spec"], current["metadata"]
        spec["taints"] = [
            t for t in spec.get("taints") or () if not t["key"].startswith("nodeagent.io/")
        ] or None
        (meta.get("annotations") or {}).pop("nodeagent.io/pressure", None)
        status, _ = plane.admin.request("PUT", f"/api/v1/nodes/{node.name}", current)
        if status == 409:
            continue
        current = plane.admin.get(f"/api/v1/nodes/{node.name}")
        current["status"]["conditions"] = [
            c
            for c in current["status"].get("conditions") or ()
            if not c["type"].startswith("NodeAgent")
        ]
        status, _ = plane.admin.request("PUT", f"/api/v1/nodes/{node.name}/status", current)
        if status != 409:
            return
    raise RuntimeError(f"could not clear the agent's state from node {node.name}")


def agent_fields(plane: ControlPlane, node: str) -> dict[str, set[str]]:
    """Per field manager, the node condition types it owns (the apiserver's
    managedFields): who wrote which condition, as the apiserver recorded it."""
    found: dict[str, set[str]] = {}
    for entry in plane.admin.get(f"/api/v1/nodes/{node}")["metadata"].get("managedFields") or ():
        conditions = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:conditions") or {}
        for key in conditions:
            if key.startswith("k:"):
                kind = json.loads(key[2:]).get("type")
                if kind:
                    found.setdefault(str(entry.get("manager")), set()).add(kind)
    return found
