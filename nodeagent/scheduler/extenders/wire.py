"""The extender protocol on the wire, both directions (reference §14).

kube-scheduler's extender types (``k8s.io/kube-scheduler/extender/v1``) carry **no JSON
tags**, so the field names on the wire are the Go field names, capitalized: ``Pod``,
``Nodes``, ``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``,
``Host``, ``Score``... Go's decoder matches names case-insensitively, so extenders
written against the older tagged types (``nodenames``, ``failedNodes``, ``host``) work
with it too. This module does the same: it *writes* the Go names, exactly as
kube-scheduler does (including ``null`` for the node form not in use), and *reads* any
casing (:func:`fold`). The Pod and Node objects inside are ordinary API objects with
their usual lowercase fields.

The server side decodes with msgspec into a few typed structs that name only what the
extender reads, so a request of 500 whole Node objects (several MB) is decoded in a few
milliseconds: everything else in those objects is skipped without being built, and each
node's original bytes are kept (:class:`NodeItems`) to be echoed back unchanged in a
filter answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from nodeagent.scheduler import api

MAX_EXTENDER_PRIORITY = 10
"""Extender scores are 0..10; kube-scheduler scales them by MaxNodeScore / 10."""

V = TypeVar("V")

# Go field names of the extender types.
POD = "Pod"
NODES = "Nodes"
NODE_NAMES = "NodeNames"
FAILED_NODES = "FailedNodes"
FAILED_AND_UNRESOLVABLE_NODES = "FailedAndUnresolvableNodes"
ERROR = "Error"
HOST = "Host"
SCORE = "Score"
NODE_NAME_TO_VICTIMS = "NodeNameToVictims"
NODE_NAME_TO_META_VICTIMS = "NodeNameToMetaVictims"
PODS = "Pods"
NUM_PDB_VIOLATIONS = "NumPDBViolations"
UID = "UID"

ARGS_FIELDS = (POD, NODES, NODE_NAMES)
FILTER_RESULT_FIELDS = (NODES, NODE_NAMES, FAILED_NODES, FAILED_AND_UNRESOLVABLE_NODES, ERROR)
HOST_PRIORITY_FIELDS = (HOST, SCORE)
PREEMPTION_RESULT_FIELDS = (NODE_NAME_TO_META_VICTIMS,)
META_VICTIMS_FIELDS = (PODS, NUM_PDB_VIOLATIONS)
META_POD_FIELDS = (UID,)
BINDING_RESULT_FIELDS = (ERROR,)


class ProtocolError(ValueError):
    """A message that does not follow the protocol; the text says where and why."""


def fold(document: Mapping[str, V], fields: Sequence[str]) -> dict[str, V]:
    """``document``'s entries under their Go field names, matched as Go's decoder does:
    an exact name first, else case-insensitively; unknown keys are dropped, and a later
    key wins over an earlier one for the same field."""
    by_lower = {name.lower(): name for name in fields}
    out: dict[str, V] = {}
    for key, value in document.items():
        name = key if key in fields else by_lower.get(key.lower())
        if name is not None:
            out[name] = value
    return out


def encode(message: Any) -> bytes:
    return msgspec.json.encode(message)


def decode(body: bytes, what: str) -> Any:
    """Any JSON document, or :class:`ProtocolError` naming ``what`` was expected."""
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"{what}: not JSON: {exc}") from exc


def object_at(document: Any, fields: Sequence[str], what: str) -> dict[str, Any]:
    """``document`` as a JSON object folded onto ``fields``."""
    if not isinstance(document, dict):
        raise ProtocolError(f"{what}: expected a JSON object, got {type(document).__name__}")
    return fold(document, fields)


# --- what kube-scheduler sends (client side builds these) -------------------------------


def node_list(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A ``v1.NodeList`` as kube-scheduler builds it: only ``items`` is set."""
    return {"metadata": {}, "items": list(nodes)}


