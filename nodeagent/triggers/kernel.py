"""The system calls behind the triggers, and nothing else.

Each function hands back a file descriptor the caller owns (and must close) or raises
the kernel's OSError unchanged, so :mod:`nodeagent.triggers.triggerset` can tell a
missing file from a refusal and say which in the trigger's status.

Python has no inotify binding in the standard library; :class:`Inotify` reaches the
three libc calls through ctypes rather than adding a dependency for them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

IN_MODIFY = 0x00000002
IN_DELETE_SELF = 0x00000400
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


def register_memcg_threshold(cgroup_dir: str, usage_bytes: int) -> int:
    """An eventfd the kernel signals whenever the cgroup v1 memcg's
    ``memory.usage_in_bytes`` crosses ``usage_bytes``, either way, and once more when
    the cgroup is removed. Closing the eventfd unregisters the threshold."""
    event_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        usage_fd = os.open(os.path.join(cgroup_dir, "memory.usage_in_bytes"), os.O_RDONLY)
        try:
            control_fd = os.open(os.path.join(cgroup_dir, "cgroup.event_control"), os.O_WRONLY)
            try:
                os.write(control_fd, f"{event_fd} {usage_fd} {usage_bytes}".encode())
            finally:
                os.close(control_fd)
        finally:
            os.close(usage_fd)
    except BaseException:
        os.close(event_fd)
        raise
    return event_fd


def drain_eventfd(fd: int) -> int:
    """The eventfd's counter (notifications since the last drain), reset to 0."""
    try:
        return os.eventfd_read(fd)
    except BlockingIOError:
        return 0


def open_psi_trigger(pressure_file: str, request: bytes) -> int:
    """A descriptor that polls with POLLPRI when the PSI trigger ``request``
    (``some 150000 1000000``) fires; the trigger lives as long as the descriptor."""
    fd = os.open(pressure_file, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.write(fd, request)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_small_file(path: str) -> str:
    """A kernel interface file's whole text, in one read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)


class Inotify:
    """A non-blocking inotify instance: watch files, read which ones changed."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._add_watch = libc.inotify_add_watch
        self._add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._add_watch.restype = ctypes.c_int
        self._rm_watch = libc.inotify_rm_watch
        self._rm_watch.argtypes = (ctypes.c_int, ctypes.c_int)
        self._rm_watch.restype = ctypes.c_int
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        self.fd: int = fd

    def add_watch(self, path: str, mask: int) -> int:
        """The watch descriptor; the same one again for a file already watched."""
        wd: int = self._add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return wd

    def rm_watch(self, wd: int) -> None:
        # EINVAL: the kernel already dropped the watch (file deleted); nothing to undo.
        if self._rm_watch(self.fd, wd) < 0 and ctypes.get_errno() != errno.EINVAL:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_rm_watch: {os.strerror(code)}")

    def read_events(self) -> list[tuple[int, int]]:
        """(watch descriptor, mask) of every queued event, oldest first."""
        events: list[tuple[int, int]] = []
        while True:
            try:
                buffer = os.read(self.fd, 65536)
            except BlockingIOError:
                return events
            offset = 0
            while offset < len(buffer):
                wd, mask, _cookie, name_length = _EVENT_HEADER.unpack_from(buffer, offset)
                events.append((wd, mask))
                offset += _EVENT_HEADER.size + name_length

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
