"""Pressure stall information: how long tasks waited for memory, IO and CPU.

Scopes in :attr:`nodeagent.model.NodeObservations.psi`:

* ``memory``, ``io``, ``cpu``: the whole system, ``/proc/pressure/*``;
* ``node/memory``, ``node/io``, ``node/cpu``: the node cgroup's own ``*.pressure``
  files in the cgroup2 hierarchy (on a hybrid host, under ``/sys/fs/cgroup/unified``);
* ``kubepods/memory``, ``kubepods/io``, ``kubepods/cpu``: the same files of the
  kubepods cgroup: the stalls of the pods alone, which the kubelet's PSI metrics and
  conditions watch beside the system's.

A scope that cannot be read is left out of the mapping and reported with its reason:
kernels before 4.20 or built without ``CONFIG_PSI`` have no /proc/pressure at all,
one booted with ``psi=0`` refuses to read it, pure cgroup v1 hosts have no per-cgroup
pressure files, and on a hybrid host a cgroup is in the cgroup2 hierarchy only if its
manager put it there (systemd does, for its slices). A file that is absent or refused
is not tried again on every read: the scope keeps its reason and the file is
re-checked once per :data:`RECHECK_S` (a cgroup moved into the cgroup2 hierarchy, a
kernel setting changed), so a host without PSI costs no failing ``open`` per cycle.
"""

from __future__ import annotations

import errno

from nodeagent.model import PsiStats
from nodeagent.signals import parse
from nodeagent.signals.cgroups import CgroupPaths, missing_kubepods_reason
from nodeagent.signals.files import FileReader

RESOURCES = ("memory", "io", "cpu")
RECHECK_S = 60.0
"""How often a pressure file that was absent or refused is looked for again."""
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EOPNOTSUPP})
"""Errors that say the file is not there to read (as opposed to a passing failure)."""
NODE_SCOPE = "node"
KUBEPODS_SCOPE = "kubepods"


class PsiReader:
    """Reads the system's pressure files and those of the node and kubepods cgroups."""

    def __init__(self, *, proc_dir: str, cgroups: CgroupPaths) -> None:
        files = [(resource, f"{proc_dir}/pressure/{resource}") for resource in RESOURCES]
        self._missing: dict[str, str] = {}
        for scope, cgroup in (
            (NODE_SCOPE, cgroups.node_cgroup),
            (KUBEPODS_SCOPE, cgroups.kubepods_cgroup),
        ):
            directory = None if cgroup is None else cgroups.unified_dir(cgroup)
            for resource in RESOURCES:
                if directory is not None:
                    files.append((f"{scope}/{resource}", f"{directory}/{resource}.pressure"))
                elif cgroups.unified_root is None:
                    self._missing[f"{scope}/{resource}"] = (
                        "no cgroup2 hierarchy on this host, so no per-cgroup pressure files"
                    )
                else:
                    self._missing[f"{scope}/{resource}"] = missing_kubepods_reason(cgroups)
        self._files = tuple(files)
        self._absent: dict[str, tuple[str, float]] = {}
        """Scope to (why its file is missing, when to look for it again)."""

    @property
    def sources(self) -> dict[str, str]:
        """The file each readable scope is read from."""
        return dict(self._files)

    def read(self, reader: FileReader, now: float) -> tuple[dict[str, PsiStats], dict[str, str]]:
        """PSI by scope, and the reason for every scope that could not be read, at
        ``now`` (seconds on the caller's clock, for when to look again for a missing
        file)."""
        stats: dict[str, PsiStats] = {}
        unavailable = dict(self._missing)
        absent = self._absent
        for scope, path in self._files:
            known = absent.get(scope)
            if known is not None and now < known[1]:
                unavailable[scope] = known[0]
                continue
            try:
                stats[scope] = parse.parse_psi(reader.read(path))
            except OSError as exc:
                hint = " (kernel booted with psi=0?)" if exc.errno == errno.EOPNOTSUPP else ""
                unavailable[scope] = f"cannot read {path}: {exc.strerror or exc}{hint}"
                if exc.errno in _ABSENT:
                    absent[scope] = (unavailable[scope], now + RECHECK_S)
                continue
            except ValueError as exc:
                unavailable[scope] = f"cannot parse {path}: {exc}"
            absent.pop(scope, None)
        return stats, unavailable
