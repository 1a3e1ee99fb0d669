"""``pid.available`` and per-pod task counts.

``pid.available`` is the kubelet's (``pkg/kubelet/stats/pidlimit``): the ceiling is
``min(pid_max, threads-max)`` (a thread takes a PID, and the kernel refuses new ones at
whichever limit comes first), the current count is the total in ``/proc/loadavg``'s
``running/total`` field, which counts threads and, unlike ``sysinfo(2)``, does not
wrap at 65535.

Per pod, two counts (:class:`PodTasks`):

- **threads**: ``pids.current`` of the pod cgroup (hierarchical: it includes the
  containers' cgroups below, and counts every thread, since each takes a PID). Threads
  are what exhausts ``pid_max``. Without a pids hierarchy they are counted from the
  ``tasks`` (v1) or ``cgroup.threads`` (v2) files of the pod cgroup and its children.
- **processes**: the lines of ``cgroup.procs`` (thread-group leaders) of the pod cgroup
  and its children, which is what the kubelet's ``process_stats.process_count`` counts
  and ranks PID pressure by (``rankPIDPressure``). On cgroup v2 the pod cgroup
  itself holds no process (only leaves do), so the children must be walked.

Walking the children costs a directory listing and a read per container, so the
process count is only re-walked when the pod's thread count changed since the last
walk: a process cannot start or end without the thread count moving (a new thread at
the same instant as an exit is corrected by the next change).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from nodeagent.base.errors import SignalReadError
from nodeagent.model import SignalValue
from nodeagent.signals import parse
from nodeagent.signals.cgroups import CgroupVersion, PodCgroup
from nodeagent.signals.files import FileReader, read_checked


@dataclass(frozen=True, slots=True)
class PodTasks:
    processes: int
    """Processes in the pod cgroup and below (``cgroup.procs``): the kubelet's
    ``process_count``, by which PID pressure ranks pods."""
    threads: int
    """Threads (tasks) in the pod cgroup and below: what takes PIDs."""


class PidReader:
    def __init__(self, *, proc_dir: str, version: CgroupVersion | None) -> None:
        self.pid_max_path = f"{proc_dir}/sys/kernel/pid_max"
        self.threads_max_path = f"{proc_dir}/sys/kernel/threads-max"
        self.loadavg_path = f"{proc_dir}/loadavg"
        self.source = f"min({self.pid_max_path}, threads-max) - tasks in {self.loadavg_path}"
        self._threads_file = "cgroup.threads" if version is CgroupVersion.V2 else "tasks"

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

    def pod_tasks(
        self, reader: FileReader, pod: PodCgroup, previous: PodTasks | None = None
    ) -> PodTasks:
        """Processes and threads in the pod cgroup and below; the processes of
        ``previous`` (the last count of this pod) are kept when its thread count has not
        moved. Raises :class:`OSError`."""
        threads: int | None = None
        if pod.pids_file is not None:
            # Without the file the pids hierarchy lacks this pod: count in the memory one.
            with contextlib.suppress(FileNotFoundError):
                threads = int(reader.read(pod.pids_file))
        if threads is None:
            threads, processes = self._count(pod.memory_dir, self._threads_file, "cgroup.procs")
            return PodTasks(processes=processes, threads=threads)
        if previous is not None and previous.threads == threads:
            return previous
        assert pod.pids_file is not None  # threads were read from it above
        directory = os.path.dirname(pod.pids_file)
        (processes,) = self._count(directory, "cgroup.procs")
        return PodTasks(processes=processes, threads=threads)

    @staticmethod
    def _count(directory: str, *names: str) -> tuple[int, ...]:
        """Lines of each file ``names`` in ``directory`` and every cgroup below it."""
        counts = [0] * len(names)
        pending = [directory]
        while pending:
            current = pending.pop()
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
            for slot, name in enumerate(names):
                try:
                    with open(os.path.join(current, name), "rb") as file:
                        counts[slot] += file.read().count(b"\n")
                except FileNotFoundError:
                    if current == directory:
                        raise
        return tuple(counts)
