"""Finding and running the real tools the tests use (Debian packages that tests/run.sh
installs): skipped with the reason when a tool is truly absent, never otherwise."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

import pytest

PACKAGE_OF = {
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "systemd-analyze": "systemd",
    "kubectl": "kubectl (preinstalled google-cloud-cli; Debian's kubernetes-client is too old)",
    "unshare": "util-linux",
    "setpriv": "util-linux",
}


def require(tool: str) -> str:
    """The tool's path, or skip the test saying which package provides it."""
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (package {PACKAGE_OF.get(tool, tool)})")
    return path


def run(
    command: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run without raising on a non-zero exit: tests assert on the result."""
    return subprocess.run(
        list(command),
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
