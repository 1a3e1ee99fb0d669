"""The extender protocol on the wire, both directions (kube-scheduler's ``HTTPExtender``).

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
milliseconds: everything else in those objects is skipped without being built. A filter
request keeps each node's original bytes (:class:`EchoedNodes`), to be echoed back
unchanged for the nodes that pass, and reads only their names and taints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from nodeagent.k8s.pressure import Taint
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


class _Name(msgspec.Struct, gc=False):
    name: str = ""
    resourceVersion: str = ""  # noqa: N815 - the API's field name


class _Metadata(_Name, gc=False):
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


def _taints(node: str, taints: list[_Taint] | None) -> tuple[Taint, ...]:
    """The API's taints as the scheduler's values; an unknown effect is a ProtocolError."""
    if not taints:
        return ()
    out = []
    for i, taint in enumerate(taints):
        effect = taint.effect or ""
        if effect not in _EFFECTS:
            raise ProtocolError(
                f"Node {node}: spec.taints[{i}].effect {effect!r}: expected"
                f" one of {', '.join(api.TaintEffect)}"
            )
        out.append(Taint(taint.key or "", effect, taint.value or ""))
    return tuple(out)


class NodeTaints(msgspec.Struct, gc=False):
    """What a filter verdict reads of a Node sent whole: its name and taints. Decoding
    only these skips the annotations and conditions a filter never looks at."""

    metadata: _Name = msgspec.field(default_factory=_Name)
    spec: _Spec = msgspec.field(default_factory=_Spec)

    def taints(self) -> tuple[Taint, ...]:
        return _taints(self.metadata.name, self.spec.taints)


class NodeFields(msgspec.Struct, gc=False):
    """The parts of a Node the pressure verdicts read, decoded straight from JSON (a
    request) or converted from a watched object (:func:`node_fields`)."""

    metadata: _Metadata = msgspec.field(default_factory=_Metadata)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)

    def to_node(self) -> api.Node:
        """The scheduler's Node value (name, annotations, taints, conditions), with the
        API's meaning of absent fields; an unknown taint effect is a ProtocolError."""
        return api.Node(
            name=self.metadata.name,
            annotations=self.metadata.annotations or {},
            taints=_taints(self.metadata.name, self.spec.taints),
            conditions={c.type or "": c.status or "Unknown" for c in self.status.conditions or ()},
        )


def node_fields(obj: Mapping[str, Any]) -> NodeFields:
    """A watched Node object's fields (:class:`ProtocolError` for mistyped ones)."""
    try:
        return msgspec.convert(obj, NodeFields)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"Node: {exc}") from exc


class EchoedNodes:
    """The ``Nodes.items`` of a filter request: each node's original bytes, to be echoed
    back unchanged for the nodes that pass, and its name and taints."""

    def __init__(self, raw: list[msgspec.Raw]) -> None:
        self.raw = raw
        self.taints: list[NodeTaints] = []
        for i, item in enumerate(raw):  # the second pass, one item at a time
            try:
                self.taints.append(_NODE_TAINTS.decode(item))
            except msgspec.DecodeError as exc:
                raise ProtocolError(f"Nodes.items[{i}]: {exc}") from exc


NodesT = TypeVar("NodesT", EchoedNodes, list[NodeFields])


@dataclass(frozen=True, slots=True)
class ExtenderArgs(Generic[NodesT]):
    """A decoded ``ExtenderArgs``: the pod as JSON, and nodes or node names."""

    pod: dict[str, Any]
    nodes: NodesT | None
    node_names: list[str] | None


class _RawNodeList(msgspec.Struct, gc=False):
    items: list[msgspec.Raw] | None = None


class _NodeList(msgspec.Struct, gc=False):
    items: list[NodeFields] | None = None


class _GoFilterArgs(msgspec.Struct, gc=False):
    """ExtenderArgs spelled as kube-scheduler sends them, node bytes kept."""

    Pod: dict[str, Any] | None = None
    Nodes: _RawNodeList | None = None
    NodeNames: list[str] | None = None


class _GoArgs(msgspec.Struct, gc=False):
    """ExtenderArgs spelled as kube-scheduler sends them, nodes decoded in one pass."""

    Pod: dict[str, Any] | None = None
    Nodes: _NodeList | None = None
    NodeNames: list[str] | None = None


