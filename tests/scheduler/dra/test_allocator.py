"""The allocator's behaviour beyond upstream's table: the order devices are taken in (the
same choice as kube-scheduler for the same input), shared claims, the in-use state built
from allocations, cancellation, and the inventory's caches staying correct as slices and
node labels change."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from nodeagent.scheduler import api
from nodeagent.scheduler.dra import allocator as allocator_module
from nodeagent.scheduler.dra import model
from nodeagent.scheduler.dra.allocator import (
    Allocator,
    InUse,
    Inventory,
    Verdict,
    in_use_from_allocations,
    node_selector_matches,
)
from nodeagent.scheduler.fieldpath import FieldPath
from tests.scheduler.dra.builders import (
    ALL_NODES,
    CLAIM0,
    CLAIM1,
    CLASS_A,
    DEVICE1,
    DEVICE2,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    NODE2,
    POOL1,
    POOL2,
    REGION1,
    REGION2,
    REQ0,
    claim,
    claim_with_request,
    class_,
    device,
    local_node_selector,
    node,
    node_label_selector,
    parse_all,
    request,
    slice_,
    slice_with_one_device,
)

ANY_DRIVER = {"metadata": {"name": CLASS_A}, "spec": {}}


def chosen(outcome_allocations: tuple[model.AllocationResult, ...]) -> list[list[str]]:
    return [[str(r.device_id) for r in a.results] for a in outcome_allocations]


def test_pools_are_searched_by_driver_then_pool_name_not_by_listing_order() -> None:
    classes, slices, claims = parse_all(
        [ANY_DRIVER],
        [
            slice_with_one_device("z", NODE1, POOL2, DRIVER_B),
            slice_with_one_device("y", NODE1, POOL1, DRIVER_B),
            slice_with_one_device("x", NODE1, POOL2, DRIVER_A),
        ],
        [claim(CLAIM0, request(REQ0, CLASS_A, 2))],
    )
    outcome = Allocator(classes, slices).allocate(node(NODE1, REGION1), claims)
    assert chosen(outcome.allocations) == [["driver-a/pool-2/device-1", "driver-b/pool-1/device-1"]]


def test_slices_of_a_pool_by_name_and_devices_in_slice_order() -> None:
    classes, slices, claims = parse_all(
        [ANY_DRIVER],
        [
            slice_("b", NODE1, model_pool(2), DRIVER_A, device("d-0")),
            slice_("a", NODE1, model_pool(2), DRIVER_A, device("d-2"), device("d-1")),
        ],
        [claim(CLAIM0, request(REQ0, CLASS_A, 2))],
    )
    outcome = Allocator(classes, slices).allocate(node(NODE1, REGION1), claims)
    assert chosen(outcome.allocations) == [["driver-a/pool-1/d-2", "driver-a/pool-1/d-1"]]


def model_pool(count: int) -> dict[str, object]:
    return {"name": POOL1, "generation": 1, "resourceSliceCount": count}


def test_pools_with_binding_conditions_come_last() -> None:
    classes, slices, claims = parse_all(
        [ANY_DRIVER],
        [
            slice_("s1", NODE1, POOL1, DRIVER_A, device(DEVICE1, bindingConditions=["Ready"])),
            slice_with_one_device("s2", NODE1, POOL2, DRIVER_A),
        ],
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
    )
    outcome = Allocator(classes, slices).allocate(node(NODE1, REGION1), claims)
    assert chosen(outcome.allocations) == [["driver-a/pool-2/device-1"]]


def test_a_shared_claim_keeps_its_allocation_where_its_selector_admits_the_node() -> None:
    allocation = {
        "devices": {
            "results": [{"request": REQ0, "driver": DRIVER_A, "pool": POOL1, "device": DEVICE1}]
        },
        "nodeSelector": local_node_selector(NODE1),
    }
    classes, slices, claims = parse_all(
        [class_(CLASS_A, DRIVER_A)],
        [slice_with_one_device("s1", NODE1, POOL1, DRIVER_A)],
        [claim_with_request(CLAIM0, REQ0, CLASS_A, allocation=allocation)],
    )
    # The device is in use by this very claim: it is not allocated again, only checked.
    in_use = in_use_from_allocations([a for c in claims if (a := c.allocation) is not None])
    allocator = Allocator(classes, slices, in_use)
    here = allocator.allocate(node(NODE1, REGION1), claims)
    assert here.verdict is Verdict.ALLOCATED
    assert here.allocations == (claims[0].allocation,)
    elsewhere = allocator.allocate(node(NODE2, REGION2), claims)
    assert elsewhere.verdict is Verdict.UNSCHEDULABLE
    assert elsewhere.reason == "resourceclaim not available on the node"


def test_a_shared_claim_and_a_new_one_keep_their_order() -> None:
    allocation = {
        "devices": {
            "results": [{"request": REQ0, "driver": DRIVER_A, "pool": POOL1, "device": DEVICE1}]
        }
    }
    classes, slices, claims = parse_all(
        [class_(CLASS_A, DRIVER_A)],
        [slice_(SLICE, ALL_NODES, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
        [
            claim_with_request(CLAIM0, REQ0, CLASS_A, allocation=allocation),
            claim_with_request(CLAIM1, REQ0, CLASS_A),
        ],
    )
    in_use = in_use_from_allocations([claims[0].allocation] if claims[0].allocation else [])
    outcome = Allocator(classes, slices, in_use).allocate(node(NODE2, REGION2), claims)
    assert chosen(outcome.allocations) == [
        ["driver-a/pool-1/device-1"],
        ["driver-a/pool-1/device-2"],
    ]
    assert outcome.allocations[1].node_selector is None  # allNodes: reachable from anywhere


SLICE = "slice-1"


def test_in_use_counts_dedicated_devices_and_shares_but_never_admin_access() -> None:
    parsed = model.parse_allocation(
        {
            "devices": {
                "results": [
                    {"request": "a", "driver": "d", "pool": "p", "device": "dedicated"},
                    {
                        "request": "b",
                        "driver": "d",
                        "pool": "p",
                        "device": "watched",
                        "adminAccess": True,
                    },
                    {
                        "request": "c",
                        "driver": "d",
                        "pool": "p",
                        "device": "shared",
                        "shareID": "s-1",
                        "consumedCapacity": {"memory": "1Gi"},
                    },
                ]
            }
        },
        _where(),
    )
    other = model.parse_allocation(
        {
            "devices": {
                "results": [
                    {
                        "request": "c",
                        "driver": "d",
                        "pool": "p",
                        "device": "shared",
                        "shareID": "s-2",
                        "consumedCapacity": {"memory": "512Mi"},
                    }
                ]
            }
        },
        _where(),
    )
    assert parsed is not None and other is not None
    in_use = in_use_from_allocations([parsed, other])
    assert in_use.devices == {model.DeviceID("d", "p", "dedicated")}
    shared = model.DeviceID("d", "p", "shared")
    assert in_use.shared == {(shared, "s-1"), (shared, "s-2")}
    assert in_use.consumed_capacity == {shared: {"memory": Decimal(1536 * 2**20)}}
    assert in_use.is_allocated(shared)
    assert not in_use.is_allocated(model.DeviceID("d", "p", "watched"))


def _where() -> FieldPath:
    return FieldPath("test")


def test_a_stop_request_ends_the_search_with_an_error() -> None:
    classes, slices, claims = parse_all(
        [class_(CLASS_A, DRIVER_A)],
        [slice_with_one_device(SLICE, NODE1, POOL1, DRIVER_A)],
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
    )
    outcome = Allocator(classes, slices).allocate(
        node(NODE1, REGION1), claims, should_stop=lambda: True
    )
    assert outcome.verdict is Verdict.ERROR
    assert "timed out trying to allocate devices" in outcome.reason


def test_pools_are_cached_per_node_labels_when_a_selector_reads_them() -> None:
    classes, slices, claims = parse_all(
        [class_(CLASS_A, DRIVER_A)],
        [slice_with_one_device(SLICE, node_label_selector("region", REGION1), POOL1, DRIVER_A)],
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
    )
    allocator = Allocator(classes, Inventory(slices))
    assert allocator.allocate(api.Node(NODE1, {"region": REGION1}), claims).ok
    # Same node name, relabelled: the cached pools must not answer for it.
    assert not allocator.allocate(api.Node(NODE1, {"region": REGION2}), claims).ok


def test_an_updated_inventory_sees_changed_slices_and_keeps_unchanged_verdicts() -> None:
    classes, slices, claims = parse_all(
        [class_(CLASS_A, DRIVER_A)],
        [
            slice_with_one_device("n1", NODE1, POOL1, DRIVER_A),
            slice_with_one_device("n2", NODE2, POOL2, DRIVER_A),
        ],
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
    )
    first = Inventory(slices)
    assert Allocator(classes, first).allocate(node(NODE1, REGION1), claims).ok
    assert Allocator(classes, first).allocate(node(NODE2, REGION1), claims).ok
    # Node 1's slice is withdrawn (a new generation without devices); node 2's stays.
    emptied = model.parse_resource_slice(
        slice_("n1", NODE1, {"name": POOL1, "generation": 2, "resourceSliceCount": 1}, DRIVER_A)
    )
    second = first.updated([emptied, slices[1]])
    assert not Allocator(classes, second).allocate(node(NODE1, REGION1), claims).ok
    assert Allocator(classes, second).allocate(node(NODE2, REGION1), claims).ok
    kept = slices[1].devices[0]
    assert second.compiler is first.compiler
    assert any(entry[0] is kept for entry in second.compiler._verdicts.values())


def test_node_selector_matching_ignores_empty_and_unparsable_terms() -> None:
    selector = model.parse_node_selector(
        {"nodeSelectorTerms": [{}, {"matchExpressions": [{"key": "region", "operator": "Bogus"}]}]},
        _where(),
    )
    assert not node_selector_matches(selector, node(NODE1, REGION1))
    assert node_selector_matches(None, node(NODE1, REGION1))


def test_in_use_default_is_empty() -> None:
    assert InUse().devices == frozenset()


def test_results_on_node_local_devices_are_built_only_for_the_node_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    classes, slices, claims = parse_all(
        [class_(CLASS_A, DRIVER_A)],
        [
            slice_with_one_device("s1", NODE1, POOL1, DRIVER_A),
            slice_with_one_device("s2", NODE2, POOL2, DRIVER_A),
        ],
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
    )
    built: list[str] = []
    result = allocator_module._Search._result

    def counted(search: Any, claim_index: int) -> model.AllocationResult:
        built.append(search.node.name)
        return result(search, claim_index)

    monkeypatch.setattr(allocator_module._Search, "_result", counted)
    allocator = Allocator(classes, Inventory(slices))
    one = allocator.allocate(node(NODE1, REGION1), claims)
    two = allocator.allocate(node(NODE2, REGION2), claims)
    assert one.ok and two.ok and one.count == two.count == 1
    assert built == []  # Filter's verdicts cost no results
    assert chosen(two.allocations) == [[f"{DRIVER_A}/{POOL2}/{DEVICE1}"]]
    assert two.allocations[0].node_selector == model.NodeSelector(
        (api.SelectorTerm(match_fields=(api.Requirement("metadata.name", "In", (NODE2,)),)),)
    )
    assert two.allocations is two.allocations
    assert built == [NODE2]


def test_a_node_selector_upstream_cannot_make_fails_the_filter_not_the_reserve() -> None:
    two_terms = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "region", "operator": "In", "values": [REGION1]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
        ]
    }
    classes, slices, claims = parse_all(
        [class_(CLASS_A, DRIVER_A)],
        [slice_with_one_device("s1", two_terms, POOL1, DRIVER_A)],
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
    )
    outcome = Allocator(classes, Inventory(slices)).allocate(node(NODE1, REGION1), claims)
    assert outcome.verdict is Verdict.ERROR
    assert "unsupported ResourceSlice.NodeSelector with 2 terms" in outcome.reason
