"""DefaultBinder (Bind): hands the binding to the framework's binder (live: the API's
``pods/binding``; offline: a record)."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import Binder, CycleState, Handle

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, binder: Binder) -> None:
        self._binder = binder

    def bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        return self._binder.bind(pod, node_name)


def new(args: Any, handle: Handle) -> DefaultBinder:
    return DefaultBinder(handle.binder)
