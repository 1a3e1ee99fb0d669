"""PrioritySort (QueueSort): higher priority first, then earlier queue time."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler.framework import Handle, QueuedPod

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def less(self, a: QueuedPod, b: QueuedPod) -> bool:
        if a.pod.priority != b.pod.priority:
            return a.pod.priority > b.pod.priority
        return (a.timestamp, a.sequence) < (b.timestamp, b.sequence)


def new(args: Any, handle: Handle) -> PrioritySort:
    return PrioritySort()
