"""The OOM race against the real kubelet, in CI's size: the race of
``bench_oom_race --kubelet`` (benchmarks/oom_race_kubelet.py) with three runs per rate
at one threshold. With the agent beside the kubelet no run may end in an OOM kill; the
kubelet alone, whose eviction manager looks every 10 s, loses most of them (the full
table, ten runs per rate up to 1 GiB/s and two thresholds, is in docs/detection.md).

With the agent, the fastest rate here is 512 MiB/s, a second from the crossing to the
limit. At 1 GiB/s the margin is half that, and on a loaded CI machine one run in three
was lost after the agent had decided within 1 ms: the real kubelet's stop came too late,
which is the kubelet's time, not the agent's, and the benchmark measures it. The kubelet
alone also runs at 1 GiB/s, where it loses every time, so that "most" does not rest on
the slower rates alone."""

from __future__ import annotations

import collections
from collections.abc import Iterator

import pytest

from benchmarks import oom_race_kubelet as race
from tests.node import agent as agents
from tests.node.node import Node

pytestmark = [pytest.mark.node, pytest.mark.slow]

THRESHOLD = "500Mi"
RATES = ("256Mi", "512Mi")
ALONE_RATES = (*RATES, "1Gi")
RUNS = 3


@pytest.fixture
def kernel_log() -> Iterator[race.KernelLog]:
    log = race.KernelLog()
    yield log
    log.close()


def test_the_agent_evicts_before_the_oom_killer_where_the_kubelet_alone_does_not(
    node: Node, kernel_log: race.KernelLog
) -> None:
    with node.reconfigured(
        evictionHard={**node.eviction_hard, "memory.available": THRESHOLD},
        evictionPressureTransitionPeriod="5s",
    ):
        the_race = race.Race(node, kernel_log)
        agents.identity(node)
        floor = the_race.baseline()
        try:
            alone = [the_race.one("kubelet", THRESHOLD, r, floor) for r in ALONE_RATES * RUNS]
            with agents.running(
                node,
                [f"--eviction-hard=memory.available<{THRESHOLD}"],
                name="race-agent",
            ) as agent:
                agents.wait_ready(agent)
                the_race.agent_log = agent.process.log
                beside = [the_race.one("kubelet+agent", THRESHOLD, r, floor) for r in RATES * RUNS]
        finally:
            the_race.close()
    print()
    print(race.table(alone + beside))
    outcomes = collections.Counter(run.outcome for run in beside)
    assert outcomes["oom"] == 0, beside
    assert outcomes["before-ramp"] + outcomes["unknown"] + outcomes["timeout"] == 0, beside
    lost = sum(run.outcome == "oom" for run in alone)
    assert lost >= len(alone) // 2, alone
