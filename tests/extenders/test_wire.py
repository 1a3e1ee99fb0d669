"""Requests decode the same whether they use kube-scheduler's spelling (the typed fast
path) or another casing (the folding path), in both node forms."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.k8s.pressure import Taint
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


def summary(go: bytes, other: bytes, *, echo: bool) -> tuple[Any, Any]:
    """What each spelling decodes to: the pod, names, and the nodes as read (a filter:
    names, taints and the original objects; a prioritize call: whole Node values)."""

    def read(body: bytes) -> Any:
        if echo:
            args: Any = wire.read_filter_args(body)
            nodes = args.nodes and (
                [(node.metadata.name, node.taints()) for node in args.nodes.taints],
                [json.loads(bytes(item)) for item in args.nodes.raw],
            )
        else:
            args = wire.read_prioritize_args(body)
            nodes = args.nodes and [fields.to_node() for fields in args.nodes]
        return args.pod, args.node_names, nodes

    return read(go), read(other)


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("echo", [True, False], ids=["filter", "prioritize"])
@pytest.mark.parametrize(
    "names",
    [("pod", "nodes", "nodenames"), ("POD", "NODES", "NodeNAMES"), ("Pod", "nodes", "nodeNames")],
)
def test_every_casing_decodes_like_kube_schedulers(
    names: tuple[str, str, str], whole: bool, echo: bool
) -> None:
    go, other = summary(
        spelled(("Pod", "Nodes", "NodeNames"), whole=whole), spelled(names, whole=whole), echo=echo
    )
    assert other == go
    assert go[0] == pod_dict("p")
    if whole and echo:
        assert go[2][1] == NODES  # the original objects, byte for byte
        assert go[2][0] == [("a", (Taint("k", "NoSchedule"),)), ("b", ())]
    elif whole:
        assert [node.name for node in go[2]] == ["a", "b"]
        assert go[2][1].conditions == {"MemoryPressure": "True"}
    else:
        assert go[1] == ["a", "b"]


class TestHostPriorities:
    """The fast HostPriorityList writer gives the very bytes of the one that builds an
    entry per host, whatever the names (quotes, backslashes, control and non-ASCII
    characters, empty) and scores (out of range ones too: they take the plain path)."""

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(
            st.tuples(
                st.one_of(st.text(max_size=8), st.from_regex(r"[a-z0-9.-]{0,12}", fullmatch=True)),
                st.integers(-3, 13),
            ),
            max_size=30,
        )
    )
    def test_the_same_bytes_as_an_entry_per_host(self, entries: list[tuple[str, int]]) -> None:
        hosts = [host for host, _ in entries]
        scores = np.array([score for _, score in entries], dtype=np.int8)
        expected = wire.host_priority_list(wire.HostPriority(h, s) for h, s in entries)
        assert wire.host_priorities(hosts, scores) == expected
        assert json.loads(expected) == [{"Host": h, "Score": s} for h, s in entries]

    def test_hosts_and_scores_must_pair_up(self) -> None:
        with pytest.raises(ValueError, match="2 hosts but 1 scores"):
            wire.host_priorities(["a", "b"], np.array([1]))
