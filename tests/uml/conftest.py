"""Fixtures for tests that boot user-mode-linux: a real cgroup v2 kernel (6.1) run as an
ordinary process (see :mod:`tests.uml.machine`). Each test module boots once, runs a
script of checks inside that writes JSON results to a host directory, and its tests
assert on those results."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.uml import machine

Boot = Callable[..., machine.Boot]


@pytest.fixture(scope="module")
def uml(tmp_path_factory: pytest.TempPathFactory) -> Boot:
    """``uml(command, mem_mib=..., disk_mib=..., timeout_s=...)`` boots the kernel with
    ``command`` as its work (run as root inside, cwd the repository), always powers it
    off (killed at the timeout), and returns the :class:`~tests.uml.machine.Boot`."""
    reason = machine.available()
    if reason is not None:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("the guest writes its results to the host as root")

    def boot(command: Sequence[str], **kwargs: Any) -> machine.Boot:
        return machine.boot(command, workdir=tmp_path_factory.mktemp("uml"), **kwargs)

    return boot


def results(boot: machine.Boot, name: str) -> Any:
    """The JSON a script inside wrote, or a failure showing the guest's console."""
    import json

    path: Path = boot.results / f"{name}.json"
    if boot.status != 0 or not path.is_file():
        pytest.fail(
            f"the guest's checks did not finish (status {boot.status}, timed out "
            f"{boot.timed_out}):\n{boot.output[-6000:]}"
        )
    return json.loads(path.read_text())
