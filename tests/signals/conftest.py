"""Fixture trees for the signal readers: one fake host per cgroup layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion
from tests.doubles.host import HostTree

LAYOUTS = [
    pytest.param((CgroupVersion.V1, CgroupDriver.CGROUPFS), id="v1-cgroupfs"),
    pytest.param((CgroupVersion.V1, CgroupDriver.SYSTEMD), id="v1-systemd"),
    pytest.param((CgroupVersion.V2, CgroupDriver.CGROUPFS), id="v2-cgroupfs"),
    pytest.param((CgroupVersion.V2, CgroupDriver.SYSTEMD), id="v2-systemd"),
]


@pytest.fixture(params=LAYOUTS)
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> HostTree:
    """An empty host of each layout (v1 ones hybrid, with a pids hierarchy), with /proc."""
    version, driver = request.param
    host = HostTree(tmp_path / "host", version=version, driver=driver, hybrid=True)
    host.proc()
    return host
