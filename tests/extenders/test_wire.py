"""Requests decode the same whether they use kube-scheduler's spelling (the typed fast
path) or another casing (the folding path), in both node forms."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeagent.scheduler.extenders import wire
from tests.scheduler.builders import node_dict, pod_dict

NODES = [
    node_dict("a", taints=[{"key": "k", "effect": "NoSchedule"}], annotations={"x": "1"}),
    node_dict("b", conditions={"MemoryPressure": "True"}),
]


def spelled(names: tuple[str, str, str], *, whole: bool) -> bytes:
    pod, nodes, node_names = names
    message: dict[str, Any] = {pod: pod_dict("p")}
    if whole:
        message[nodes] = {"metadata": {}, "items": NODES}
    else:
        message[node_names] = ["a", "b"]
    return json.dumps(message).encode()


def summary(args: wire.ExtenderArgs) -> Any:
    nodes: Any = None
    if args.nodes is not None:
        raw = args.nodes.raw
        raw_items = None if raw is None else [json.loads(bytes(item)) for item in raw]
        nodes = ([field.to_node() for field in args.nodes.fields], raw_items)
    return args.pod, args.node_names, nodes


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("keep_node_bytes", [True, False])
@pytest.mark.parametrize(
    "names",
    [("pod", "nodes", "nodenames"), ("POD", "NODES", "NodeNAMES"), ("Pod", "nodes", "nodeNames")],
)
def test_every_casing_decodes_like_kube_schedulers(
    names: tuple[str, str, str], whole: bool, keep_node_bytes: bool
) -> None:
    go = wire.read_extender_args(
        spelled(("Pod", "Nodes", "NodeNames"), whole=whole), keep_node_bytes=keep_node_bytes
    )
    other = wire.read_extender_args(spelled(names, whole=whole), keep_node_bytes=keep_node_bytes)
    assert summary(other) == summary(go)
    if whole and keep_node_bytes:
        assert summary(go)[2][1] == NODES  # the original objects, byte for byte
