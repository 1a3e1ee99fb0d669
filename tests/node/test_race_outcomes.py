"""How the real-kubelet race names a ramp evicted without a crossing stamp (no node
needed): an eviction decided after the ramp began is that eviction, one decided before
it is "before ramp"."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import oom_race_kubelet as race


def a_race(agent_log: Path) -> race.Race:
    bare = object.__new__(race.Race)
    bare.namespace = "race-x"
    bare.agent_log = agent_log
    bare.wall_offset = 1000.0
    return bare


def test_an_unstamped_eviction_is_named_by_when_it_was_decided(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    decision = {"evict": [{"pod": "race-x/ramp-a"}], "decidedMonotonic": 50.0}
    log.write_text(json.dumps(decision) + "\n")
    kubelet = tmp_path / "kubelet.log"
    kubelet.write_text(
        'I1128 22:58:36.029049 1 eviction_manager.go:410] "Eviction manager: pods ranked for'
        ' eviction" pods=["race-x/ramp-b"]\n'
        'I1128 22:58:36.180644 1 eviction_manager.go:635] "Eviction manager: pod is evicted'
        ' successfully" pod="race-x/ramp-b"\n'
    )
    the_race = a_race(log)
    during = the_race._decided_during_ramp
    assert during("ramp-a", "api-eviction", 49.0, kubelet, 0)
    assert not during("ramp-a", "api-eviction", 51.0, kubelet, 0)  # the last run's pressure
    assert not during("ramp-c", "api-eviction", 0.0, kubelet, 0)  # no decision of the agent's
    decided = race.klog_wall(kubelet.read_text().splitlines()[0])
    assert decided is not None
    began = decided - the_race.wall_offset
    assert during("ramp-b", "kubelet-eviction", began - 1, kubelet, 0)
    assert not during("ramp-b", "kubelet-eviction", began + 1, kubelet, 0)
    assert not during("ramp-a", "oom", 0.0, kubelet, 0)
