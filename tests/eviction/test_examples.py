"""Acceptance: ``simulate`` over each shipped example gives the decisions the semantics
call for. Expectations are computed here from the trace data and the kubelet's rules
(a small independent oracle), never copied from the engine's output."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.utils import parse_quantity

from nodeagent.agent.config import load_config
from nodeagent.eviction import replay, trace
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import Decision

from .builders import Gi, Mi

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> tuple[list[dict[str, Any]], list[Decision]]:
    policy = EvictionPolicy.from_settings(load_config(EXAMPLES / f"{name}.yaml", environ={}))
    text = (EXAMPLES / f"{name}.jsonl").read_text().splitlines()
    samples = [trace.parse_trace_line(t, n) for n, t in enumerate(text, start=1)]
    decisions = [cycle.decision for cycle in replay.replay(policy, samples)]
    return [json.loads(t) for t in text], decisions


@dataclass
class _Threshold:
    """One threshold as the kubelet's ``synchronize`` tracks it, for the oracle."""

    breached: Callable[[dict[str, Any]], bool]
    """The plain comparison on a trace line."""
    held: Callable[[dict[str, Any]], bool]
    """The comparison with min reclaim."""
    grace: float
    hard: bool
    since: float | None = None
    acting: bool = False


@dataclass(frozen=True)
class _Expected:
    act: bool
    hard: bool
    pressure: bool


def oracle(
    lines: Sequence[dict[str, Any]],
    thresholds: Sequence[_Threshold],
    transition: float,
    settle: float = 0.0,
) -> Iterator[_Expected]:
    last_active: float | None = None
    last_act: float | None = None
    for line in lines:
        now = line["time"]
        act = hard = active_any = False
        for t in thresholds:
            active = t.breached(line) or (t.acting and t.held(line))
            t.since = (now if t.since is None else t.since) if active else None
            actionable = t.since is not None and now - t.since >= t.grace
            t.acting = actionable
            active_any |= active
            act |= actionable
            hard |= actionable and t.hard
        if act and last_act is not None and now - last_act < settle:
            act = False
        if act:
            last_act = now
        if active_any:
            last_active = now
        yield _Expected(act, hard, last_active is not None and now - last_active < transition)


def kubelet_memory_order(pods: Sequence[dict[str, Any]]) -> list[str]:
    """The kubelet's ``rankMemoryPressure`` chain, written as comparators."""

    def stats(p: dict[str, Any]) -> int | None:
        used = p.get("usage", {}).get("memory")
        return None if used is None else int(used)

    def request(p: dict[str, Any]) -> int:
        return quantity(p.get("requests", {}).get("memory", 0))

    def exceeds(a: dict[str, Any], b: dict[str, Any]) -> int:
        if stats(a) is None or stats(b) is None:
            return (stats(b) is None) - (stats(a) is None)
        return (stats(b) > request(b)) - (stats(a) > request(a))  # type: ignore[operator]

    def priority(a: dict[str, Any], b: dict[str, Any]) -> int:
        return (int(a.get("priority", 0)) > int(b.get("priority", 0))) - (
            int(a.get("priority", 0)) < int(b.get("priority", 0))
        )

    def usage(a: dict[str, Any], b: dict[str, Any]) -> int:
        if stats(a) is None or stats(b) is None:
            return (stats(b) is None) - (stats(a) is None)
        over_a, over_b = stats(a) - request(a), stats(b) - request(b)  # type: ignore[operator]
        return (over_b > over_a) - (over_b < over_a)

    def chain(a: dict[str, Any], b: dict[str, Any]) -> int:
        return exceeds(a, b) or priority(a, b) or usage(a, b)

    evictable = [
        p
        for p in pods
        if not (p.get("critical") or p.get("static") or p.get("mirror"))
        and p.get("priority", 0) < 2_000_000_000
    ]
    return [p["name"] for p in sorted(evictable, key=functools.cmp_to_key(chain))]


def quantity(value: str | int) -> int:
    """Kubernetes quantities by the official client's parser, independent of ours."""
    return int(parse_quantity(value))  # type: ignore[no-untyped-call]


def memory_available(line: dict[str, Any]) -> int:
    return int(line["signals"]["memory.available"]["available"])


def common_invariants(lines: Sequence[dict[str, Any]], decisions: Sequence[Decision]) -> None:
    assert len(decisions) == len(lines)
    for line, decision in zip(lines, decisions, strict=True):
        assert decision.time == line["time"]
        assert decision.evictions == decision.candidates[: len(decision.evictions)]
        protected = {
            f"{p.get('namespace', 'default')}/{p['name']}"
            for p in line.get("pods", [])
            if p.get("critical") or p.get("static") or p.get("priority", 0) >= 2_000_000_000
        }
        assert not protected & set(decision.ranked)
        assert len(decision.evictions) <= 1  # the kubelet strategy


