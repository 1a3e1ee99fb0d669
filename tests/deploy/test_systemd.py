"""The systemd unit: ``systemd-analyze verify`` prints nothing at all (it reports
unknown keys and bad values only as warnings, exit code 0), the offline security
exposure stays at or below 2.1, and the unit, its environment file and its config
say what the agent needs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.agent.config import NodeAgentConfiguration, load_config
from nodeagent.triggers import psi, setup
from tests.deploy import files
from tests.observability import tools

UNIT = files.SYSTEMD / "nodeagent.service"
SECURITY_THRESHOLD = 21
"""``systemd-analyze security`` exposure x 10: the unit scores 2.1 ("OK"); any
weakened setting raises it and fails the test."""


def directives(text: str) -> dict[str, list[str]]:
    """``Key=value`` lines by key, in order (keys may repeat)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def unit() -> dict[str, list[str]]:
    return directives(UNIT.read_text())


def unit_copy(directory: Path, text: str | None = None) -> Path:
    """The unit with ExecStart pointing at an executable stub: verify checks that the
    binary exists, and the agent is not installed at /usr/local/bin here."""
    stub = directory / "nodeagent"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    text = UNIT.read_text() if text is None else text
    copy = directory / "nodeagent.service"
    copy.write_text(
        re.sub(r"^ExecStart=\S+", f"ExecStart={stub}", text, count=1, flags=re.MULTILINE)
    )
    return copy


def verify(path: Path) -> str:
    analyze = tools.require("systemd-analyze")
    done = tools.run([analyze, "verify", str(path)])
    return (done.stdout + done.stderr).strip() + ("" if done.returncode == 0 else " (rc != 0)")


def test_verify_prints_nothing(tmp_path: Path) -> None:
    assert verify(unit_copy(tmp_path)) == ""


def test_verify_output_catches_a_misspelt_key(tmp_path: Path) -> None:
    typo = UNIT.read_text().replace("NoNewPrivileges=", "NoNewPrivilege=")
    assert "Unknown key" in verify(unit_copy(tmp_path, typo))


def test_security_exposure_is_at_most_the_threshold(tmp_path: Path) -> None:
    analyze = tools.require("systemd-analyze")
    copy = unit_copy(tmp_path)
    done = tools.run(
        [analyze, "security", "--offline=true", f"--threshold={SECURITY_THRESHOLD}", str(copy)]
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    weaker = tmp_path / "weaker"
    weaker.mkdir()
    text = UNIT.read_text().replace("ProtectHome=yes", "ProtectHome=no")
    done = tools.run(
        [
            analyze,
            "security",
            "--offline=true",
            f"--threshold={SECURITY_THRESHOLD}",
            str(unit_copy(weaker, text)),
        ]
    )
    assert done.returncode != 0


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("Type", "notify", id="notify"),
        pytest.param("NotifyAccess", "main", id="notify-access"),
        pytest.param("Restart", "always", id="restart"),
        pytest.param("ProtectSystem", "strict", id="protect-system"),
        pytest.param("ProtectHome", "yes", id="protect-home"),
        pytest.param("NoNewPrivileges", "yes", id="no-new-privileges"),
        pytest.param("EnvironmentFile", "-/etc/nodeagent/nodeagent.env", id="environment-file"),
        pytest.param("CapabilityBoundingSet", "CAP_DAC_READ_SEARCH CAP_SYS_RESOURCE", id="caps"),
    ],
)
def test_unit_settings(key: str, expected: str) -> None:
    assert unit()[key] == [expected]


def test_protected_from_the_oom_killer_and_from_reclaim() -> None:
    settings = unit()
    assert int(settings["OOMScoreAdjust"][0]) <= -900
    assert settings["MemoryMin"][0].endswith("M")
    assert int(settings["MemoryMin"][0][:-1]) > 0


