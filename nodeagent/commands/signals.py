"""``nodeagent signals``: read every signal once and print it, with where it came from.

The operator's first command on a new node: it shows what the agent would see
(available, capacity, source of each signal, per-pod usage, PSI) and, for anything it
cannot see, exactly why, without needing Kubernetes.

``--output json`` prints one object::

    {"signals": {"memory.available": {"available": 123, "capacity": 456},
                 "nodefs.available": {"unavailable": "path /var/lib/kubelet does not exist"}, ...},
     "sources": {"memory.available": "cgroup v1 ...", ...},
     "pods": {"<uid>": {"qos": "Burstable", "cgroup": "/kubepods/burstable/pod<uid>",
                        "memory": 123, "processes": 4, "threads": 9, "rootfs": ..., ...}},
     "psi": {"memory": {"some": {"avg10": 0.0, "avg60": 0.0, "avg300": 0.0, "total": 0},
                        "full": {...}}, ...},
     "fsLayout": "single", "swap": null, "cgroups": {...}, "degraded": {...}}

Bytes everywhere in JSON; the table prints binary units for people.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from nodeagent.agent.config import add_config_flags, config_from_args
from nodeagent.cri.client import GrpcRuntime
from nodeagent.model import (
    SIGNAL_RESOURCE,
    NodeObservations,
    PodUsage,
    PsiLine,
    Resource,
    Signal,
    SignalValue,
    Unavailable,
)
from nodeagent.signals.collector import SignalCollector


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "signals",
        description="Read every eviction signal, PSI and per-pod usage once and print them "
        "with their sources. Needs no Kubernetes.",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=("table", "json"),
        default="table",
        help="table for people (default), json for tools",
    )
    add_config_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    # The report states every unavailable signal with its reason; the collector's
    # degradation warnings would say it twice on stderr.
    quiet = logging.getLogger("nodeagent.commands.signals")
    quiet.setLevel(logging.ERROR)
    # Without imagefsPath, imagefs is where the container runtime says (ImageFsInfo).
    runtime = GrpcRuntime(
        config.container_runtime_endpoint, timeout=config.container_runtime_request_timeout
    )
    with SignalCollector.from_settings(
        config, logger=quiet, image_fs_info=runtime.image_fs_info, active_file=True
    ) as collector:
        observations = collector.collect(time.monotonic())
        if args.output == "json":
            text = json.dumps(report(observations, collector), indent=2)
        else:
            text = render_table(observations, collector)
    runtime.close()
    print(text, flush=True)
    return 0


# --- JSON ------------------------------------------------------------------------------


def _psi_line(line: PsiLine) -> dict[str, float | int]:
    return {"avg10": line.avg10, "avg60": line.avg60, "avg300": line.avg300, "total": line.total}


def _pod(usage: PodUsage) -> dict[str, Any]:
    return {
        "memory": usage.memory,
        "activeFile": usage.active_file,
        "processes": usage.processes,
        "threads": usage.threads,
        "rootfs": usage.rootfs,
        "rootfsInodes": usage.rootfs_inodes,
        "logs": usage.logs,
        "logsInodes": usage.logs_inodes,
        "localVolumes": usage.local_volumes,
        "localVolumesInodes": usage.local_volumes_inodes,
        "containers": {
            name: {"rootfs": c.rootfs, "logs": c.logs} for name, c in usage.containers.items()
        },
        "volumes": dict(usage.volumes),
    }


def report(observations: NodeObservations, collector: SignalCollector) -> dict[str, Any]:
    """The JSON document for one collection."""
    signals: dict[str, dict[str, int | str]] = {}
    sources: dict[str, str] = {}
    for signal, observed in observations.signals.items():
        if isinstance(observed, Unavailable):
            signals[signal.value] = {"unavailable": observed.reason}
        else:
            signals[signal.value] = {"available": observed.available, "capacity": observed.capacity}
            if signal in observations.active_file:
                signals[signal.value]["activeFile"] = observations.active_file[signal]
            sources[signal.value] = observed.source
    pod_cgroups = collector.pod_cgroups
    pods: dict[str, dict[str, Any]] = {}
    for uid, usage in sorted(observations.pods.items()):
        cgroup = pod_cgroups.get(uid)
        pods[uid] = {
            "qos": None if cgroup is None else cgroup.qos.value,
            "cgroup": None if cgroup is None else cgroup.cgroup,
            **_pod(usage),
        }
    psi = {
        scope: {"some": _psi_line(stats.some)}
        | ({"full": _psi_line(stats.full)} if stats.full is not None else {})
        for scope, stats in observations.psi.items()
    }
    paths = collector.cgroups
    swap = observations.swap
    return {
        "signals": signals,
        "sources": sources | dict(collector.psi_sources),
        "pods": pods,
        "psi": psi,
        "fsLayout": observations.fs_layout.value,
        "swap": None if swap is None else {"available": swap.available, "capacity": swap.capacity},
        "cgroups": {
            "version": None if paths.version is None else paths.version.value,
            "driver": None if paths.driver is None else paths.driver.value,
            "nodeCgroup": paths.node_cgroup,
            "nodeMemoryDir": paths.node_memory_dir,
            "nodeUnifiedDir": paths.node_unified_dir,
            "kubepodsCgroup": paths.kubepods_cgroup,
            "kubepodsMemoryDir": paths.kubepods_memory_dir,
        },
        "degraded": dict(collector.degraded()),
    }


# --- table -----------------------------------------------------------------------------

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(amount: int | None) -> str:
    """``1536`` -> ``1.5KiB``; ``None`` -> ``-``."""
    if amount is None:
        return "-"
    value = float(amount)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{amount}B" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _format_amount(signal: Signal, amount: int) -> str:
    if SIGNAL_RESOURCE.get(signal) in (Resource.MEMORY, Resource.EPHEMERAL_STORAGE):
        return format_bytes(amount)
    return f"{amount:,}"


def _columns(rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Align ``rows`` (the first is the header); ``right`` are right-aligned columns;
    the last column is left unpadded."""
    aligned = set(right)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            if i == len(row) - 1:
                cells.append(cell)
            elif i in aligned:
                cells.append(cell.rjust(widths[i]))
            else:
                cells.append(cell.ljust(widths[i]))
        lines.append("  ".join(cells).rstrip())
    return lines