def test_memory_ramp() -> None:
    lines, decisions = load("memory-ramp")
    common_invariants(lines, decisions)
    reclaim = 256 * Mi
    expected = list(
        oracle(
            lines,
            [
                _Threshold(
                    lambda x: memory_available(x) < 500 * Mi,
                    lambda x: memory_available(x) < 500 * Mi + reclaim,
                    0,
                    True,
                ),
                _Threshold(
                    lambda x: memory_available(x) < Gi,
                    lambda x: memory_available(x) < Gi + reclaim,
                    30,
                    False,
                ),
            ],
            transition=60,
        )
    )
    assert any(e.act and not e.hard for e in expected) and any(e.hard for e in expected)
    for line, decision, want in zip(lines, decisions, expected, strict=True):
        assert bool(decision.evictions) is want.act, line["time"]
        assert decision.pressure[Pressure.MEMORY] is want.pressure, line["time"]
        if want.act:
            (eviction,) = decision.evictions
            assert eviction.pod.name == kubelet_memory_order(line["pods"])[0]
            victim = next(p for p in line["pods"] if p["name"] == eviction.pod.name)
            grace = 1 if want.hard else min(20, victim.get("terminationGracePeriodSeconds", 30))
            assert eviction.grace_period_seconds == grace
            assert eviction.message.startswith("The node was low on resource: memory. ")


def test_soft_oscillation() -> None:
    lines, decisions = load("soft-oscillation")
    common_invariants(lines, decisions)
    expected = list(
        oracle(
            lines,
            [
                _Threshold(lambda x: memory_available(x) < 256 * Mi, lambda x: False, 0, True),
                _Threshold(lambda x: memory_available(x) < Gi, lambda x: False, 60, False),
            ],
            transition=120,
        )
    )
    below = [memory_available(line) < Gi for line in lines]
    first_eviction = next(i for i, d in enumerate(decisions) if d.evictions)
    swings = [i for i in range(1, first_eviction) if below[i] != below[i - 1]]
    assert len(swings) >= 6, "the example must oscillate before anything is evicted"
    # evicted only once a full grace period passed below the threshold without a swing
    assert all(below[swings[-1] : first_eviction + 1])
    assert lines[first_eviction]["time"] - lines[swings[-1]]["time"] >= 60
    for line, decision, want in zip(lines, decisions, expected, strict=True):
        assert bool(decision.evictions) is want.act, line["time"]
        assert decision.pressure[Pressure.MEMORY] is want.pressure, line["time"]
    # pressure held through every swing above the threshold
    first_below = below.index(True)
    assert all(d.pressure[Pressure.MEMORY] for d in decisions[first_below:first_eviction])
    assert decisions[first_eviction].evictions[0].grace_period_seconds == 0  # max pod grace 0


def test_disk_fill_reclaims_images_first_then_evicts_the_writer() -> None:
    lines, decisions = load("disk-fill")
    common_invariants(lines, decisions)

    def nodefs(line: dict[str, Any]) -> int:
        return int(line["signals"]["nodefs.available"]["available"])

    capacity = lines[0]["signals"]["nodefs.available"]["capacity"]
    soft_bar = int(capacity * 0.15000000596046448)
    expected = list(
        oracle(
            lines,
            [
                _Threshold(
                    lambda x: nodefs(x) < int(capacity * 0.10000000149011612),
                    lambda x: nodefs(x) < int(capacity * 0.10000000149011612) + 2 * Gi,
                    0,
                    True,
                ),
                _Threshold(
                    lambda x: nodefs(x) < soft_bar,
                    lambda x: nodefs(x) < soft_bar + 2 * Gi,
                    60,
                    False,
                ),
            ],
            transition=120,
        )
    )
    acted = [i for i, e in enumerate(expected) if e.act]
    assert acted, "the example must reach an actionable threshold"
    for index, (line, decision, want) in enumerate(zip(lines, decisions, expected, strict=True)):
        assert decision.pressure[Pressure.DISK] is want.pressure, line["time"]
        assert bool(decision.node_reclaim or decision.evictions) is want.act, line["time"]
        if not want.act:
            continue
        assert decision.node_reclaim == ("containers", "images")  # single filesystem
        images = line["reclaimable"]["images"]
        enough = nodefs(line) + images >= soft_bar + 2 * Gi
        assert bool(decision.evictions) is not enough, line["time"]
        if decision.evictions:
            (eviction,) = decision.evictions

            # The biggest user over its ephemeral-storage request goes first.
            def over(p: dict[str, Any]) -> int:
                used = sum(v for k, v in p["usage"].items() if not k.endswith("Inodes"))
                request = quantity(p.get("requests", {}).get("ephemeral-storage", 0))
                return int(used - request)

            assert eviction.pod.name == max(line["pods"], key=over)["name"]
            assert eviction.grace_period_seconds == min(30, 10)
            assert index == acted[-1]
    assert not decisions[acted[0]].evictions  # the first time, images were enough


