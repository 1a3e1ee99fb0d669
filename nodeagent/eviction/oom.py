"""The kernel OOM killer's view of pods: the ``oom_score_adj`` the kubelet gives containers.

When eviction is too slow the kernel kills by ``oom_score + oom_score_adj``; knowing the
adjustment per QoS class tells an operator (and the agent's logs) who the kernel would
take first (``GetContainerOOMScoreAdjust`` in ``pkg/kubelet/qos/policy.go``):

==================================  =========================================
system-node-critical pod            -997
Guaranteed                          -997
BestEffort                          1000
Burstable                           ``1000 - 1000 * request // capacity``, kept within
                                    3..999 (3 so that it stays above Guaranteed
                                    pods, 999 so that it stays below BestEffort)
kubelet, kube-proxy                 -999
==================================  =========================================

A sidecar (restartable init container) of a Burstable pod is capped at the score of the
pod's smallest regular container, so it is never killed before the app it serves. The
kubernetes.io docs give the Burstable floor as 2; the code's is 3, used here.
"""

from __future__ import annotations

from nodeagent.k8s.pods import QOSClass
from nodeagent.model import PodInfo

__all__ = [
    "BEST_EFFORT_OOM_SCORE_ADJ",
    "GUARANTEED_OOM_SCORE_ADJ",
    "KUBELET_OOM_SCORE_ADJ",
    "KUBE_PROXY_OOM_SCORE_ADJ",
    "SYSTEM_NODE_CRITICAL_PRIORITY",
    "container_oom_score_adj",
    "pod_oom_score_adj",
]

GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000
KUBELET_OOM_SCORE_ADJ = -999
KUBE_PROXY_OOM_SCORE_ADJ = -999
SYSTEM_NODE_CRITICAL_PRIORITY = 2_000_001_000
"""The priority value of the ``system-node-critical`` class."""


def container_oom_score_adj(
    *,
    qos: QOSClass,
    memory_request: int,
    memory_capacity: int,
    node_critical: bool = False,
    sidecar: bool = False,
    smallest_regular_request: int = 0,
) -> int:
    """The ``oom_score_adj`` of one container.

    ``memory_request`` is the container's own request in bytes, ``memory_capacity`` the
    node's memory; ``smallest_regular_request`` (bytes) matters only for a sidecar.
    """
    if memory_capacity <= 0:
        raise ValueError(f"memory capacity must be positive, got {memory_capacity}")
    if node_critical or qos is QOSClass.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QOSClass.BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    score = 1000 - (1000 * memory_request) // memory_capacity
    if sidecar and smallest_regular_request > 0:
        score = min(score, 1000 - (1000 * smallest_regular_request) // memory_capacity)
    if score < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if score == BEST_EFFORT_OOM_SCORE_ADJ:
        return score - 1
    return score


def pod_oom_score_adj(pod: PodInfo, memory_capacity: int) -> int:
    """The score of a pod taken as one container with the pod's total memory request
    (exact for single-container pods; a summary for logs otherwise). A pod at the
    system-node-critical priority is node-critical: that priority alone makes it critical,
    whatever its other flags (only the system-node-critical class can carry it)."""
    return container_oom_score_adj(
        qos=pod.qos,
        memory_request=pod.requests.get("memory", 0),
        memory_capacity=memory_capacity,
        node_critical=pod.priority >= SYSTEM_NODE_CRITICAL_PRIORITY,
    )
