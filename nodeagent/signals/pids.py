"""``pid.available`` and per-pod task counts.

``pid.available`` is the kubelet's (kubelet-eviction.md §2.4): the ceiling is
``min(pid_max, threads-max)`` (a thread takes a PID, and the kernel refuses new ones at
whichever limit comes first), the current count is the total in ``/proc/loadavg``'s
``running/total`` field, which counts threads and, unlike ``sysinfo(2)``, does not
wrap at 65535.

A pod's tasks come from ``pids.current`` of its cgroup (hierarchical: it includes the
containers' cgroups below). Without a pids hierarchy they are counted from the
``tasks`` (v1) or ``cgroup.threads`` (v2) files of the pod cgroup and its children.
"""

from __future__ import annotations

import os

from nodeagent.errors import SignalReadError
from nodeagent.model import SignalValue
from nodeagent.signals import parse
from nodeagent.signals.cgroups import CgroupVersion, PodCgroup
from nodeagent.signals.files import FileReader, read_checked


class PidReader:
    def __init__(self, *, proc_dir: str, version: CgroupVersion | None) -> None:
        self.pid_max_path = f"{proc_dir}/sys/kernel/pid_max"
        self.threads_max_path = f"{proc_dir}/sys/kernel/threads-max"
        self.loadavg_path = f"{proc_dir}/loadavg"
        self.source = f"min({self.pid_max_path}, threads-max) - tasks in {self.loadavg_path}"
        self._tasks_file = "cgroup.threads" if version is CgroupVersion.V2 else "tasks"

    def node(self, reader: FileReader) -> SignalValue:
        try:
            pid_max = int(read_checked(reader, self.pid_max_path))
            threads_max = int(read_checked(reader, self.threads_max_path))
        except ValueError as exc:
            raise SignalReadError(f"cannot parse the kernel's pid limits: {exc}") from exc
        loadavg = read_checked(reader, self.loadavg_path)
        try:
            tasks = parse.parse_loadavg_tasks(loadavg)
        except ValueError as exc:
            raise SignalReadError(f"cannot parse {self.loadavg_path}: {exc}") from exc
        capacity = min(pid_max, threads_max)
        return SignalValue(available=capacity - tasks, capacity=capacity, source=self.source)

    def pod_tasks(self, reader: FileReader, pod: PodCgroup) -> int:
        """Tasks (threads) in the pod cgroup and below. Raises :class:`OSError`."""
        if pod.pids_file is not None:
            try:
                return int(reader.read(pod.pids_file))
            except FileNotFoundError:
                pass  # the pods hierarchy lacks this pod: count in the memory one
        return self._count_tasks(pod.memory_dir)

    def _count_tasks(self, directory: str) -> int:
        count = 0
        pending = [directory]
        while pending:
            current = pending.pop()
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
            try:
                with open(os.path.join(current, self._tasks_file), "rb") as tasks:
                    count += tasks.read().count(b"\n")
            except FileNotFoundError:
                if current == directory:
                    raise
        return count