def extender_args(
    pod: Mapping[str, Any],
    *,
    nodes: Sequence[Mapping[str, Any]] | None = None,
    node_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``ExtenderArgs``: whole nodes, or names when the extender is node-cache capable."""
    return {
        POD: pod,
        NODES: None if nodes is None else node_list(nodes),
        NODE_NAMES: None if node_names is None else list(node_names),
    }


# --- what an extender server reads (typed, for speed) ------------------------------------


class _Metadata(msgspec.Struct, gc=False):
    name: str = ""
    resourceVersion: str = ""  # noqa: N815 - the API's field name
    annotations: dict[str, str] | None = None


class _Taint(msgspec.Struct, gc=False):
    key: str | None = None
    value: str | None = None
    effect: str | None = None


class _Spec(msgspec.Struct, gc=False):
    taints: list[_Taint] | None = None


class _Condition(msgspec.Struct, gc=False):
    type: str | None = None
    status: str | None = None


class _Status(msgspec.Struct, gc=False):
    conditions: list[_Condition] | None = None


_EFFECTS = frozenset(api.TaintEffect)


class NodeFields(msgspec.Struct, gc=False):
    """The parts of a Node the pressure verdicts read, decoded straight from JSON (a
    request) or converted from a watched object (:func:`node_fields`)."""

    metadata: _Metadata = msgspec.field(default_factory=_Metadata)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)

    def to_node(self) -> api.Node:
        """The scheduler's Node value (name, annotations, taints, conditions), with the
        API's meaning of absent fields; an unknown taint effect is a ProtocolError."""
        taints = []
        for i, taint in enumerate(self.spec.taints or ()):
            effect = taint.effect or ""
            if effect not in _EFFECTS:
                raise ProtocolError(
                    f"Node {self.metadata.name}: spec.taints[{i}].effect {effect!r}: expected"
                    f" one of {', '.join(api.TaintEffect)}"
                )
            taints.append(api.Taint(taint.key or "", effect, taint.value or ""))
        return api.Node(
            name=self.metadata.name,
            annotations=self.metadata.annotations or {},
            taints=tuple(taints),
            conditions={c.type or "": c.status or "Unknown" for c in self.status.conditions or ()},
        )


def node_fields(obj: Mapping[str, Any]) -> NodeFields:
    """A watched Node object's fields (:class:`ProtocolError` for mistyped ones)."""
    try:
        return msgspec.convert(obj, NodeFields)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"Node: {exc}") from exc


class _RawNodeList(msgspec.Struct, gc=False):
    items: list[msgspec.Raw] | None = None


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_POD = msgspec.json.Decoder(dict[str, Any] | None)
_NAMES = msgspec.json.Decoder(list[str] | None)
_NODE_LIST = msgspec.json.Decoder(_RawNodeList | None)
_NODE = msgspec.json.Decoder(NodeFields)


class _NodeList(msgspec.Struct, gc=False):
    items: list[NodeFields] | None = None


_NODE_FIELDS_LIST = msgspec.json.Decoder(_NodeList | None)


class NodeItems:
    """The ``Nodes.items`` of a request: each node's fields and, when they are to be
    echoed back (filter), its original bytes."""

    def __init__(self, fields: list[NodeFields], raw: list[msgspec.Raw] | None = None) -> None:
        self.fields = fields
        self.raw = raw

    @classmethod
    def with_bytes(cls, raw: list[msgspec.Raw]) -> NodeItems:
        """Two passes: the items' bytes, then each item's fields."""
        fields = []
        for i, item in enumerate(raw):
            try:
                fields.append(_NODE.decode(item))
            except msgspec.DecodeError as exc:
                raise ProtocolError(f"Nodes.items[{i}]: {exc}") from exc
        return cls(fields, raw)


class ExtenderArgs(msgspec.Struct):
    """A decoded ``ExtenderArgs``: the pod as JSON, and nodes or node names."""

    pod: dict[str, Any]
    nodes: NodeItems | None
    node_names: list[str] | None


