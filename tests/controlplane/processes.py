"""Schedulers as the processes operators run, against a :class:`ControlPlane`:
``nodeagent scheduler`` / ``nodeagent extender`` (this tree's code, ``python -m nodeagent``)
and the real ``kube-scheduler``. Each is stopped by PID; its log file is kept for the
failure message."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane.cluster import ControlPlane, free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, number)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                return self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
        return self.popen.wait(timeout=10)


def spawn(
    name: str, argv: Sequence[str], log: Path, *, port: int = 0, python_path: Path = REPO
) -> Process:
    """``python_path``: where ``nodeagent`` is imported from (also the working
    directory, which ``python -m`` puts first on the path)."""
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "", "PYTHONPATH": str(python_path)}
    with log.open("wb") as out:
        popen = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=python_path,
        )
    return Process(name, popen, log, port)


def nodeagent(
    plane: ControlPlane,
    name: str,
    arguments: Sequence[str],
    *,
    port: int | None = None,
    python_path: Path = REPO,
) -> Process:
    """``python -m nodeagent ARGUMENTS`` from this tree (or the copy of its package at
    ``python_path``), logging to the plane's logs."""
    return spawn(
        name,
        [sys.executable, "-m", "nodeagent", *arguments],
        plane.logs / f"{name}.log",
        port=port or 0,
        python_path=python_path,
    )


def nodeagent_scheduler(
    plane: ControlPlane,
    name: str,
    *,
    kubeconfig: Path,
    config: Path,
    extra: Sequence[str] = (),
    python_path: Path = REPO,
) -> Process:
    port = free_port()
    return nodeagent(
        plane,
        name,
        [
            "scheduler",
            f"--kubeconfig={kubeconfig}",
            f"--config={config}",
            f"--metrics-address=127.0.0.1:{port}",
            "--log-format=json",
            *extra,
        ],
        port=port,
        python_path=python_path,
    )


def kube_scheduler(
    plane: ControlPlane, name: str, configuration: dict[str, Any], *, verbosity: int = 1
) -> Process:
    """The real kube-scheduler with ``configuration`` (a KubeSchedulerConfiguration whose
    clientConnection.kubeconfig defaults to the plane's kube-scheduler identity)."""
    document = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        **configuration,
    }
    document.setdefault("clientConnection", {}).setdefault(
        "kubeconfig", str(plane.scheduler_kubeconfig)
    )
    path = plane.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    port = free_port()
    return spawn(
        name,
        [
            str(plane.binaries / "kube-scheduler"),
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={plane.root / name}",
            f"--authentication-kubeconfig={plane.scheduler_kubeconfig}",
            f"--authorization-kubeconfig={plane.scheduler_kubeconfig}",
            f"--v={verbosity}",
        ],
        plane.logs / f"{name}.log",
        port=port,
    )


@contextlib.contextmanager
def stopped_after(*processes: Process) -> Iterator[tuple[Process, ...]]:
    try:
        yield processes
    finally:
        for process in processes:
            process.stop()
