"""What the fuzz asserts about one generated cluster: the product against the oracle
(:func:`differential`) and the invariants that need none (:func:`plan_invariants`).
Each raises :class:`AssertionError` with what differed; the pytest tests and the long
run (``benchmarks.fuzz_scheduler``) call the same functions."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from nodeagent.scheduler import (
    api,
    config,
    framework,
    objects,
    planner,
    registry,
    resource_claims,
    scheduling,
    storage,
)
from nodeagent.scheduler.framework import CycleState
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler.fuzz import oracle

PLUGINS = registry.in_tree_registry()
STOCK = config.parse_configuration(
    {"profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "NodePressure"}]}}}]},
    PLUGINS,
)
"""kube-scheduler's default profile (what the oracle knows): NodePressure off."""
SCORE_TOLERANCE = 1
"""Per-plugin scores may differ by one: float rounding (ln, ratios) in either."""


def _pending(cluster: objects.ClusterObjects) -> list[api.Pod]:
    return [p for p in cluster.pods if not p.node_name]


def _snapshot(cluster: objects.ClusterObjects) -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster.nodes,
        cluster.bound_pods(),
        namespaces=cluster.namespaces,
        disruption_budgets=cluster.disruption_budgets,
    )


def world_of(cluster: objects.ClusterObjects, order: Sequence[str]) -> oracle.World:
    by_name = {n.name: n for n in cluster.nodes}
    pods_on: dict[str, list[api.Pod]] = {name: [] for name in order}
    for pod in cluster.bound_pods():
        if pod.node_name in pods_on:
            pods_on[pod.node_name].append(pod)
    return oracle.World(
        [by_name[n] for n in order], pods_on, cluster.namespaces, cluster.storage, cluster.resources
    )


def product_feasible(
    fw: framework.Framework, pod: api.Pod, snapshot: ClusterSnapshot
) -> tuple[list[str], CycleState]:
    state = CycleState()
    restriction, status, _ = fw.run_pre_filter(state, pod, snapshot)
    assert status.code is not api.Code.ERROR, f"PreFilter error: {status.message}"
    if not status.is_success:
        return [], state
    candidates = snapshot.all_nodes
    if restriction is not None:
        chosen = sorted(snapshot.index[n] for n in restriction.node_names if n in snapshot.index)
        candidates = np.array(chosen, dtype=np.intp)
    outcome = scheduling.find_feasible(
        fw.active_filters(state), state, pod, snapshot, candidates, start=0, wanted=len(candidates)
    )
    return [snapshot.names[int(i)] for i in sorted(outcome.feasible.tolist())], state


def differential(objs: list[dict[str, Any]], seed: int = 0) -> None:
    """The first pending pod of the cluster: feasible nodes, per-plugin normalized scores
    and (fitting nowhere) the preemption verdict, product against oracle."""
    cluster = objects.read_cluster(objs)
    pod = _pending(cluster)[0]
    handle = framework.Handle(
        now=0.0,
        rng=random.Random(seed),
        volumes=storage.VolumeCatalog(cluster.storage),
        resources=resource_claims.ResourceCatalog(cluster.resources),
    )
    fw = framework.build_frameworks(STOCK, PLUGINS, handle)[api.DEFAULT_SCHEDULER_NAME]
    snapshot = _snapshot(cluster)
    world = world_of(cluster, snapshot.names)

    got, state = product_feasible(fw, pod, snapshot)
    want = oracle.feasible(pod, world)
    assert got == want, f"{pod.key}: feasible nodes: product {got}, oracle {want}"

    if got:
        nodes = np.array([snapshot.index[n] for n in got], dtype=np.intp)
        status = fw.run_pre_score(state, pod, snapshot, nodes)
        assert status.is_success, f"PreScore: {status.message}"
        outcome = fw.run_score(state, pod, snapshot, nodes)
        assert outcome.status.is_success, f"Score: {outcome.status.message}"
        product = {s.plugin: [int(v) for v in s.normalized] for s in outcome.plugins}
        expected = oracle.scores(pod, got, world)
        assert set(product) == set(expected), (
            f"{pod.key}: scoring plugins: product {sorted(product)}, oracle {sorted(expected)}"
        )
        for plugin, values in expected.items():
            close = all(
                abs(a - b) <= SCORE_TOLERANCE for a, b in zip(product[plugin], values, strict=True)
            )
            assert close, (
                f"{pod.key}: {plugin} on {got}: product {product[plugin]}, oracle {values}"
            )
        return

    if pod.volumes or pod.resource_claims:
        return  # the oracle's preemption knows no volumes nor devices (a holder evicted)
    scheduler = scheduling.Scheduler(
        {api.DEFAULT_SCHEDULER_NAME: fw}, _snapshot(cluster), rng=random.Random(seed)
    )
    result = scheduler.schedule_one(pod)
    assert result.node is None and result.status.code is not api.Code.ERROR, result.status
    best = oracle.preemption(pod, world, cluster.disruption_budgets)
    offer = result.preemption
    nominated = None if offer is None else offer.nominated_node
    if not best:
        assert not nominated, f"{pod.key}: product nominated {nominated}, oracle nothing"
        return
    assert nominated, f"{pod.key}: oracle nominates one of {[c.node for c in best]}, product none"
    assert offer is not None
    chosen = {c.node: c for c in best}
    assert nominated in chosen, f"{pod.key}: product {nominated}, oracle one of {sorted(chosen)}"
    victims = sorted(v.key for v in offer.victims)
    expected_victims = sorted(v.key for v in chosen[nominated].victims)
    assert victims == expected_victims, (
        f"{pod.key} on {nominated}: victims product {victims}, oracle {expected_victims}"
    )


