"""Kubernetes' rules about a pod that both programs apply: phases, QoS class, criticality.

* **Phases**: a Succeeded or Failed pod holds no resources, cannot be evicted and is never
  scheduled (kube-scheduler's informer filters it out by field selector).
* **QoS**: the kubelet's ``GetPodQOS`` (``pkg/apis/core/v1/helper/qos``): no cpu or
  memory request or limit anywhere is BestEffort; cpu and memory limits on every
  container, with requests equal to them, Guaranteed; anything else Burstable.
  Pod-level resources, when set, stand for the containers.
* **Criticality**: a static or mirror pod, or priority at or above
  ``scheduling.SystemCriticalPriority`` (``kubelettypes.IsCriticalPod``); a pod naming one
  of the two system priority classes counts even before admission fills its priority.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from nodeagent.k8s.resources import CPU, MEMORY, ContainerResources, PodResources, add_into

TERMINAL_PHASES = ("Succeeded", "Failed")
NOT_TERMINAL_FIELD_SELECTOR = ",".join(f"status.phase!={phase}" for phase in TERMINAL_PHASES)
"""The field selector of a watch that never sees finished pods."""

CRITICAL_PRIORITY = 2_000_000_000
"""``scheduling.SystemCriticalPriority``: system-cluster-critical and above."""
SYSTEM_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SOURCE_ANNOTATION = "kubernetes.io/config.source"
QOS_RESOURCES = (CPU, MEMORY)


class QOSClass(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


def is_terminal(phase: Any) -> bool:
    """Succeeded or Failed."""
    return phase in TERMINAL_PHASES


def is_mirror(annotations: Mapping[str, Any]) -> bool:
    return MIRROR_ANNOTATION in annotations


def is_static(annotations: Mapping[str, Any]) -> bool:
    """A static pod (its config source is not the API server) or its mirror."""
    source = annotations.get(SOURCE_ANNOTATION)
    return is_mirror(annotations) or (source is not None and source != "api")


def is_critical(annotations: Mapping[str, Any], priority: int, priority_class: Any) -> bool:
    return (
        is_static(annotations)
        or priority >= CRITICAL_PRIORITY
        or priority_class in SYSTEM_PRIORITY_CLASSES
    )


def qos_class(resources: PodResources) -> QOSClass:
    """``GetPodQOS`` over app and init containers."""
    if resources.pod_requests or resources.pod_limits:
        groups: Iterable[ContainerResources] = (
            ContainerResources(
                {**resources.pod_limits, **resources.pod_requests}, resources.pod_limits
            ),
        )
    else:
        groups = (*resources.containers, *resources.init_containers)
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for container in groups:
        container_limits = {
            name: value
            for name, value in container.limits.items()
            if name in QOS_RESOURCES and value
        }
        container_requests = {
            name: value
            for name, value in {**container_limits, **container.requests}.items()
            if name in QOS_RESOURCES and value
        }
        add_into(requests, container_requests, int.__add__)
        add_into(limits, container_limits, int.__add__)
        if set(container_limits) != set(QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return QOSClass.BEST_EFFORT
    if guaranteed and all(limits.get(name) == value for name, value in requests.items()):
        return QOSClass.GUARANTEED if len(requests) == len(limits) else QOSClass.BURSTABLE
    return QOSClass.BURSTABLE