def _part(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw, name: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        message = str(exc).replace("`$", f"`$.{name}", 1)
        raise ProtocolError(f"{name}: {message}") from exc


class _GoArgsWithBytes(msgspec.Struct, gc=False):
    """ExtenderArgs spelled as kube-scheduler sends them (filter: node bytes kept)."""

    Pod: dict[str, Any] | None = None
    Nodes: _RawNodeList | None = None
    NodeNames: list[str] | None = None


class _GoArgs(msgspec.Struct, gc=False):
    """ExtenderArgs spelled as kube-scheduler sends them (prioritize: one pass)."""

    Pod: dict[str, Any] | None = None
    Nodes: _NodeList | None = None
    NodeNames: list[str] | None = None


_GO_ARGS_WITH_BYTES = msgspec.json.Decoder(_GoArgsWithBytes)
_GO_ARGS = msgspec.json.Decoder(_GoArgs)


def read_extender_args(body: bytes, *, keep_node_bytes: bool = True) -> ExtenderArgs:
    """Decode a filter/prioritize request, or :class:`ProtocolError` saying what is wrong.
    Whole nodes keep their original bytes only when ``keep_node_bytes`` (a filter answer
    echoes them); otherwise they are decoded in a single pass.

    kube-scheduler's exact spelling is decoded straight into typed structs; any other
    casing (a client of the older tagged types) takes the folding path."""
    try:
        items: NodeItems | None = None
        if keep_node_bytes:
            with_bytes = _GO_ARGS_WITH_BYTES.decode(body)
            pod, names = with_bytes.Pod, with_bytes.NodeNames
            if with_bytes.Nodes is not None:
                items = NodeItems.with_bytes(with_bytes.Nodes.items or [])
        else:
            typed = _GO_ARGS.decode(body)
            pod, names = typed.Pod, typed.NodeNames
            if typed.Nodes is not None:
                items = NodeItems(typed.Nodes.items or [])
    except msgspec.ValidationError as exc:
        if "- at `$" in str(exc):  # a field of the right name with the wrong type
            raise ProtocolError(str(exc).replace("`$.", "`", 1)) from exc
        raise ProtocolError(f"request body is not a JSON object: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"request body is not a JSON object: {exc}") from exc
    if pod and (items is not None or names is not None):
        return ExtenderArgs(pod, items, names)
    return _read_folded(body, keep_node_bytes)


def _read_folded(body: bytes, keep_node_bytes: bool) -> ExtenderArgs:
    try:
        top = _TOP.decode(body)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"request body is not a JSON object: {exc}") from exc
    fields = fold(top, ARGS_FIELDS)
    pod = _part(_POD, fields[POD], POD) if POD in fields else None
    if not pod:
        raise ProtocolError("Pod: missing; ExtenderArgs needs the pod being scheduled")
    names = _part(_NAMES, fields[NODE_NAMES], NODE_NAMES) if NODE_NAMES in fields else None
    nodes = None
    if NODES in fields and keep_node_bytes:
        listed = _part(_NODE_LIST, fields[NODES], NODES)
        nodes = None if listed is None else NodeItems.with_bytes(listed.items or [])
    elif NODES in fields:
        decoded = _part(_NODE_FIELDS_LIST, fields[NODES], NODES)
        nodes = None if decoded is None else NodeItems(decoded.items or [])
    if names is None and nodes is None:
        raise ProtocolError(
            "Nodes and NodeNames: both missing; send Nodes (a NodeList) or, with"
            " nodeCacheCapable, NodeNames"
        )
    return ExtenderArgs(pod, nodes, names)


def filter_result(
    *,
    node_names: Sequence[str] | None,
    node_items: Sequence[msgspec.Raw] | None,
    failed: Mapping[str, str],
    failed_unresolvable: Mapping[str, str],
    error: str = "",
) -> bytes:
    """An ``ExtenderFilterResult``. Passing nodes go back in the form they came in: names,
    or the original bytes of each Node object, joined once (not re-encoded)."""
    head = encode(
        {
            NODE_NAMES: None if node_names is None else list(node_names),
            FAILED_NODES: dict(failed),
            FAILED_AND_UNRESOLVABLE_NODES: dict(failed_unresolvable),
            ERROR: error,
        }
    )
    if node_items is None:
        return head[:-1] + b',"Nodes":null}'
    parts: list[bytes | msgspec.Raw] = [head[:-1], b',"Nodes":{"metadata":{},"items":[']
    for i, item in enumerate(node_items):
        if i:
            parts.append(b",")
        parts.append(item)
    parts.append(b"]}}")
    return b"".join(parts)  # a Raw is a buffer: joined without a copy of its own


class HostPriority(msgspec.Struct, gc=False):
    Host: str
    Score: int


_ENCODER = msgspec.json.Encoder()


def host_priority_list(scores: Iterable[HostPriority]) -> bytes:
    return _ENCODER.encode(list(scores))
