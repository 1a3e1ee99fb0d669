"""The decision line of a cycle that evicts for a local-storage limit names the limit
(no threshold explains the eviction) beside the thresholds it reports as usual."""

from __future__ import annotations

from nodeagent.agent import report
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import (
    Decision,
    Eviction,
    LocalStorageLimit,
    PodInfo,
    PodUID,
    Signal,
    ThresholdMet,
)

MIB = 1 << 20


def test_a_local_storage_eviction_names_its_limit_in_the_decision_line() -> None:
    scratch = PodInfo("default", "scratch", PodUID("u1"))
    eviction = Eviction(scratch, LocalStorageLimit.EMPTY_DIR, 1, "Usage of EmptyDir ...", MIB)
    met = ThresholdMet(Signal.NODEFS_AVAILABLE, True, True, 100 * MIB, 80 * MIB)
    decision = Decision(
        time=3.0,
        thresholds_met=(met,),
        pressure={p: p is Pressure.DISK for p in Pressure},
        conditions=(),
        taints=(),
        evictions=(eviction,),
        candidates=(eviction,),
        ranked=(scratch.key,),
    )
    assert report.decision_message(decision) == (
        "nodefs.available 80Mi < 100Mi hard (acting); pressure disk; "
        "evict default/scratch (emptydirfs.limit, grace 1s)"
    )
    fields = report.decision_fields(decision, trigger="poll", decided_at=3.0)
    assert fields["evict"][0]["signal"] == "emptydirfs.limit"