def test_watchdog_is_fed_by_the_loop_within_its_timeout() -> None:
    settings = unit()
    watchdog = int(settings["WatchdogSec"][0].removesuffix("s"))
    config = load_config(files.SYSTEMD / "config.yaml", environ={})
    # One ping per cycle at most every WatchdogSec/2: the poll interval must fit.
    assert config.poll_interval < watchdog / 2
    assert config.liveness_timeout <= watchdog


def test_exec_start_runs_the_agent_with_the_shipped_config() -> None:
    [exec_start] = unit()["ExecStart"]
    binary, command, *flags = exec_start.split()
    assert (Path(binary).name, command) == ("nodeagent", "run")
    assert flags == ["--config=/etc/nodeagent/config.yaml"]
    config = load_config(files.SYSTEMD / "config.yaml", environ={})
    assert str(config.host_root) == "/"


def test_exec_start_is_where_the_documented_install_puts_the_agent() -> None:
    """docs/operations.md installs into a virtual environment (Debian 12 and Ubuntu
    23.04+ refuse pip into the system Python); ExecStart must name its script, on a
    path the sandbox neither hides (ProtectHome) nor replaces (PrivateTmp)."""
    guide = (files.REPO / "docs" / "operations.md").read_text()
    section = guide.split("## systemd", 1)[1].split("\n## ", 1)[0]
    [venv] = re.findall(r"python3 -m venv (\S+)", section)
    [exec_start] = unit()["ExecStart"]
    assert exec_start.split()[0] == f"{venv}/bin/nodeagent"
    for hidden in ("/home/", "/root/", "/run/user/", "/tmp/", "/var/tmp/"):
        assert not exec_start.startswith(hidden)
    for source, target in re.findall(r"install .*?(systemd/\S+)\s+(\S+)", section):
        assert (files.REPO / source).is_file(), source
        assert target.startswith(("/etc/nodeagent/", "/etc/systemd/system/")), target


def writable_paths() -> list[str]:
    values = unit().get("ReadWritePaths", [])
    return [path.lstrip("-") for value in values for path in value.split()]


@pytest.mark.parametrize(
    "written",
    [
        # What nodeagent/triggers opens for writing on a bare-metal host (hostRoot /).
        pytest.param(
            setup.TriggerPaths(1, "/proc/pressure", {}, {}).pressure_file(
                psi.TriggerSpec.parse("memory some 150ms 1s")
            ),
            id="system-psi-trigger",
        ),
        pytest.param(
            setup.TriggerPaths(
                2, "/proc/pressure", {}, {"kubepods": "/sys/fs/cgroup/kubepods.slice"}
            ).pressure_file(psi.TriggerSpec.parse("kubepods/memory full 100ms 2s")),
            id="cgroup2-psi-trigger",
        ),
        pytest.param("/sys/fs/cgroup/memory/kubepods/cgroup.event_control", id="memcg-threshold"),
    ],
)
def test_the_triggers_files_stay_writable(written: str | None) -> None:
    assert written is not None
    assert any(written.startswith(path.rstrip("/") + "/") for path in writable_paths()), written
    # ProtectControlGroups makes /sys/fs/cgroup read-only, whatever else is said.
    assert unit().get("ProtectControlGroups", ["no"]) == ["no"]


def setpriv_bounding_set() -> str:
    """The unit's CapabilityBoundingSet as setpriv spells it (``-all,+dac_read_search``)."""
    [capabilities] = unit()["CapabilityBoundingSet"]
    names = (c.removeprefix("CAP_").lower() for c in capabilities.split())
    return ",".join(["-all", *(f"+{name}" for name in names)])


PROC_PROBE = r"""
import json, os, subprocess, sys

mountpoint, pid, setpriv, bounding = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
os.makedirs(mountpoint, exist_ok=True)
# What ProtectProc=invisible gives the unit: its own /proc with hidepid=invisible.
subprocess.run(["mount", "-t", "proc", "-o", "hidepid=invisible", "proc", mountpoint], check=True)
read = ["cat", f"{mountpoint}/{pid}/mountinfo"]
as_agent = [setpriv, f"--bounding-set={bounding}", *read]
other_group = [setpriv, "--regid=65534", "--clear-groups", f"--bounding-set={bounding}", *read]
results = {
    name: subprocess.run(command, capture_output=True).returncode == 0
    for name, command in (("agent", as_agent), ("other_group", other_group))
}
print(json.dumps(results))
"""


