"""Pressure stall information: how long tasks waited for memory, IO and CPU.

Scopes in :attr:`nodeagent.model.NodeObservations.psi`:

* ``memory``, ``io``, ``cpu``: the whole system, ``/proc/pressure/*``;
* ``node/memory``, ``node/io``, ``node/cpu``: the node cgroup's own ``*.pressure``
  files in the cgroup2 hierarchy (on a hybrid host, under ``/sys/fs/cgroup/unified``).

A scope that cannot be read is left out of the mapping and reported with its reason:
kernels before 4.20 or booted with ``psi=0`` have no PSI at all, and pure cgroup v1
hosts have no per-cgroup pressure files.
"""

from __future__ import annotations

import errno

from nodeagent.model import PsiStats
from nodeagent.signals import parse
from nodeagent.signals.files import FileReader

RESOURCES = ("memory", "io", "cpu")


class PsiReader:
    def __init__(self, *, proc_dir: str, node_unified_dir: str | None) -> None:
        files = [(resource, f"{proc_dir}/pressure/{resource}") for resource in RESOURCES]
        self._missing: dict[str, str] = {}
        if node_unified_dir is None:
            for resource in RESOURCES:
                self._missing[f"node/{resource}"] = (
                    "no cgroup2 hierarchy on this host, so no per-cgroup pressure files"
                )
        else:
            files += [
                (f"node/{resource}", f"{node_unified_dir}/{resource}.pressure")
                for resource in RESOURCES
            ]
        self._files = tuple(files)

    @property
    def sources(self) -> dict[str, str]:
        """The file each scope is read from."""
        return dict(self._files)

    def read(self, reader: FileReader) -> tuple[dict[str, PsiStats], dict[str, str]]:
        """PSI by scope, and the reason for every scope that could not be read."""
        stats: dict[str, PsiStats] = {}
        unavailable = dict(self._missing)
        for scope, path in self._files:
            try:
                stats[scope] = parse.parse_psi(reader.read(path))
            except OSError as exc:
                hint = " (kernel booted with psi=0?)" if exc.errno == errno.EOPNOTSUPP else ""
                unavailable[scope] = f"cannot read {path}: {exc.strerror or exc}{hint}"
            except ValueError as exc:
                unavailable[scope] = f"cannot parse {path}: {exc}"
        return stats, unavailable
