"""Where a benchmark's CPU goes, per process, from py-spy samples.

:class:`Sampler` attaches ``py-spy record --gil --subprocesses`` to a process (and the
children it starts) for the part of a run that matters, and writes py-spy's raw
(collapsed) stacks. ``--gil`` samples, in each process, the thread holding the
interpreter lock: the Python CPU of that process, one thread at a time. Native time
spent with the lock released (the socket calls themselves) is not sampled, so
:func:`breakdown` scales each process's shares by the CPU time measured for it.

:func:`categorise` sorts a stack into the buckets the live scheduler's cost is
discussed in (docs/scheduler.md, "Throughput"); the first rule whose marker appears in
the stack wins, so the more specific rules come first.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start-up (imports)", ("<frozen importlib",)),
    # the fake API server's process
    ("server: watch fan-out", ("_Handler._watch (", "FakeCluster.watch")),
    ("server: bindings", ("_Handler._bind (",)),
    ("server: events", ("FakeCluster.create (",)),
    ("server: lists", ("_Handler._list_or_watch (",)),
    ("server: HTTP and JSON", ("tests/fakeapi/server.py", "http/server.py", "socketserver.py")),
    # the scheduler's processes
    ("metrics", ("prometheus_client/",)),
    (
        "Scheduled events",
        ("_record_scheduled", "_event_recorded", "nodeagent/kube/events.py", "reporter.py"),
    ),
    # the binding process: what its loop does with answers and requests (llhttp, the
    # Poster), the socket to the scheduler, asyncio's own turn of the loop
    ("binding process: HTTP", ("nodeagent/kube/pipeline.py", "httptools")),
    ("socket pair: messages (framing, msgpack)", ("_Child._read", "_Child._flush", "Frames")),
    ("binding process: event loop", ("asyncio/",)),
    ("scheduling cycle", ("schedule_one (",)),
    ("informer: JSON decoding", ("_HTTPWatch", "HTTPKubeClient._list", "msgspec")),
    ("informer: handlers", ("Informer.apply", "Informer.sync_once")),
    # the end of a binding cycle runs on the thread reading the child's answers: its
    # own work first, the socket's after
    ("binding cycle (completion)", ("BindingPool", "_binding_done")),
    ("binding hand-off (socket)", ("ProcessBinder",)),
    ("queue (pop, flush)", ("SchedulingQueue",)),
)
OTHER = "other"
UNREAD = "stack not read"


def categorise(stack: str) -> str:
    frames = stack.split(";")
    own = [f for f in frames if not f.startswith("process ") and "spawn_main" not in f]
    if not own:
        return UNREAD  # py-spy saw the process but could not unwind its stack
    for name, markers in RULES:
        if any(marker in stack for marker in markers):
            return name
    return OTHER


def parse(raw: Path) -> dict[int, collections.Counter[str]]:
    """Samples per process id and category, from py-spy's ``--format raw`` output
    (each line a ``;``-joined stack and a count; with ``--subprocesses`` the stack's
    ``process PID:...`` frames name the process chain, innermost last)."""
    found: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        pids = [f for f in frames if f.startswith("process ")]
        if not pids:
            continue
        pid = int(pids[-1].split(":", 1)[0].removeprefix("process "))
        found[pid][categorise(stack)] += int(count)
    return dict(found)


def breakdown(
    samples: Mapping[int, collections.Counter[str]],
    processes: Mapping[str, tuple[int, float, float]],
    pods: int,
) -> str:
    """A table: for each named process (``name -> (pid, user seconds, system
    seconds)``), its kernel time as one line, and its user time split by the categories'
    shares of its samples, as microseconds of CPU per pod. The samples are of the thread
    holding the interpreter lock, which is what user time is spent on; the kernel's
    share (socket and pipe calls, futex waits and wakes) is measured, not sampled."""
    lines = []
    for name, (pid, user, system) in processes.items():
        counts = samples.get(pid) or collections.Counter()
        total = sum(counts.values())
        per_pod = 1e6 * (user + system) / max(1, pods)
        lines.append(f"{name} ({per_pod:.0f} us CPU/pod, {total} samples):")
        rows = [("kernel (system calls)", 1e6 * system / max(1, pods))]
        rows += [
            (category, count / total * 1e6 * user / max(1, pods))
            for category, count in counts.most_common()
        ]
        for category, us in rows:
            lines.append(f"  {category:<28} {100 * us / per_pod:5.1f} %  {us:6.0f} us/pod")
    return "\n".join(lines)


class Sampler:
    """``with Sampler(pid, out):`` py-spy samples ``pid`` and its children meanwhile."""

    def __init__(self, pid: int, out: Path, *, rate: int = 200) -> None:
        executable = shutil.which("py-spy")
        if executable is None:
            raise RuntimeError("--profile needs py-spy (pip install py-spy)")
        self.out = out
        self._command = [
            executable,
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "--gil",
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--output",
            str(out),
        ]
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Sampler:
        self._process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
        self._process.wait(60)
