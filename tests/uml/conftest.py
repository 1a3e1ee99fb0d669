"""Fixtures for tests on a real cgroup v2 kernel (see :mod:`tests.uml.machine`).

``guest`` is parametrized by kernel: every test here runs on user-mode-linux where it
boots, on Debian's kernel under KVM where ``/dev/kvm`` can run it, on both where both
do; under qemu's emulation (TCG) only where neither does. Test ids name the kernel
(``[uml]``, ``[kvm]``, ``[tcg]``), failures name its release, and the summary at the end
says what booted, in how long, and why anything did not. Each kernel boots once for the
whole run; each test module runs its checks in one command and asserts on the results.

No silent skip (the rules are :mod:`tests.uml.session`'s): a kernel that is missing or
cannot run here is skipped with one line saying why; on CI (``CI=true``), if any kernel
could be tried and none booted, every test here fails with the kernels' own words.
``NODEAGENT_V2_KERNELS=uml,tcg`` (a comma-separated list) tries only those, TCG then
not as a fallback.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.uml import machine
from tests.uml.machine import Kernel
from tests.uml.session import Action, Guests, decide

GUEST_MEM_MIB = 768
GUEST_DISK_MIB = 64
GUESTS = pytest.StashKey[Guests]()


def boot(kernel: Kernel, workdir: Path) -> machine.Guest:
    return machine.start(kernel, mem_mib=GUEST_MEM_MIB, disk_mib=GUEST_DISK_MIB, workdir=workdir)


@pytest.fixture(scope="session")
def guests(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Guests]:
    asked = os.environ.get("NODEAGENT_V2_KERNELS", "")
    registry = Guests(
        tmp_path_factory.mktemp("guests"),
        boot=boot,
        asked=[Kernel(name.strip()) for name in asked.split(",") if name.strip()],
    )
    request.config.stash[GUESTS] = registry
    yield registry
    registry.close()


@pytest.fixture(scope="session", params=list(Kernel), ids=str)
def guest(request: pytest.FixtureRequest, guests: Guests) -> machine.Guest:
    """A booted cgroup v2 kernel: ``guest.run(command, timeout_s=...)`` runs ``command``
    as root inside (cwd the repository) and returns its :class:`~tests.uml.machine.Run`."""
    kernel: Kernel = request.param
    attempt = guests.attempt(kernel)
    verdict = decide(kernel, guests.all(), ci=os.environ.get("CI") == "true")
    if verdict.action is Action.FAIL:
        pytest.fail(verdict.reason)
    if verdict.action is Action.SKIP:
        skip(verdict.reason)
    assert attempt.guest is not None
    if attempt.guest.gone is not None:
        pytest.fail(f"the {attempt.guest} guest is gone: {attempt.guest.gone}")
    return attempt.guest


SKIPS: dict[str, tuple[str, int]] = {}
"""The kernel skips' reasons, and where they were raised."""


def skip(reason: str) -> NoReturn:
    """``pytest.skip``, reported at this fixture rather than at each test, so that the
    short summary (``-ra``) folds a kernel's skipped tests into one line."""
    caller = inspect.stack()[1]
    SKIPS[reason] = (caller.filename, caller.lineno)
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        if reason in SKIPS:
            report.longrepr = (*SKIPS[reason], report.longrepr[2])
    return report


def results(guest: machine.Guest, run: machine.Run, name: str) -> Any:
    """The JSON a script inside wrote, or a failure showing its output and the console."""
    path: Path = run.results / f"{name}.json"
    if run.status != 0 or not path.is_file():
        pytest.fail(
            f"the checks inside {guest} did not finish (status {run.status}, timed out "
            f"{run.timed_out}):\n{run.output[-6000:]}\n--- console ---\n{guest.console()[-3000:]}"
        )
    return json.loads(path.read_text())


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    registry = config.stash.get(GUESTS, None)
    if registry is None:
        return
    terminalreporter.section("cgroup v2 kernels")
    for kernel in Kernel:
        attempt = registry.attempts.get(kernel)
        if attempt is None:
            continue
        if attempt.guest is not None:
            guest = attempt.guest
            terminalreporter.write_line(
                f"{kernel}: Linux {guest.release} ({kernel.description}), booted in "
                f"{guest.boot_s:.1f} s, {guest.runs} commands run"
            )
        else:
            terminalreporter.write_line(f"{kernel}: {attempt.why}")