def plan_invariants(objs: list[dict[str, Any]], seed: int = 0) -> planner.Plan:
    """The whole plan (default profile, NodePressure included): every pending pod placed
    at most once; each scheduled pod on a node the oracle's filters accept at that point
    of the plan (so never over allocatable; for volumes with the storage as it was before
    the plan, a necessary condition; for devices with the claims as that pod's cycle
    found them, after the earlier pods' allocations and PostFilter's deallocations);
    ``--explain`` changes nothing and agrees; a PV is bound to at most one claim, and
    every scheduled pod's claims are bound to PVs its node can reach or selected for
    provisioning on its node."""
    cluster = objects.read_cluster(objs)
    configuration = config.parse_configuration(None, PLUGINS)
    plain = planner.plan(cluster, configuration, plugins=PLUGINS, seed=seed, now=0.0)
    volumes = storage.VolumeCatalog(cluster.storage)
    resources = resource_claims.ResourceCatalog(cluster.resources)
    # the claims as each pod's cycle found them: a cycle changes them (an allocation, or
    # PostFilter deallocating an idle claim that blocked its pod, whose devices a later
    # pod may then take), so the oracle must judge each placement against its own moment
    claims_before: list[tuple[resource_claims.ResourceClaim, ...]] = []
    stream = planner.placements(
        cluster,
        configuration,
        plugins=PLUGINS,
        seed=seed,
        now=0.0,
        explain_nodes=True,
        volumes=volumes,
        resources=resources,
    )
    steps = []
    while True:
        before = tuple(resources.claims())
        step = next(stream, None)
        if step is None:
            break
        steps.append(step)
        claims_before.append(before)
    explained = planner.Plan(tuple(steps))
    pending = {p.key for p in _pending(cluster)}
    keys = [p.pod for p in plain.placements]
    assert len(keys) == len(set(keys)), f"a pod placed twice: {keys}"
    assert set(keys) <= pending
    for a, b in zip(plain.placements, explained.placements, strict=True):
        assert (a.pod, a.node, a.status, a.nominated_node, a.victims) == (
            b.pod,
            b.node,
            b.status,
            b.nominated_node,
            b.victims,
        ), f"--explain changed the plan: {a} vs {b}"
        assert a.status is not planner.Outcome.ERROR, f"{a.pod}: {a.message}"

    by_key = {p.key: p for p in cluster.pods}
    order = [n.name for n in cluster.nodes]
    world = world_of(cluster, order)
    by_node = {n.name: n for n in cluster.nodes}
    for placement, claims in zip(explained.placements, claims_before, strict=True):
        pod = by_key[placement.pod]
        if placement.status is planner.Outcome.SCHEDULED:
            assert placement.node is not None
            world.resources = dataclasses.replace(world.resources, claims=claims)
            verdict = oracle.filter_node(pod, by_node[placement.node], world)
            assert verdict == oracle.Verdict.FIT, (
                f"{pod.key} placed on {placement.node}, which the oracle rejects ({verdict})"
            )
            assert placement.nodes is not None
            chosen = placement.nodes[placement.node]
            assert chosen.feasible, f"{pod.key}: --explain calls its node infeasible"
            scored = [v.score for v in placement.nodes.values() if v.score is not None]
            if chosen.score is not None:
                assert chosen.score == max(scored), f"{pod.key}: not the best score"
            world.pods_on[placement.node].append(pod)
        elif placement.status is planner.Outcome.NOMINATED:
            assert placement.nominated_node is not None
            victims = set(placement.victims)
            on_node = world.pods_on[placement.nominated_node]
            assert victims <= {p.key for p in on_node}, f"{pod.key}: victims not on the node"
            world.pods_on[placement.nominated_node] = [p for p in on_node if p.key not in victims]
        elif placement.status is planner.Outcome.UNSCHEDULABLE and placement.nodes:
            assert not any(v.feasible for v in placement.nodes.values()), (
                f"{pod.key}: unschedulable, yet --explain lists a feasible node"
            )
    volume_invariants(explained, by_key, by_node, volumes)
    device_invariants(explained, by_key, by_node, resources)
    return plain