def _sum_known(*amounts: int | None) -> int | None:
    known = [amount for amount in amounts if amount is not None]
    return sum(known) if known else None


def render_table(observations: NodeObservations, collector: SignalCollector) -> str:
    rows: list[list[str]] = [["SIGNAL", "AVAILABLE", "CAPACITY", "FREE", "SOURCE"]]
    for signal, observed in observations.signals.items():
        if isinstance(observed, SignalValue):
            share = observed.available / observed.capacity if observed.capacity else 0.0
            rows.append(
                [
                    signal.value,
                    _format_amount(signal, observed.available),
                    _format_amount(signal, observed.capacity),
                    f"{share:.1%}",
                    observed.source,
                ]
            )
        else:
            rows.append([signal.value, "-", "-", "-", f"unavailable: {observed.reason}"])
    lines = _columns(rows, right=(1, 2, 3))

    paths = collector.cgroups
    swap = observations.swap
    swap_text = (
        "none"
        if swap is None
        else f"{format_bytes(swap.available)} of {format_bytes(swap.capacity)}"
    )
    cgroup_text = (
        "no memory controller"
        if paths.version is None
        else f"{paths.version.value}, node {paths.node_cgroup}, kubepods "
        + (
            f"{paths.kubepods_cgroup} ({paths.driver.value if paths.driver else '?'} driver)"
            if paths.kubepods_cgroup
            else "not found"
        )
    )
    lines += [
        "",
        f"filesystem layout: {observations.fs_layout.value}    swap: {swap_text}    "
        f"cgroups: {cgroup_text}",
    ]

    lines += ["", f"PODS ({len(observations.pods)})"]
    if observations.pods:
        pod_cgroups = collector.pod_cgroups
        pod_rows = [["UID", "QOS", "MEMORY", "PROCS", "THREADS", "EPHEMERAL", "INODES", "CGROUP"]]
        ordered = sorted(observations.pods.values(), key=lambda pod: -(pod.memory or 0))
        for pod in ordered:
            cgroup = pod_cgroups.get(pod.uid)
            pod_rows.append(
                [
                    pod.uid,
                    cgroup.qos.value if cgroup else "-",
                    format_bytes(pod.memory),
                    "-" if pod.processes is None else str(pod.processes),
                    "-" if pod.threads is None else str(pod.threads),
                    format_bytes(_sum_known(pod.rootfs, pod.logs, pod.local_volumes)),
                    str(
                        _sum_known(pod.rootfs_inodes, pod.logs_inodes, pod.local_volumes_inodes)
                        or "-"
                    ),
                    cgroup.cgroup if cgroup else "(no cgroup: storage only)",
                ]
            )
        lines += _columns(pod_rows, right=(2, 3, 4, 5))
    scan = collector.last_storage_scan
    if scan is not None:
        lines.append(f"ephemeral storage scanned in {scan.seconds * 1000:.1f} ms")

    lines += ["", "PSI (% of wall time stalled)"]
    psi_rows = [["SCOPE", "SOME avg10", "avg60", "avg300", "FULL avg10", "avg60", "avg300"]]
    for scope, stats in observations.psi.items():
        full = stats.full
        psi_rows.append(
            [
                scope,
                f"{stats.some.avg10:.2f}",
                f"{stats.some.avg60:.2f}",
                f"{stats.some.avg300:.2f}",
                "-" if full is None else f"{full.avg10:.2f}",
                "-" if full is None else f"{full.avg60:.2f}",
                "-" if full is None else f"{full.avg300:.2f}",
            ]
        )
    lines += _columns(psi_rows, right=range(1, 7)) if len(psi_rows) > 1 else ["(none)"]

    degraded = {
        source: reason
        for source, reason in collector.degraded().items()
        if source not in {signal.value for signal in observations.signals}
    }
    if degraded:
        lines += ["", "ALSO UNAVAILABLE"]
        lines += [f"{source}: {reason}" for source, reason in sorted(degraded.items())]
    return "\n".join(lines)
