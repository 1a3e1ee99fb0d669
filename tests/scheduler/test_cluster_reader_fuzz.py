"""The cluster-file reader on hostile input: whatever the documents hold, reading them
either yields cluster objects or raises a ConfigError (exit 2) - never another
exception, never a silently empty plan."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import config, objects, planner, registry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
VALID_ITEMS = [
    item
    for path in sorted(EXAMPLES.glob("*.yaml"))
    for item in yaml.safe_load(path.read_text())["items"]
]

FIELD_NAMES = st.sampled_from(
    [
        "kind",
        "apiVersion",
        "metadata",
        "name",
        "namespace",
        "labels",
        "spec",
        "status",
        "items",
        "containers",
        "resources",
        "requests",
        "nodeName",
        "affinity",
        "taints",
        "topologySpreadConstraints",
        "podAntiAffinity",
        "labelSelector",
        "matchLabels",
        "priority",
        "allocatable",
        "selector",
        "startTime",
        "ownerReferences",
        "x",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.sampled_from(["Pod", "Node", "List", "1Gi", "500m", "-1", ""]),
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(FIELD_NAMES, inner, max_size=5)
    ),
    max_leaves=25,
)


def check(documents: list[Any]) -> None:
    try:
        cluster = objects.read_cluster(documents, "fuzz")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz")  # names the file...
        return
    assert cluster.nodes or cluster.pods  # ...or something was read


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(JSONISH, min_size=1, max_size=3))
def test_arbitrary_documents_are_read_or_rejected(documents: list[Any]) -> None:
    check(documents)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _paths(child, (*prefix, i))
    return out


@st.composite
def mutated_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A valid object from the examples with one field replaced by anything."""
    item: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(VALID_ITEMS)))
    path = draw(st.sampled_from(_paths(item)[1:]))
    target: Any = item
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = draw(JSONISH)
    return item


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated_objects(), min_size=1, max_size=4))
def test_valid_objects_with_one_bad_field(items: list[dict[str, Any]]) -> None:
    check([{"kind": "List", "items": items}])


@pytest.mark.parametrize(
    ("document", "mentions"),
    [
        pytest.param({"nodes": [{"name": "n1"}], "pods": 5}, "document 0", id="no-kind"),
        pytest.param({"kind": "List", "items": 5}, "items", id="items-not-a-list"),
        pytest.param({"kind": "Pod", "metadata": {"name": "p"}, "spec": 5}, "spec", id="spec"),
        pytest.param(
            {"kind": "Pod", "metadata": {"name": ["p"]}}, "metadata.name", id="name-not-text"
        ),
        pytest.param({"kind": "ConfigMap", "metadata": {"name": "c"}}, "no Node or Pod", id="none"),
    ],
)
def test_unexpected_shapes_name_the_document_and_field(
    document: dict[str, Any], mentions: str
) -> None:
    with pytest.raises(ConfigError, match="fuzz") as caught:
        objects.read_cluster([document], "fuzz")
    assert mentions in str(caught.value)


CONFIGURATION = config.parse_configuration(None, registry.in_tree_registry())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated_objects(), min_size=2, max_size=8))
def test_whatever_is_read_can_be_planned(items: list[dict[str, Any]]) -> None:
    """Objects the reader accepts never crash a plan (spread, affinity, preemption)."""
    try:
        cluster = objects.read_cluster([{"kind": "List", "items": items}], "fuzz")
    except ConfigError:
        return
    plan = planner.plan(cluster, CONFIGURATION, seed=1, explain_nodes=True, now=1714557630.0)
    pending = [p for p in cluster.pods if not p.node_name and not p.deleting]
    assert len(plan.placements) == len(pending)  # every pending pod is reported
    served = {p.key for p in pending if p.scheduler_name == "default-scheduler"}
    for placement in plan.placements:
        assert (placement.status is planner.Outcome.NOT_SERVED) == (placement.pod not in served)
