"""Which cgroup v2 kernels a test session boots, and what a test does when its own did not.

The rules (issue 33): the tests run on user-mode-linux where it boots, on KVM where
``/dev/kvm`` can run Debian's kernel, on both where both do; on qemu's emulation (TCG)
only where neither boots, since it is slower. A kernel that did not boot while another
did is skipped with its reason. When none booted, the tests skip with one line naming
every kernel's reason, except on CI (``CI=true``) where any kernel was tried (it was
installed and could run here) but failed: then they fail, with the kernels' own words.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.uml import machine
from tests.uml.machine import Kernel

FALLBACK = Kernel.TCG


@dataclass(frozen=True)
class Attempt:
    kernel: Kernel
    guest: machine.Guest | None
    why: str | None
    """Why there is no guest: the kernel was not tried (and why), or how it failed."""
    tried: bool


class Action(enum.Enum):
    RUN = "run"
    SKIP = "skip"
    FAIL = "fail"


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str = ""


def decide(kernel: Kernel, attempts: Mapping[Kernel, Attempt], *, ci: bool) -> Verdict:
    """What a test parametrized with ``kernel`` does, given every kernel's attempt."""
    if attempts[kernel].guest is not None:
        return Verdict(Action.RUN)
    if any(attempt.guest is not None for attempt in attempts.values()):
        return Verdict(Action.SKIP, f"{kernel}: {attempts[kernel].why}")
    reason = "no cgroup v2 kernel booted: " + "; ".join(
        f"{attempt.kernel}: {attempt.why}" for attempt in attempts.values()
    )
    if ci and any(attempt.tried for attempt in attempts.values()):
        return Verdict(Action.FAIL, reason)
    return Verdict(Action.SKIP, reason)


Boot = Callable[[Kernel, Path], machine.Guest]
"""Boots a kernel with a work directory, or raises :class:`machine.BootFailed`."""


class Guests:
    """Each kernel attempted at most once a session, on first demand; ``asked`` (if not
    empty) limits the attempts to those kernels, TCG then included as any other."""

    def __init__(
        self,
        workdir: Path,
        *,
        boot: Boot,
        missing: Callable[[Kernel], str | None] = machine.missing,
        asked: Sequence[Kernel] = (),
    ) -> None:
        self.workdir = workdir
        self.boot = boot
        self.missing = missing
        self.asked = list(asked)
        self.attempts: dict[Kernel, Attempt] = {}

    def attempt(self, kernel: Kernel) -> Attempt:
        if kernel not in self.attempts:
            self.attempts[kernel] = self._attempt(kernel)
        return self.attempts[kernel]

    def all(self) -> dict[Kernel, Attempt]:
        return {kernel: self.attempt(kernel) for kernel in Kernel}

    def _attempt(self, kernel: Kernel) -> Attempt:
        if self.asked and kernel not in self.asked:
            asked = ",".join(self.asked)
            return Attempt(kernel, None, f"not asked for (NODEAGENT_V2_KERNELS={asked})", False)
        if not self.asked and kernel is FALLBACK:
            booted = [k for k in Kernel if k is not FALLBACK and self.attempt(k).guest]
            if booted:
                why = (
                    f"not needed: the tests ran on {', '.join(booted)} (qemu's emulation is "
                    "the fallback where neither user-mode-linux nor KVM boots)"
                )
                return Attempt(kernel, None, why, tried=False)
        reason = self.missing(kernel)
        if reason is not None:
            return Attempt(kernel, None, reason, tried=False)
        try:
            guest = self.boot(kernel, self.workdir / str(kernel))
        except machine.BootFailed as failure:
            return Attempt(kernel, None, str(failure), tried=True)
        return Attempt(kernel, guest, None, tried=True)

    def close(self) -> None:
        for attempt in self.attempts.values():
            if attempt.guest is not None:
                attempt.guest.stop()
