"""Which pods the agent may evict: a pure rule, checked again right before every eviction.

The engine already leaves critical pods out of its candidates; this is the operator's
own fence on top, and the last check before an irreversible call:

* never critical pods (priority >= 2e9), static pods or their mirror pods (the kubelet's
  ``IsCriticalPod``);
* DaemonSet pods only with ``evictDaemonSetPods`` (their controller recreates them on the
  same node at once, so evicting them relieves nothing);
* never pods in ``protectedNamespaces`` or matching one of ``protectedLabels``;
* never pods with priority at or above ``evictionPriorityThreshold`` when it is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.actuators.settings import ActuationSettings
from nodeagent.kube import selectors
from nodeagent.model import PodInfo


@dataclass(frozen=True, slots=True)
class SafetyPolicy:
    evict_daemon_set_pods: bool = False
    protected_namespaces: frozenset[str] = frozenset({"kube-system"})
    protected_labels: tuple[selectors.LabelSelector, ...] = ()
    priority_threshold: int | None = None

    @classmethod
    def from_settings(cls, settings: ActuationSettings) -> SafetyPolicy:
        return cls(
            evict_daemon_set_pods=settings.evict_daemon_set_pods,
            protected_namespaces=frozenset(settings.protected_namespaces),
            protected_labels=tuple(
                selectors.parse_label_selector(text) for text in settings.protected_labels
            ),
            priority_threshold=settings.eviction_priority_threshold,
        )


def evictable(pod: PodInfo, policy: SafetyPolicy) -> str | None:
    """``None`` if ``pod`` may be evicted, else the reason it may not (for logs/events)."""
    if pod.mirror:
        return "mirror pod of a static pod"
    if pod.static:
        return "static pod"
    if pod.critical:
        return f"critical pod (priority {pod.priority})"
    if pod.daemonset and not policy.evict_daemon_set_pods:
        return "DaemonSet pod (evictDaemonSetPods is off)"
    if pod.namespace in policy.protected_namespaces:
        return f"protected namespace {pod.namespace}"
    for selector in policy.protected_labels:
        if selector.matches(pod.labels):
            return f"protected by label selector {selector}"
    if policy.priority_threshold is not None and pod.priority >= policy.priority_threshold:
        return f"priority {pod.priority} >= evictionPriorityThreshold {policy.priority_threshold}"
    return None
