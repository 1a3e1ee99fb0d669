"""A ``nodeagent`` command run as a child process, its JSON log lines on stderr read as
they come: tests and benchmarks wait on the line that says what they need, never on a
sleep. One reader for the end-to-end tests, the component tests and the detection
benchmarks, which each had their own."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

LogRecord = dict[str, Any]


class LoggedProcess:
    """``python -m nodeagent ARGS``. Lines that are not JSON (a traceback) are kept as
    ``{"message": line, "unparsed": True}``. Unless ``env`` is given, the environment is
    this one without ``KUBERNETES_*``: a test run inside a pod must not reach its cluster."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        if env is None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
        )
        self.lines: queue.Queue[LogRecord] = queue.Queue()
        self.seen: list[LogRecord] = []
        """The records :meth:`wait` has looked at, in order."""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put({"message": line.rstrip(), "unparsed": True})

    def wait(self, matches: Callable[[LogRecord], bool], timeout: float = 20.0) -> LogRecord:
        """The first record from now that ``matches``; AssertionError after ``timeout``
        seconds, or as soon as the process has exited with nothing left to read."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                record = self.lines.get(timeout=max(0.0, min(remaining, 0.5)))
            except queue.Empty:
                exited = self.process.poll() is not None and self.lines.empty()
                if remaining <= 0 or exited:
                    last = [r.get("message") for r in self.seen[-5:]]
                    why = f"exited ({self.process.returncode})" if exited else "timed out"
                    raise AssertionError(f"no matching log line: {why}; saw {last}") from None
                continue
            self.seen.append(record)
            if matches(record):
                return record

    def wait_line(self, message: str, timeout: float = 20.0) -> LogRecord:
        """The first record from now whose message is ``message``."""
        return self.wait(lambda record: record.get("message") == message, timeout)

    def drain(self, seen: Callable[[LogRecord], object] | None = None) -> None:
        """Drop the lines logged so far, showing each to ``seen`` first."""
        with contextlib.suppress(queue.Empty):
            while True:
                record = self.lines.get_nowait()
                self.seen.append(record)
                if seen is not None:
                    seen(record)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def terminate(self) -> float:
        """SIGTERM; seconds until the process exited, which must be with code 0."""
        started = time.monotonic()
        code = self.stop()
        took = time.monotonic() - started
        assert code == 0, f"exit code {code}"
        return took

    def close(self) -> None:
        """Kill the process if it still runs, and close its pipe."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        assert self.process.stderr is not None
        self.process.stderr.close()


@contextlib.contextmanager
def logged_process(
    args: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Iterator[LoggedProcess]:
    process = LoggedProcess(args, env=env)
    try:
        yield process
    finally:
        process.close()
