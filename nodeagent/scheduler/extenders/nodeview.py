"""The extender server's view of the cluster's nodes, kept current by a watch.

kube-scheduler sends a node-cache-capable extender node *names* only: the extender must
know the nodes itself, without an API request per call. :class:`NodeView` is that
knowledge: Node objects read once when they arrive (the fields the verdicts need, through
the same :class:`~nodeagent.scheduler.extenders.wire.NodeFields` as whole nodes in a
request), looked up by name in O(1) by the request threads. It is fed by the
project's informer (:mod:`nodeagent.kube.informer`, list + watch, relist on 410) through
:meth:`NodeView.handlers`, or directly (:meth:`NodeView.upsert`) in tests.

A Node that cannot be parsed is left out with a logged reason: the extender passes nodes
it does not know, so a malformed object never blocks scheduling.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.kube import informer
from nodeagent.scheduler import api
from nodeagent.scheduler.extenders import wire

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KnownNode:
    node: api.Node
    resource_version: str


class NodeView:
    """Nodes by name. One writer (the informer thread); readers look names up without a
    lock, which is safe because a single dict operation is atomic in CPython."""

    def __init__(self, synced: Callable[[], bool] | None = None) -> None:
        self._nodes: dict[str, KnownNode] = {}
        self._tainted: set[str] = set()
        self._lock = threading.Lock()
        self._synced = synced
        self.on_change: Callable[[], None] | None = None

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
        with self._lock:
            self._nodes[node.name] = KnownNode(node, fields.metadata.resourceVersion)
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