_NODE_TAINTS = msgspec.json.Decoder(NodeTaints)
_GO_FILTER_ARGS = msgspec.json.Decoder(_GoFilterArgs)
_GO_ARGS = msgspec.json.Decoder(_GoArgs)
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_POD = msgspec.json.Decoder(dict[str, Any] | None)
_NAMES = msgspec.json.Decoder(list[str] | None)
_RAW_NODE_LIST = msgspec.json.Decoder(_RawNodeList | None)
_NODE_LIST = msgspec.json.Decoder(_NodeList | None)


def _part(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw, name: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        message = str(exc).replace("`$", f"`$.{name}", 1)
        raise ProtocolError(f"{name}: {message}") from exc


def _typed(decoder: msgspec.json.Decoder[Any], body: bytes) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        if "- at `$" in str(exc):  # a field of the right name with the wrong type
            raise ProtocolError(str(exc).replace("`$.", "`", 1)) from exc
        raise ProtocolError(f"request body is not a JSON object: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"request body is not a JSON object: {exc}") from exc


def read_filter_args(body: bytes) -> ExtenderArgs[EchoedNodes]:
    """Decode a filter request, or :class:`ProtocolError` saying what is wrong. Whole
    nodes keep their original bytes (a filter answer echoes them) and are read for their
    names and taints only.

    kube-scheduler's exact spelling is decoded straight into typed structs; any other
    casing (a client of the older tagged types) takes the folding path."""
    typed = _typed(_GO_FILTER_ARGS, body)
    nodes = None if typed.Nodes is None else EchoedNodes(typed.Nodes.items or [])
    if typed.Pod and (nodes is not None or typed.NodeNames is not None):
        return ExtenderArgs(typed.Pod, nodes, typed.NodeNames)
    pod, names, listed = _read_folded(body, _RAW_NODE_LIST)
    return ExtenderArgs(pod, None if listed is None else EchoedNodes(listed.items or []), names)


def read_prioritize_args(body: bytes) -> ExtenderArgs[list[NodeFields]]:
    """Decode a prioritize request (whole nodes in a single pass), as
    :func:`read_filter_args` does."""
    typed = _typed(_GO_ARGS, body)
    nodes = None if typed.Nodes is None else typed.Nodes.items or []
    if typed.Pod and (nodes is not None or typed.NodeNames is not None):
        return ExtenderArgs(typed.Pod, nodes, typed.NodeNames)
    pod, names, listed = _read_folded(body, _NODE_LIST)
    return ExtenderArgs(pod, None if listed is None else listed.items or [], names)


def _read_folded(
    body: bytes, node_list: msgspec.json.Decoder[Any]
) -> tuple[dict[str, Any], list[str] | None, Any]:
    try:
        top = _TOP.decode(body)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"request body is not a JSON object: {exc}") from exc
    fields = fold(top, ARGS_FIELDS)
    pod = _part(_POD, fields[POD], POD) if POD in fields else None
    if not pod:
        raise ProtocolError("Pod: missing; ExtenderArgs needs the pod being scheduled")
    names = _part(_NAMES, fields[NODE_NAMES], NODE_NAMES) if NODE_NAMES in fields else None
    listed = _part(node_list, fields[NODES], NODES) if NODES in fields else None
    if names is None and listed is None:
        raise ProtocolError(
            "Nodes and NodeNames: both missing; send Nodes (a NodeList) or, with"
            " nodeCacheCapable, NodeNames"
        )
    return pod, names, listed


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


_BETWEEN = [f'","Score":{score}}},{{"Host":"' for score in range(MAX_EXTENDER_PRIORITY + 1)]
_HEAD, _TAIL = '[{"Host":"', ',{"Host":"'


def host_priorities(hosts: Sequence[str], scores: npt.NDArray[np.integer[Any]]) -> bytes:
    """The ``HostPriorityList`` of ``hosts[i]`` scored ``scores[i]``: the bytes
    :func:`host_priority_list` writes, without building an entry per host.

    Unless a host needs an escape in JSON (its encoding has a backslash), its text is
    itself; the answer is then the hosts interleaved with each score's text (one of
    eleven constants) and joined once, with no object made per host."""
    if len(hosts) != len(scores):
        raise ValueError(f"{len(hosts)} hosts but {len(scores)} scores")
    if not hosts:
        return b"[]"
    if b"\\" in _ENCODER.encode(hosts) or scores.min() < 0 or scores.max() > MAX_EXTENDER_PRIORITY:
        return host_priority_list(map(HostPriority, hosts, scores.tolist()))
    parts: list[str] = [_HEAD, *([""] * (2 * len(hosts)))]
    parts[1::2] = hosts
    parts[2::2] = map(_BETWEEN.__getitem__, scores.tolist())
    text = "".join(parts)
    return (text[: -len(_TAIL)] + "]").encode()