@pytest.mark.kernel
def test_protect_proc_hides_no_container_process_from_the_agent(tmp_path: Path) -> None:
    """The writable-layer reader reads ``/proc/<pid>/mountinfo`` of containers'
    processes, which run as other users. Under the unit's ``ProtectProc=invisible`` and
    capability bounding set (no CAP_SYS_PTRACE), the agent still sees them because it
    runs in the root group; a process of another group does not (the mount option is
    in force, so the first check is not vacuous)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a procfs in a private mount namespace")
    unshare, setpriv = tools.require("unshare"), tools.require("setpriv")
    assert unit()["ProtectProc"] == ["invisible"]
    assert "User" not in unit()
    bounding = setpriv_bounding_set()
    sleeper = subprocess.Popen(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"]
    )
    try:
        done = tools.run(
            [
                unshare,
                "-m",
                "--propagation",
                "private",
                sys.executable,
                "-c",
                PROC_PROBE,
                str(tmp_path / "proc"),
                str(sleeper.pid),
                setpriv,
                bounding,
            ]
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"agent": True, "other_group": False}


def test_environment_file_names_real_settings() -> None:
    fields = {f"NODEAGENT_{name.upper()}" for name in NodeAgentConfiguration.model_fields}
    text = (files.SYSTEMD / "nodeagent.env").read_text()
    names = re.findall(r"^#?\s*([A-Z_][A-Z0-9_]*)=", text, flags=re.MULTILINE)
    assert names
    for name in names:
        assert name in fields | {"NODE_NAME", "KUBECONFIG"}, name


MDWE_EXEC = r"""
import ctypes, os, sys

# MemoryDenyWriteExecute=yes, as the kernel's own switch (PR_SET_MDWE, Linux 6.3):
# no mapping may become writable and executable, in this process and what it execs.
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:
    sys.exit(f"PR_SET_MDWE: {os.strerror(ctypes.get_errno())}")
os.execvp(sys.argv[1], sys.argv[1:])
"""

WRITE_EXECUTE = "import mmap; mmap.mmap(-1, 4096, prot=7)"
"""A mapping readable, writable and executable: what MemoryDenyWriteExecute refuses."""


def _mdwe_supported() -> bool:
    probe = tools.run([sys.executable, "-c", MDWE_EXEC, "true"])
    return probe.returncode == 0


@pytest.mark.kernel
def test_the_agent_reads_the_node_under_the_units_process_restrictions() -> None:
    """NoNewPrivileges, CapabilityBoundingSet and MemoryDenyWriteExecute applied with
    the kernel's own mechanisms (setpriv, PR_SET_MDWE): ``nodeagent signals`` reads
    this machine as the service would. A W+X mapping is refused under the same
    wrapper, so the restriction is really in force."""
    setpriv = tools.require("setpriv")
    if not _mdwe_supported():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+)")
    settings = unit()
    assert settings["NoNewPrivileges"] == ["yes"]
    assert settings["MemoryDenyWriteExecute"] == ["yes"]
    sandbox = [setpriv, f"--bounding-set={setpriv_bounding_set()}", "--no-new-privs"]
    sandbox += [sys.executable, "-c", MDWE_EXEC]

    refused = tools.run([*sandbox, sys.executable, "-c", WRITE_EXECUTE])
    assert refused.returncode != 0
    assert "Permission denied" in refused.stderr

    agent = shutil.which("nodeagent") or pytest.fail("nodeagent is not installed")
    done = tools.run([*sandbox, agent, "signals", "--output", "json"])
    assert done.returncode == 0, done.stderr
    assert "memory.available" in done.stdout
