"""The extender server's view of the cluster's nodes, kept current by a watch.

kube-scheduler sends a node-cache-capable extender node *names* only: the extender must
know the nodes itself, without an API request per call. :class:`NodeView` is that
knowledge: Node objects read once when they arrive (the fields the verdicts need, through
the same :class:`~nodeagent.scheduler.extenders.wire.NodeFields` as whole nodes in a
request), looked up by name in O(1) by the request threads. It is fed by the
project's informer (:mod:`nodeagent.kube.informer`, list + watch, relist on 410) through
:meth:`NodeView.handlers`, or directly (:meth:`NodeView.upsert`) in tests.

Each node is also *assessed* once when it arrives (once per resourceVersion), by the
function the extender's judge installs (:meth:`NodeView.assess_with`): its score either
side of the moment its pressure annotation goes stale (:class:`Standing`). A request then
costs a dictionary lookup and a time comparison per node, however long the extender was
idle before it: no cache to expire, no annotation parsed inside a request.

A Node that cannot be parsed is left out with a logged reason: the extender passes nodes
it does not know, so a malformed object never blocks scheduling.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.kube import informer
from nodeagent.scheduler import api
from nodeagent.scheduler.extenders import wire

log = logging.getLogger(__name__)

MAX_TAINT_LISTS = 10_000
"""Distinct taint lists remembered for sharing (clusters have a handful)."""


@dataclass(frozen=True, slots=True)
class Standing:
    """A node's extender score (0..10) as a function of time, worked out when the node
    arrived: ``fresh`` up to ``fresh_until`` (the annotation's publication time plus the
    staleness limit), ``stale`` after it. A score that does not depend on time (no
    annotation, a pressure condition, no staleness limit) has ``fresh_until`` infinite."""

    fresh: int
    stale: int
    fresh_until: float = math.inf

    def score(self, now: float) -> int:
        return self.fresh if now <= self.fresh_until else self.stale


Assess = Callable[[api.Node], Standing]
"""Works out a node's :class:`Standing`; must not raise (the judge logs and falls back)."""


@dataclass(frozen=True, slots=True)
class KnownNode:
    node: api.Node
    resource_version: str
    standing: Standing | None = None
    """None until the view has an assessor (:meth:`NodeView.assess_with`)."""


class NodeView:
    """Nodes by name. One writer (the informer thread); readers look names up without a
    lock, which is safe because a single dict operation is atomic in CPython. A reader
    must look a name up once (``nodes.get``): the node may be deleted between two
    lookups."""

    def __init__(
        self, synced: Callable[[], bool] | None = None, *, assess: Assess | None = None
    ) -> None:
        self._nodes: dict[str, KnownNode] = {}
        self._tainted: set[str] = set()
        self._taint_lists: dict[tuple[api.Taint, ...], tuple[api.Taint, ...]] = {}
        self._lock = threading.Lock()
        self._synced = synced
        self._assess = assess
        self.on_change: Callable[[], None] | None = None

    def assess_with(self, assess: Assess) -> None:
        """Assess every node with ``assess`` from now on, the nodes already held
        included."""
        with self._lock:
            self._assess = assess
            for name, known in list(self._nodes.items()):
                self._nodes[name] = KnownNode(
                    known.node, known.resource_version, assess(known.node)
                )

    @property
    def synced(self) -> bool:
        """Whether the view holds a complete list (always true when fed by hand)."""
        return self._synced is None or self._synced()

    def get(self, name: str) -> KnownNode | None:
        return self._nodes.get(name)

    @property
    def tainted(self) -> frozenset[str] | set[str]:
        """Names of the nodes with any taint (the only ones a filter can fail)."""
        return self._tainted

    @property
    def nodes(self) -> Mapping[str, KnownNode]:
        """The live mapping, for tight read loops (do not mutate)."""
        return self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Add or replace a Node from its API object."""
        try:
            fields = wire.node_fields(obj)
            node = fields.to_node()
        except wire.ProtocolError as exc:
            log.warning("node left out of the extender's view (it will pass): %s", exc)
            self.delete(obj)
            return
        if node.taints:  # one tuple per distinct taint list: a filter compares by identity
            if len(self._taint_lists) >= MAX_TAINT_LISTS:  # a bound, not a tuning
                self._taint_lists.clear()
            taints = self._taint_lists.setdefault(node.taints, node.taints)
            if taints is not node.taints:
                node = dataclasses.replace(node, taints=taints)
        with self._lock:
            standing = None if self._assess is None else self._assess(node)
            self._nodes[node.name] = KnownNode(node, fields.metadata.resourceVersion, standing)
            if node.taints:
                self._tainted.add(node.name)
            else:
                self._tainted.discard(node.name)
        self._changed()

    def delete(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        with self._lock:
            self._tainted.discard(name)
            if self._nodes.pop(name, None) is None:
                return
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def handlers(self) -> informer.Handlers:
        """Informer callbacks that keep this view current."""
        return informer.Handlers(
            on_add=self.upsert,
            on_update=lambda old, new: self.upsert(new),
            on_delete=self.delete,
        )