def device_invariants(
    plan: planner.Plan,
    pods: dict[str, api.Pod],
    nodes: dict[str, api.Node],
    resources: resource_claims.ResourceCatalog,
) -> None:
    """A device is allocated to at most one claim; every scheduled pod's claims are
    allocated on devices of its node (the fuzz's slices are node-local) and reserved for
    it; nothing is left in flight."""
    holders: dict[object, str] = {}
    for held in resources.claims():
        for device in held.devices:
            assert device not in holders, f"{device} allocated to {holders[device]} and {held.key}"
            holders[device] = held.key
    left = [c.key for c in resources.claims() if resources.pending(c.uid) is not None]
    assert not left, f"allocations left in flight: {left}"
    for placement in plan.placements:
        if placement.status is not planner.Outcome.SCHEDULED or placement.node is None:
            continue
        pod = pods[placement.pod]
        for entry in pod.resource_claims:
            used = resources.claim(pod.namespace, entry.claim_name)
            assert used is not None and used.allocated, f"{pod.key}: {entry.claim_name} unallocated"
            assert used.reserved_for_pod(pod), f"{pod.key}: {used.key} not reserved for it"
            terms = used.node_selector or ()
            assert not terms or any(oracle.term_matches(t, nodes[placement.node]) for t in terms), (
                f"{pod.key} on {placement.node}: {used.key} allocated elsewhere"
            )


def volume_invariants(
    plan: planner.Plan,
    pods: dict[str, api.Pod],
    nodes: dict[str, api.Node],
    volumes: storage.VolumeCatalog,
) -> None:
    claims = volumes.all_claims()
    taken = [c.volume_name for c in claims if c.volume_name]
    assert len(taken) == len(set(taken)), f"a PV bound to two claims: {sorted(taken)}"
    for pv in volumes.all_volumes():
        if pv.claim_ref is not None and pv.phase is not storage.VolumePhase.AVAILABLE:
            claim = volumes.claim(pv.claim_ref.namespace, pv.claim_ref.name)
            assert claim is None or claim.volume_name in ("", pv.name), (
                f"{pv.name} names {pv.claim_ref.key}, which is bound to {claim.volume_name}"
            )
    for placement in plan.placements:
        if placement.status is not planner.Outcome.SCHEDULED or placement.node is None:
            continue
        pod, node = pods[placement.pod], nodes[placement.node]
        for volume in pod.volumes:
            name = storage.claim_name(pod, volume)
            if not name:
                continue
            claim = volumes.claim(pod.namespace, name)
            assert claim is not None, f"{pod.key} scheduled without its claim {name}"
            if claim.volume_name:
                bound = volumes.volume(claim.volume_name)
                assert bound is not None and oracle.pv_accepts(bound, node), (
                    f"{pod.key} on {node.name}: its claim {name}'s PV cannot reach the node"
                )
            else:
                selected = claim.annotations.get(storage.ANN_SELECTED_NODE)
                assert selected == node.name, (
                    f"{pod.key} on {node.name}: claim {name} unbound, selected node {selected}"
                )