def test_psi_memory() -> None:
    lines, decisions = load("psi-memory")
    common_invariants(lines, decisions)

    def node_psi(line: dict[str, Any], kind: str) -> float:
        return float(line["psi"]["node/memory"][kind]["avg10"])  # the node cgroup's file

    expected = list(
        oracle(
            lines,
            [
                _Threshold(
                    lambda x: node_psi(x, "full") > 50, lambda x: node_psi(x, "full") > 50, 0, True
                ),
                _Threshold(
                    lambda x: node_psi(x, "some") > 20,
                    lambda x: node_psi(x, "some") > 15,
                    20,
                    False,
                ),
            ],
            transition=30,
            settle=10,
        )
    )
    assert sum(e.act for e in expected) >= 2 and any(e.hard for e in expected)
    for line, decision, want in zip(lines, decisions, expected, strict=True):
        assert bool(decision.evictions) is want.act, line["time"]
        assert decision.pressure[Pressure.MEMORY] is want.pressure, line["time"]
        if want.act:
            (eviction,) = decision.evictions
            assert eviction.pod.name == kubelet_memory_order(line["pods"])[0]
            assert eviction.grace_period_seconds == (1 if want.hard else 10)
    # softPressureTaint: PreferNoSchedule from the soft onset until the grace period passes.
    onset = next(i for i, line in enumerate(lines) if node_psi(line, "some") > 20)
    first = next(i for i, d in enumerate(decisions) if d.evictions)
    assert onset < first
    for decision in decisions[onset:first]:
        assert [t.effect for t in decision.taints] == ["PreferNoSchedule"]
    assert [t.effect for t in decisions[first].taints] == ["NoSchedule"]


def test_page_cache() -> None:
    """Counting clean active page cache as available: the hot index is never evicted,
    the job that ramps into its cache is, once what the kernel cannot reclaim leaves
    less than 500Mi; with the kubelet's accounting the index goes first, every cycle."""
    lines, reclaimable = load("page-cache")
    common_invariants(lines, reclaimable)
    policy = EvictionPolicy.from_settings(
        load_config(
            EXAMPLES / "page-cache.yaml", environ={}, overrides={"active_page_cache": "workingSet"}
        )
    )
    text = (EXAMPLES / "page-cache.jsonl").read_text().splitlines()
    samples = [trace.parse_trace_line(t, n) for n, t in enumerate(text, start=1)]
    working_set = [cycle.decision for cycle in replay.replay(policy, samples)]

    def allocatable(line: dict[str, Any], counted: bool) -> int:
        observed = line["signals"]["allocatableMemory.available"]
        return int(observed["available"]) + (int(observed["activeFile"]) if counted else 0)

    def without_cache(pods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**p, "usage": {"memory": p["usage"]["memory"] - p["usage"].get("activeFile", 0)}}
            for p in pods
        ]

    for counted, decisions in ((True, reclaimable), (False, working_set)):
        for line, decision in zip(lines, decisions, strict=True):
            met = allocatable(line, counted) < 500 * Mi
            assert bool(decision.evictions) is met, (counted, line["time"])
            if met:
                pods = without_cache(line["pods"]) if counted else line["pods"]
                assert [e.pod.name for e in decision.evictions] == [kubelet_memory_order(pods)[0]]
    assert {e.pod.name for d in reclaimable for e in d.evictions} == {"etl-7f2c"}
    assert working_set[0].evictions[0].pod.name == "search-index-0"


def test_every_example_config_passes_config_check_and_runs_in_both_strategies() -> None:
    for config in sorted(EXAMPLES.glob("*.yaml")):
        policy = EvictionPolicy.from_settings(load_config(config, environ={}))
        jsonl = EXAMPLES / f"{config.stem}.jsonl"
        if not jsonl.exists():
            continue
        samples = [
            trace.parse_trace_line(t, n) for n, t in enumerate(jsonl.read_text().splitlines(), 1)
        ]
        for model_reclaim in (False, True):
            cycles = list(replay.replay(policy, samples, model_reclaim=model_reclaim))
            assert len(cycles) == len(samples)


@pytest.mark.parametrize(
    "name",
    ["memory-ramp", "disk-fill", "soft-oscillation", "psi-memory", "local-storage", "page-cache"],
)
def test_each_example_has_its_config_and_trace(name: str) -> None:
    assert (EXAMPLES / f"{name}.yaml").is_file() and (EXAMPLES / f"{name}.jsonl").is_file()
