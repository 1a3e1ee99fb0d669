"""Parsers for the kernel's text files: pure functions of the bytes read.

Every reader in :mod:`nodeagent.signals` reads a file with one system call and hands the
bytes to a function here, so the formats are tested on their own and the readers stay
thin. The parsers work on ``bytes`` (no decoding) and look only for the keys they need:
a cgroup v1 ``memory.stat`` has 40-odd lines and the per-second collection reads one
per pod, so scanning for one key beats building a dict.

Malformed input raises :class:`ValueError` naming what was expected; the readers turn
that into an unavailable signal with the file's path.

Why not psutil for ``/proc/meminfo``: it does not expose the facts the readers need in
the form they need them. The meminfo fallback of ``memory.available`` needs
``AnonPages``, ``SwapCached`` and ``Inactive(file)``, which psutil does not report (its
``cached`` adds ``SReclaimable`` and its ``inactive`` is anon plus file, other
quantities than the kubelet's). Swap (``SwapTotal``, ``SwapFree``) it does report, but
only by reading meminfo again (and ``/proc/vmstat``) in the per-second collection,
from the directory in ``psutil.PROCFS_PATH``, one setting for the whole process where
every reader here takes its root as a parameter; and when those lines are missing it
falls back to ``sysinfo(2)``, which describes the machine the agent runs on, not the
host root or fixture tree it was pointed at. So the readers parse the one meminfo read
they already make, and the kernel tests check them against psutil's own parse of the
same file (tests/kernel/test_meminfo_against_psutil.py), which is where psutil does
replace hand-written parsing, as in the benchmarks' process sampler.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.model import PsiLine, PsiStats

UNLIMITED_THRESHOLD = 1 << 62
"""cgroup v1 spells "no limit" as the largest page-aligned int64 (9223372036854771712);
the kubelet treats anything above 2^62 as unlimited, and so do we."""


def stat_value(data: bytes, key: bytes) -> int | None:
    """The integer after ``key`` in a ``key value`` per line file, or ``None``.

    ``key`` must end with the separating space (``b"total_inactive_file "``) so that a
    key is never matched as the prefix of a longer one (``file`` vs ``file_mapped``).
    """
    if data.startswith(key):
        start = len(key)
    else:
        at = data.find(b"\n" + key)
        if at < 0:
            return None
        start = at + 1 + len(key)
    end = data.find(b"\n", start)
    return int(data[start:end] if end >= 0 else data[start:])


def parse_int(data: bytes) -> int:
    """A file holding one integer (``memory.usage_in_bytes``, ``pids.current``...)."""
    return int(data)


def parse_limit(data: bytes) -> int | None:
    """A memory limit: bytes, or ``None`` when unlimited (``max`` in v2, ~2^63 in v1)."""
    text = data.strip()
    if text == b"max":
        return None
    value = int(text)
    return None if value > UNLIMITED_THRESHOLD else value


def parse_meminfo(data: bytes, keys: tuple[str, ...]) -> dict[str, int]:
    """Selected ``/proc/meminfo`` fields, in bytes (the file says kB and means KiB).

    Missing keys are left out; callers decide whether a key is required.
    """
    wanted = set(keys)
    values: dict[str, int] = {}
    for line in data.decode("ascii", "replace").splitlines():
        name, _, rest = line.partition(":")
        if name in wanted:
            number, _, unit = rest.strip().partition(" ")
            values[name] = int(number) * (1024 if unit == "kB" else 1)
            if len(values) == len(wanted):
                break
    return values


def parse_loadavg_tasks(data: bytes) -> int:
    """Tasks (threads) on the system: the denominator of ``/proc/loadavg``'s 4th field."""
    fields = data.split()
    if len(fields) < 4 or b"/" not in fields[3]:
        raise ValueError(f"expected 'a b c running/total pid', got {data[:64]!r}")
    return int(fields[3].partition(b"/")[2])


def _parse_psi_line(fields: list[bytes]) -> PsiLine:
    values: dict[bytes, bytes] = {}
    for field in fields:
        name, _, value = field.partition(b"=")
        values[name] = value
    try:
        return PsiLine(
            avg10=float(values[b"avg10"]),
            avg60=float(values[b"avg60"]),
            avg300=float(values[b"avg300"]),
            total=int(values[b"total"]),
        )
    except KeyError as missing:
        raise ValueError(f"PSI line lacks {missing.args[0].decode()}=") from None


def parse_psi(data: bytes) -> PsiStats:
    """A PSI file: a ``some`` line and, except for system cpu on old kernels, ``full``."""
    lines: dict[bytes, PsiLine] = {}
    for line in data.splitlines():
        fields = line.split()
        if fields and fields[0] in (b"some", b"full"):
            lines[fields[0]] = _parse_psi_line(fields[1:])
    if b"some" not in lines:
        raise ValueError(f"expected a 'some avg10=... total=...' line, got {data[:64]!r}")
    return PsiStats(some=lines[b"some"], full=lines.get(b"full"))


_MOUNTINFO_ESCAPES: Mapping[str, str] = {"\\040": " ", "\\011": "\t", "\\012": "\n", "\\134": "\\"}


def _unescape_mount_field(field: str) -> str:
    if "\\" not in field:
        return field
    for escaped, plain in _MOUNTINFO_ESCAPES.items():
        field = field.replace(escaped, plain)
    return field


def overlay_upperdir(mountinfo: str) -> str | None:
    """The writable layer of a process's root filesystem, from its ``/proc/<pid>/mountinfo``.

    A container's root is an overlay mount at ``/`` (as the container sees it) whose
    super options name ``upperdir=``: the host path of its writable layer. Returns
    ``None`` when the root is not an overlay (a host process, another snapshotter).
    """
    upper = None
    for line in mountinfo.splitlines():
        mount_part, separator, fs_part = line.partition(" - ")
        if not separator:
            continue
        mount_fields = mount_part.split(" ")
        fs_fields = fs_part.split(" ")
        if len(mount_fields) < 5 or len(fs_fields) < 3:
            continue
        if mount_fields[4] != "/" or fs_fields[0] != "overlay":
            continue
        for option in fs_fields[2].split(","):
            if option.startswith("upperdir="):
                # The last root mount wins: later lines are stacked on top.
                upper = _unescape_mount_field(option[len("upperdir=") :])
    return upper


def container_name_from_mountinfo(mountinfo: str, pod_uid: str) -> str | None:
    """The name of the container a process runs in, from its ``/proc/<pid>/mountinfo``.

    The kubelet bind-mounts each container's termination-message file (by default
    ``/dev/termination-log``) from ``<kubelet root>/pods/<uid>/containers/<name>/<id>``;
    that mount's root (the fourth field, relative to the filesystem it comes from, so the
    kubelet root directory may sit on its own filesystem) names the container. ``None``
    when no such mount is found.
    """
    marker = f"/pods/{pod_uid}/containers/"
    for line in mountinfo.splitlines():
        if marker not in line:
            continue
        fields = line.split(" ", 5)
        if len(fields) < 5:
            continue
        _, found, rest = _unescape_mount_field(fields[3]).partition(marker)
        name = rest.partition("/")[0]
        if found and name:
            return name
    return None


def pod_uid_from_log_dir(name: str) -> str | None:
    """The pod UID of a kubelet log directory ``<namespace>_<name>_<uid>``.

    Namespaces and pod names are DNS labels/subdomains, which cannot contain ``_``, so
    the name splits into exactly three parts.
    """
    parts = name.split("_")
    if len(parts) != 3 or not all(parts):
        return None
    return parts[2]
