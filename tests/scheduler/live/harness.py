"""Building blocks for live-scheduler tests: objects, a scheduler wired to the fake API
server over HTTP (the real ``kubernetes`` client, real clock), and waiting."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

from nodeagent.kube import http, retry
from nodeagent.scheduler import config, framework, registry
from nodeagent.scheduler.live import settings as live_settings
from nodeagent.scheduler.live.leader import LeaderElectionSettings
from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.fakeapi.fixtures import configuration, write_kubeconfig
from tests.fakeapi.server import FakeAPIServer

PROFILE = live_settings.DEFAULT_PROFILE
FAST_RETRY = retry.RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.05)


def node(
    name: str,
    *,
    cpu: str = "2",
    memory: str = "4Gi",
    pods: str = "110",
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    *,
    cpu: str = "100m",
    scheduler: str = PROFILE,
    priority: int | None = None,
    node_name: str = "",
    gates: list[str] | None = None,
    labels: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    if tolerations:
        spec["tolerations"] = tolerations
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": str(uuid.uuid4()),
            "labels": labels or {},
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def connect(api: FakeAPIServer, *, retry_policy: retry.RetryPolicy = FAST_RETRY) -> Any:
    return http.HTTPKubeClient.connect(
        configuration(api.url),
        qps=5000.0,
        burst=5000,
        retry_policy=retry_policy,
        timeout=(2.0, 5.0),
        pool_size=24,
    )


def settings(
    *,
    leader_elect: bool = False,
    lease: LeaderElectionSettings | None = None,
    initial_backoff: float = 0.2,
    max_backoff: float = 1.0,
    bind_workers: int = 4,
    feature_gates: str = "",
) -> live_settings.LiveSettings:
    base = live_settings.load(None, registry.in_tree_registry())
    election = lease or dataclasses.replace(base.leader_election, leader_elect=leader_elect)
    return dataclasses.replace(
        base,
        leader_election=election,
        initial_backoff=initial_backoff,
        max_backoff=max_backoff,
        bind_workers=bind_workers,
        features=config.parse_feature_gates(feature_gates),
    )


def start(
    api: FakeAPIServer,
    *,
    live: live_settings.LiveSettings | None = None,
    identity: str | None = None,
    plugins: framework.Registry | None = None,
    retry_policy: retry.RetryPolicy = FAST_RETRY,
    bind_process_kubeconfig: Path | None = None,
) -> LiveScheduler:
    """A running scheduler; with ``bind_process_kubeconfig`` (a path to write it to) it
    binds from a binding process connected by that kubeconfig, as the command does."""
    bind_target = None
    if bind_process_kubeconfig is not None:
        bind_target = http.ConnectionSpec(
            write_kubeconfig(bind_process_kubeconfig, api.url),
            qps=5000.0,
            burst=5000,
            retry_policy=retry_policy,
            timeout=(2.0, 5.0),
        )
    scheduler = LiveScheduler(
        connect(api, retry_policy=retry_policy),
        live or settings(),
        identity=identity,
        plugins=plugins,
        seed=1,
        watch_timeout=30,
        bind_target=bind_target,
    )
    assert scheduler.start(sync_timeout=10)
    return scheduler


def node_of(api: FakeAPIServer, name: str) -> str:
    return str(api.cluster.get("pods", "default", name)["spec"].get("nodeName") or "")


def condition(api: FakeAPIServer, name: str) -> dict[str, Any] | None:
    status = api.cluster.get("pods", "default", name).get("status") or {}
    for c in status.get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


def events_for(api: FakeAPIServer, name: str, reason: str) -> list[dict[str, Any]]:
    listed = api.cluster.list("events")
    return [
        e for e in listed.items if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]
