"""Reading small kernel files cheaply, every second, for hundreds of pods.

The per-second collection reads about three files per pod (usage, ``memory.stat``,
``pids.current``). On a real kernel, opening a cgroup file costs more than reading it
(path lookup through kernfs: ~8 µs to open and close ``memory.usage_in_bytes``, ~1 µs
to ``pread`` it again), so :class:`FileReader` keeps a descriptor per file and re-reads
it with one ``pread`` at offset 0, which makes the kernel regenerate the contents.

Descriptors are bounded by a budget derived from ``RLIMIT_NOFILE`` (files beyond it are
opened, read and closed each time), and callers :meth:`~FileReader.forget` the files of
a pod once its cgroup is gone, so the agent never pins removed cgroups.

Kernel files are never replaced behind an open descriptor: after ``rmdir`` a read fails
with ``ENODEV`` and the reader reopens once (and fails with ``ENOENT`` if the path is
really gone). Fixture trees must therefore be edited in place (``Path.write_text`` does
that); a fixture file deleted after its first read keeps its old contents for us.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable

from nodeagent.base.errors import SignalReadError

_CHUNK = 8192
"""Large enough for any file read in the hot path in one call (memory.stat ~1.5 KiB)."""

_FD_BUDGET_CAP = 16384
_FD_RESERVE = 64


def default_fd_budget() -> int:
    """How many descriptors a reader may keep: half the soft ``RLIMIT_NOFILE``, capped.

    The other half stays free for the rest of the agent (sockets, eventfds, logs).
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _FD_BUDGET_CAP
    return max(0, min(soft // 2 - _FD_RESERVE, _FD_BUDGET_CAP))


def _pread_all(fd: int) -> bytes:
    data = os.pread(fd, _CHUNK, 0)
    if len(data) < _CHUNK:
        return data
    parts = [data]
    offset = len(data)
    while chunk := os.pread(fd, _CHUNK, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def read_once(path: str) -> bytes:
    """Open, read whole, close: for files read rarely (``mountinfo``, ``cgroup.procs``)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _pread_all(fd)
    finally:
        os.close(fd)


class FileReader:
    """Reads whole small files, keeping their descriptors open between reads.

    Not thread-safe: one reader per collecting thread. Raises :class:`OSError` like
    ``open`` would; the caller turns it into an unavailable signal.
    """

    def __init__(self, *, max_open: int | None = None) -> None:
        self._fds: dict[str, int] = {}
        self._max_open = default_fd_budget() if max_open is None else max_open

    @property
    def open_count(self) -> int:
        """Descriptors currently kept open."""
        return len(self._fds)

    def read(self, path: str) -> bytes:
        fd = self._fds.get(path)
        if fd is not None:
            try:
                data = os.pread(fd, _CHUNK, 0)
                return data if len(data) < _CHUNK else _pread_all(fd)
            except OSError:
                # ENODEV after the cgroup was removed: drop it and try the path afresh.
                del self._fds[path]
                os.close(fd)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        if len(self._fds) >= self._max_open:
            try:
                return _pread_all(fd)
            finally:
                os.close(fd)
        try:
            data = _pread_all(fd)
        except OSError:
            os.close(fd)
            raise
        self._fds[path] = fd
        return data

    def read_int(self, path: str) -> int:
        return int(self.read(path))

    def forget(self, paths: Iterable[str]) -> None:
        """Close the descriptors of ``paths`` (a pod went away)."""
        for path in paths:
            fd = self._fds.pop(path, None)
            if fd is not None:
                os.close(fd)

    def close(self) -> None:
        self.forget(list(self._fds))


def read_checked(reader: FileReader, path: str) -> bytes:
    """Read ``path``, translating :class:`OSError` into :class:`SignalReadError`."""
    try:
        return reader.read(path)
    except OSError as exc:
        raise SignalReadError(f"cannot read {path}: {exc.strerror or exc}") from exc
