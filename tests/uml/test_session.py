"""The rules of which kernels a session boots and what a test does without its own
(:mod:`tests.uml.session`), with fake boots: no kernel is started here."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.uml import machine
from tests.uml.machine import Kernel
from tests.uml.session import Action, Attempt, Guests, Verdict, decide

UML, KVM, TCG = Kernel.UML, Kernel.KVM, Kernel.TCG
PANIC = "uml (user-mode-linux) did not boot: ptrace set fp regs failed, errno = 14"


def fake_guest(kernel: Kernel) -> machine.Guest:
    return machine.Guest(kernel, Path("/nonexistent"), mem_mib=1, answer_grace_s=1)


def booted(kernel: Kernel) -> Attempt:
    return Attempt(kernel, fake_guest(kernel), None, tried=True)


def failed(kernel: Kernel, words: str = PANIC) -> Attempt:
    return Attempt(kernel, None, words, tried=True)


def missing(kernel: Kernel, why: str = "no /dev/kvm") -> Attempt:
    return Attempt(kernel, None, why, tried=False)


@pytest.mark.parametrize(
    ("attempts", "ci", "expected"),
    [
        pytest.param(
            [booted(UML), missing(KVM), missing(TCG, "not needed")],
            True,
            {
                UML: Verdict(Action.RUN),
                KVM: Verdict(Action.SKIP, "kvm: no /dev/kvm"),
                TCG: Verdict(Action.SKIP, "tcg: not needed"),
            },
            id="uml-boots",
        ),
        pytest.param(
            [failed(UML), missing(KVM), booted(TCG)],
            True,
            {
                UML: Verdict(Action.SKIP, f"uml: {PANIC}"),
                KVM: Verdict(Action.SKIP, "kvm: no /dev/kvm"),
                TCG: Verdict(Action.RUN),
            },
            id="amx-cpu-without-kvm-falls-back-to-tcg",
        ),
        pytest.param(
            [failed(UML), missing(KVM), missing(TCG, "no qemu-system-x86_64")],
            True,
            dict.fromkeys(
                Kernel,
                Verdict(
                    Action.FAIL,
                    f"no cgroup v2 kernel booted: uml: {PANIC}; kvm: no /dev/kvm; "
                    "tcg: no qemu-system-x86_64",
                ),
            ),
            id="ci-none-booted-one-tried-fails",
        ),
        pytest.param(
            [failed(UML), missing(KVM), missing(TCG, "no qemu-system-x86_64")],
            False,
            dict.fromkeys(
                Kernel,
                Verdict(
                    Action.SKIP,
                    f"no cgroup v2 kernel booted: uml: {PANIC}; kvm: no /dev/kvm; "
                    "tcg: no qemu-system-x86_64",
                ),
            ),
            id="not-ci-none-booted-skips",
        ),
        pytest.param(
            [missing(UML, "no linux.uml"), missing(KVM), missing(TCG, "no qemu")],
            True,
            dict.fromkeys(
                Kernel,
                Verdict(
                    Action.SKIP,
                    "no cgroup v2 kernel booted: uml: no linux.uml; kvm: no /dev/kvm; tcg: no qemu",
                ),
            ),
            id="ci-neither-installed-skips",
        ),
    ],
)
def test_the_verdicts(attempts: list[Attempt], ci: bool, expected: dict[Kernel, Verdict]) -> None:
    by_kernel = {attempt.kernel: attempt for attempt in attempts}
    assert {kernel: decide(kernel, by_kernel, ci=ci) for kernel in Kernel} == expected


STATES = {"booted": booted, "failed": failed, "missing": missing}


@pytest.mark.parametrize("ci", [True, False])
def test_every_combination_keeps_the_rules(ci: bool) -> None:
    """Over every state of every kernel: a test runs exactly on its booted kernel; it
    fails only on CI when nothing booted and something was tried; with nothing booted,
    every kernel's tests give the one same reason."""
    for states in itertools.product(STATES, repeat=len(Kernel)):
        attempts = {k: STATES[state](k) for k, state in zip(Kernel, states, strict=True)}
        verdicts = {kernel: decide(kernel, attempts, ci=ci) for kernel in Kernel}
        for kernel, verdict in verdicts.items():
            assert (verdict.action is Action.RUN) == (
                states[list(Kernel).index(kernel)] == "booted"
            )
        if "booted" not in states:
            assert len(set(verdicts.values())) == 1
            fails = ci and "failed" in states
            assert next(iter(verdicts.values())).action is (Action.FAIL if fails else Action.SKIP)
        else:
            assert Action.FAIL not in {v.action for v in verdicts.values()}


class FakeBoots:
    def __init__(self, outcomes: dict[Kernel, str]) -> None:
        self.outcomes = outcomes
        self.booted: list[Kernel] = []

    def boot(self, kernel: Kernel, workdir: Path) -> machine.Guest:
        self.booted.append(kernel)
        if self.outcomes[kernel] == "fails":
            raise machine.BootFailed(f"{kernel} did not boot: Kernel panic")
        return fake_guest(kernel)

    def missing(self, kernel: Kernel) -> str | None:
        return "not installed" if self.outcomes[kernel] == "missing" else None


@pytest.mark.parametrize(
    ("outcomes", "asked", "boots", "running"),
    [
        ({UML: "boots", KVM: "boots", TCG: "boots"}, [], [UML, KVM], {UML, KVM}),
        ({UML: "boots", KVM: "missing", TCG: "boots"}, [], [UML], {UML}),
        ({UML: "fails", KVM: "missing", TCG: "boots"}, [], [UML, TCG], {TCG}),
        ({UML: "missing", KVM: "boots", TCG: "boots"}, [], [KVM], {KVM}),
        ({UML: "fails", KVM: "fails", TCG: "fails"}, [], [UML, KVM, TCG], set()),
        ({UML: "boots", KVM: "boots", TCG: "boots"}, [TCG], [TCG], {TCG}),
        ({UML: "boots", KVM: "boots", TCG: "boots"}, [UML, TCG], [UML, TCG], {UML, TCG}),
    ],
)
def test_tcg_is_booted_only_where_neither_other_kernel_boots_unless_asked(
    outcomes: dict[Kernel, str],
    asked: list[Kernel],
    boots: list[Kernel],
    running: set[Kernel],
    tmp_path: Path,
) -> None:
    fake = FakeBoots(outcomes)
    guests = Guests(tmp_path, boot=fake.boot, missing=fake.missing, asked=asked)
    for _ in range(2):  # asked again, nothing is booted twice
        attempts = guests.all()
    assert fake.booted == boots
    assert {k for k, attempt in attempts.items() if attempt.guest is not None} == running
    if running and TCG not in running and not asked:
        assert str(attempts[TCG].why).startswith("not needed: the tests ran on")
