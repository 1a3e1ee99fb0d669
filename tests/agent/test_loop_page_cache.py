"""``activePageCache: reclaimable`` through the whole loop: the real collector reads the
active page cache from the fixture host, the loop hands the engine, the metrics, the
annotation and the kernel triggers one view of it, and a hot cache is not evicted."""

from __future__ import annotations

from pathlib import Path

from nodeagent.model import Signal
from tests.agent.rig import Rig, pod
from tests.doubles.host import GIB, MIB, Memory

RECLAIMABLE = {"active_page_cache": "reclaimable"}


def hot_cache(rig: Rig) -> None:
    """16 GiB node; a 15.5 GiB working set, 12 GiB of it a pod's clean active page
    cache: 512 MiB available as the kubelet counts it, under the 1Gi threshold."""
    rig.host.root_memory(
        Memory(15 * GIB + 768 * MIB, inactive_file=256 * MIB, active_file=12 * GIB)
    )
    cache = pod("cache")
    rig.add_pod(cache, 0)
    rig.pods.set([cache])
    rig.host.pod(str(cache.uid), Memory(12 * GIB + 100 * MIB, active_file=12 * GIB), qos=cache.qos)


def test_the_kubelets_accounting_evicts_the_cache(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    hot_cache(rig)
    result = rig.cycle()
    assert result is not None
    assert [e.pod.name for e in result.decision.evictions] == ["cache"]


def test_reclaimable_keeps_it_and_every_consumer_sees_the_same_figure(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings=RECLAIMABLE)
    hot_cache(rig)
    result = rig.cycle()
    assert result is not None
    assert result.decision.evictions == ()
    assert not result.decision.thresholds_met
    counted = result.observations.value(Signal.MEMORY_AVAILABLE)
    assert counted is not None and counted.available == 12 * GIB + 512 * MIB
    assert result.observations.active_file_counted
    # the kernel's usage threshold is armed where the counted figure would cross
    # (usage + counted available - 1 GiB + 1), and the poll watches the cache shrink
    _, _, armed = rig.triggers.armed["memcg:node:memory.available<1Gi hard"]
    assert armed == (15 * GIB + 768 * MIB) + (12 * GIB + 512 * MIB) - 1 * GIB + 1
    assert "memory-poll:node" in rig.triggers.armed
    assert rig.triggers.probes["memory-poll:node"]() == 12 * GIB + 512 * MIB


def test_without_a_cache_the_kernel_threshold_alone_notifies(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings=RECLAIMABLE)
    rig.cycle()
    assert "memcg:node:memory.available<1Gi hard" in rig.triggers.armed
    assert not [name for name in rig.triggers.armed if name.startswith("memory-poll")]


def test_the_counted_cache_is_exported(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings=RECLAIMABLE)
    hot_cache(rig)
    rig.cycle()
    text = rig.metrics.exposition().decode()
    assert 'nodeagent_signal_active_file_bytes{signal="memory.available"} 1.2884901888e+10' in text
    assert 'nodeagent_signal_available_bytes{signal="memory.available"} 1.34217728e+10' in text
