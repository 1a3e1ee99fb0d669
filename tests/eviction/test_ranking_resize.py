"""Ranking a pod mid-resize as the kubelet does: its eviction manager reads the
allocated pod (``getAllocatedPods``), so a memory resize the kubelet granted counts at
once, even before the runtime applied it, and one it deferred does not count yet."""

from __future__ import annotations

from typing import Any

from nodeagent.agent.podinfo import pod_info
from nodeagent.eviction import ranking
from nodeagent.model import FsLayout, PodUsage, Signal

GI = 1024**3


def _pod(name: str, conditions: list[dict[str, Any]], allocated: str, priority: int = 0) -> Any:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "priority": priority,
            "containers": [
                {"name": "app", "image": "i", "resources": {"requests": {"memory": "2Gi"}}}
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": "app",
                    "allocatedResources": {"memory": allocated},
                    "resources": {"requests": {"memory": "1Gi"}},
                }
            ],
        },
    }


IN_PROGRESS = [{"type": "PodResizeInProgress", "status": "True"}]
DEFERRED = [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]


def test_a_granted_resize_up_is_not_over_its_old_request() -> None:
    # both use 1.5Gi, above the old 1Gi request, below the new 2Gi one; the granted pod
    # has the lower priority, yet the deferred one is over its (allocated) request and
    # goes first, as exceedMemoryRequests orders them before priority
    granted = pod_info(_pod("granted", IN_PROGRESS, "2Gi", priority=0))
    deferred = pod_info(_pod("deferred", DEFERRED, "1Gi", priority=100))
    assert granted.requests["memory"] == 2 * GI
    assert deferred.requests["memory"] == GI
    usage = {p.uid: PodUsage(p.uid, memory=3 * GI // 2) for p in (granted, deferred)}
    ranked = ranking.rank(Signal.MEMORY_AVAILABLE, FsLayout.SINGLE, [granted, deferred], usage)
    assert [p.name for p, _ in ranked] == ["deferred", "granted"]


def test_after_the_resize_the_new_request_counts() -> None:
    done = pod_info(_pod("done", [], "2Gi"))
    assert done.requests["memory"] == 2 * GI
