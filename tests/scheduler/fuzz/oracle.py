"""A plain-loop reference of kube-scheduler's default plugins, for one pod against a
cluster: which nodes are feasible, each score plugin's normalized scores, and what
preemption would do. Written straight from kube-scheduler's rules (each names the upstream
plugin or function it follows), one node and one pod at a time, no arrays, no caches:
slow and obviously right, so the product's vectorised plugins can be checked against
it.

It reads the parsed values (:mod:`nodeagent.scheduler.api`): quantity parsing is the
parser's, checked by its own tests; everything a plugin decides is recomputed here, and
so is a pod's request (:func:`requests`: containers, sidecars, init containers and the
in-place resize rule over the status, from the pod object as written).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodeagent.k8s.pressure import Taint
from nodeagent.k8s.quantities import quantity_value
from nodeagent.scheduler import api, resource_claims, storage
from nodeagent.scheduler.dra.model import DeviceID

CPU, MEMORY, EPHEMERAL, PODS = "cpu", "memory", "ephemeral-storage", "pods"
HOSTNAME = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "NoSchedule", "")


# --- a pod's requests ----------------------------------------------------------------------
Amounts = dict[str, int]


def _amounts(raw: object) -> Amounts:
    out: Amounts = {}
    for name, text in dict(raw or {}).items():  # type: ignore[call-overload]
        value = quantity_value(text)
        out[name] = math.ceil(value * 1000 if name == CPU else value)
    return out


def _spec_requests(container: Mapping[str, object]) -> Amounts:
    resources = dict(container.get("resources") or {})  # type: ignore[call-overload]
    out = _amounts(resources.get("limits"))  # the API server defaults requests to limits
    out.update(_amounts(resources.get("requests")))
    return out


def _resize_infeasible(status: Mapping[str, object]) -> bool:
    for condition in list(status.get("conditions") or []):  # type: ignore[call-overload]
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return False


def _counted(spec: Amounts, entry: Mapping[str, object] | None, infeasible: bool) -> Amounts:
    """KEP-1287 as kube-scheduler counts a container that may be resizing: for each
    resource, the largest of what is asked (unless the kubelet found it infeasible), what
    runs, and what was allocated."""
    if entry is None or entry.get("resources") is None:
        return spec
    actual = _amounts(dict(entry["resources"]).get("requests"))  # type: ignore[call-overload]
    granted = _amounts(entry.get("allocatedResources"))
    candidates = [actual, granted] if infeasible else [spec, actual, granted]
    names = {name for amounts in candidates for name in amounts}
    return {name: max(a.get(name, 0) for a in candidates if name in a) for name in names}


def requests(pod: api.Pod, defaults: Mapping[str, int] | None = None) -> Amounts:
    """The pod's requests, written out again from the pod object: sum of app containers
    and sidecars; each ordinary init container with the sidecars started before it, the
    largest of those if larger; the status counted for app containers and sidecars;
    ``defaults`` fill what a container leaves out."""
    if pod.raw is None:
        return dict(pod.requests)
    spec = dict(pod.raw.get("spec") or {})
    status = dict(pod.raw.get("status") or {})
    infeasible = _resize_infeasible(status)
    entries = {
        str(e.get("name")): e
        for key in ("containerStatuses", "initContainerStatuses")
        for e in list(status.get(key) or [])
    }

    def one(container: Mapping[str, object], with_status: bool) -> Amounts:
        mine = _spec_requests(container)
        if with_status:
            mine = _counted(mine, entries.get(str(container.get("name"))), infeasible)
        for name, value in (defaults or {}).items():
            mine.setdefault(name, value)
        return mine

    total: Amounts = {}
    for container in list(spec.get("containers") or []):
        for name, value in one(container, True).items():
            total[name] = total.get(name, 0) + value
    sidecars: Amounts = {}
    peak: Amounts = {}
    for container in list(spec.get("initContainers") or []):
        sidecar = container.get("restartPolicy") == "Always"
        mine = one(container, sidecar)
        if sidecar:
            for name, value in mine.items():
                total[name] = total.get(name, 0) + value
                sidecars[name] = sidecars.get(name, 0) + value
            running = dict(sidecars)
        else:
            running = {n: mine.get(n, 0) + sidecars.get(n, 0) for n in set(mine) | set(sidecars)}
        for name, value in running.items():
            peak[name] = max(peak.get(name, value), value)
    for name, value in peak.items():
        total[name] = max(total.get(name, value), value)
    for name, value in _amounts(spec.get("overhead")).items():
        total[name] = total.get(name, 0) + value
    return total


NON_ZERO = {CPU: 100, MEMORY: 200 * 1024 * 1024}


def nonzero(pod: api.Pod, name: str) -> int:
    """What scoring counts: :func:`requests` with kube-scheduler's defaults."""
    if pod.raw is None:
        return pod.nonzero_cpu if name == CPU else pod.nonzero_memory
    return requests(pod, NON_ZERO).get(name, 0)


class Verdict:
    FIT = "fit"
    UNSCHEDULABLE = "unschedulable"
    UNRESOLVABLE = "unresolvable"


@dataclass
class World:
    """Nodes in the snapshot's order and the pods on each."""

    nodes: list[api.Node]
    pods_on: dict[str, list[api.Pod]]
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    storage: storage.StorageObjects = field(default_factory=storage.StorageObjects)
    resources: resource_claims.ResourceObjects = field(
        default_factory=resource_claims.ResourceObjects
    )

    def all_pods(self) -> list[tuple[api.Pod, api.Node]]:
        return [(p, n) for n in self.nodes for p in self.pods_on[n.name]]


# --- matching helpers (ToleratesTaint, node selector terms, pod affinity terms) ------------


def tolerated(tolerations: Sequence[api.Toleration], taint: Taint) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.key and t.key != taint.key:
            continue
        if t.operator in ("", "Equal"):
            if t.value == taint.value:
                return True
        elif t.operator == "Exists":
            return True
    return False


def selector_matches(selector: api.LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """A nil selector selects nothing, an empty one everything."""
    if selector is None:
        return False
    for key, value in selector.match_labels:
        if key not in labels or labels[key] != value:
            return False
    return all(
        r.operator in ("In", "NotIn", "Exists", "DoesNotExist") and requirement_matches(r, labels)
        for r in selector.match_expressions
    )


def go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64) for the values generated here."""
    if not text or not (text.isdigit() or (text[0] in "+-" and text[1:].isdigit())):
        return None
    return int(text)


def requirement_matches(r: api.Requirement, labels: Mapping[str, str]) -> bool:
    present = r.key in labels
    if r.operator == "In":
        return present and labels[r.key] in r.values
    if r.operator == "NotIn":
        return not present or labels[r.key] not in r.values
    if r.operator == "Exists":
        return present
    if r.operator == "DoesNotExist":
        return not present
    if r.operator in ("Gt", "Lt"):
        if not present or len(r.values) != 1:
            return False
        have, want = go_int(labels[r.key]), go_int(r.values[0])
        if have is None or want is None:
            return False
        return have > want if r.operator == "Gt" else have < want
    return False


def term_matches(term: api.SelectorTerm, node: api.Node) -> bool:
    """NodeAffinity: expressions and fields ANDed; a term with neither matches nothing."""
    if not term.match_expressions and not term.match_fields:
        return False
    for r in term.match_expressions:
        if not requirement_matches(r, node.labels):
            return False
    for r in term.match_fields:
        if r.key != "metadata.name" or len(r.values) != 1 or r.operator not in ("In", "NotIn"):
            return False
        if not requirement_matches(r, {"metadata.name": node.name}):
            return False
    return True


def term_namespaces_match(term: api.PodAffinityTerm, owner_ns: str, ns: str, world: World) -> bool:
    """InterPodAffinity: namespaces ∪ namespaceSelector; both empty: the owner's namespace."""
    if not term.namespaces and term.namespace_selector is None:
        return ns == owner_ns
    if ns in term.namespaces:
        return True
    selector = term.namespace_selector
    if selector is None:
        return False
    return selector_matches(selector, world.namespace_labels.get(ns, {}))


def affinity_term_matches(
    term: api.PodAffinityTerm, owner_ns: str, pod: api.Pod, world: World
) -> bool:
    return term_namespaces_match(term, owner_ns, pod.namespace, world) and selector_matches(
        term.selector, pod.labels
    )


# --- Filter --------------------------------------------------------------------------------


def node_unschedulable(pod: api.Pod, node: api.Node) -> str:
    """NodeUnschedulable."""
    if node.unschedulable and not tolerated(pod.tolerations, UNSCHEDULABLE_TAINT):
        return Verdict.UNRESOLVABLE
    return Verdict.FIT


def node_name(pod: api.Pod, node: api.Node) -> str:
    return Verdict.UNRESOLVABLE if pod.node_name and pod.node_name != node.name else Verdict.FIT


def taint_toleration(pod: api.Pod, node: api.Node) -> str:
    """TaintToleration Filter."""
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerated(pod.tolerations, taint):
            return Verdict.UNRESOLVABLE
    return Verdict.FIT


def required_node_affinity(pod: api.Pod, node: api.Node) -> bool:
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value or key not in node.labels:
            return False
    if pod.affinity is None or pod.affinity.required is None:
        return True
    return any(term_matches(t, node) for t in pod.affinity.required)


def node_affinity(pod: api.Pod, node: api.Node) -> str:
    """NodeAffinity Filter."""
    return Verdict.FIT if required_node_affinity(pod, node) else Verdict.UNRESOLVABLE


def node_ports(pod: api.Pod, node: api.Node, world: World) -> str:
    for mine in pod.host_ports:
        for other in world.pods_on[node.name]:
            for theirs in other.host_ports:
                if mine.port != theirs.port or mine.protocol != theirs.protocol:
                    continue
                if "0.0.0.0" in (mine.ip, theirs.ip) or mine.ip == theirs.ip:
                    return Verdict.UNSCHEDULABLE
    return Verdict.FIT


def used(node: api.Node, world: World) -> dict[str, int]:
    total: dict[str, int] = {}
    for other in world.pods_on[node.name]:
        for name, amount in requests(other).items():
            total[name] = total.get(name, 0) + amount
    return total


def resources_fit(pod: api.Pod, node: api.Node, world: World) -> str:
    """NodeResourcesFit Filter (``fitsRequest``)."""
    alloc = node.allocatable
    unresolvable = False
    failed = False
    if len(world.pods_on[node.name]) + 1 > alloc.get(PODS, 0):
        failed = True
    have = used(node, world)
    for name, request in requests(pod).items():
        if request <= 0:
            continue
        free = alloc.get(name, 0) - have.get(name, 0)
        if request > free:
            failed = True
            if request > alloc.get(name, 0):
                unresolvable = True
    if not failed:
        return Verdict.FIT
    return Verdict.UNRESOLVABLE if unresolvable else Verdict.UNSCHEDULABLE


def spread_eligible(pod: api.Pod, node: api.Node, c: api.SpreadConstraint) -> bool:
    """PodTopologySpread's inclusion policies (``nodeAffinityPolicy``, ``nodeTaintsPolicy``)."""
    if c.honor_node_affinity and not required_node_affinity(pod, node):
        return False
    if c.honor_node_taints:
        for taint in node.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not tolerated(
                pod.tolerations, taint
            ):
                return False
    return True


def spread_matching(pod: api.Pod, c: api.SpreadConstraint, node: api.Node, world: World) -> int:
    return sum(
        1
        for other in world.pods_on[node.name]
        if other.namespace == pod.namespace
        and not other.deleting
        and selector_matches(c.selector, other.labels)
    )


def topology_spread(pod: api.Pod, node: api.Node, world: World) -> str:
    """PodTopologySpread Filter."""
    hard = [c for c in pod.spread_constraints if c.when_unsatisfiable.value == "DoNotSchedule"]
    keys = [c.topology_key for c in hard]
    worst = Verdict.FIT
    for c in hard:
        if c.topology_key not in node.labels:
            return Verdict.UNRESOLVABLE
        counts: dict[str, int] = {}
        for other in world.nodes:
            if not all(k in other.labels for k in keys) or not spread_eligible(pod, other, c):
                continue
            value = other.labels[c.topology_key]
            counts[value] = counts.get(value, 0) + spread_matching(pod, c, other, world)
        global_min = min(counts.values()) if counts else 0
        if len(counts) < c.min_domains:
            global_min = 0
        self_match = 1 if selector_matches(c.selector, pod.labels) else 0
        skew = counts.get(node.labels[c.topology_key], 0) + self_match - global_min
        if skew > c.max_skew:
            worst = Verdict.UNSCHEDULABLE
    return worst


def inter_pod_affinity(pod: api.Pod, node: api.Node, world: World) -> str:
    """InterPodAffinity Filter: the pod's affinity, its anti-affinity, existing pods'
    anti-affinity."""
    affinity = pod.pod_affinity
    required = affinity.required if affinity else ()
    anti = affinity.required_anti if affinity else ()
    everyone = world.all_pods()
    if required:

        def matches_all(other: api.Pod) -> bool:
            return all(affinity_term_matches(t, pod.namespace, other, world) for t in required)

        # "Anywhere" is upstream's affinityCounts: matching pods on nodes carrying one
        # of the terms' topology keys (a pod on a node without them is counted nowhere).
        anywhere = any(
            matches_all(o) and any(t.topology_key in where.labels for t in required)
            for o, where in everyone
        )
        self_affine = all(affinity_term_matches(t, pod.namespace, pod, world) for t in required)
        for t in required:
            if t.topology_key not in node.labels:
                return Verdict.UNRESOLVABLE
        exempt = not anywhere and self_affine
        if not exempt:
            for t in required:
                value = node.labels[t.topology_key]
                if not any(
                    matches_all(o)
                    and where.labels.get(t.topology_key) == value
                    and t.topology_key in where.labels
                    for o, where in everyone
                ):
                    return Verdict.UNRESOLVABLE
    for t in anti:
        if t.topology_key not in node.labels:
            continue
        value = node.labels[t.topology_key]
        for o, where in everyone:
            if (
                t.topology_key in where.labels
                and where.labels[t.topology_key] == value
                and affinity_term_matches(t, pod.namespace, o, world)
            ):
                return Verdict.UNSCHEDULABLE
    for o, where in everyone:
        for t in o.pod_affinity.required_anti if o.pod_affinity else ():
            if t.topology_key not in where.labels or t.topology_key not in node.labels:
                continue
            if where.labels[t.topology_key] != node.labels[t.topology_key]:
                continue
            if affinity_term_matches(t, o.namespace, pod, world):
                return Verdict.UNSCHEDULABLE
    return Verdict.FIT


# --- volumes (volumerestrictions, nodevolumelimits, volumebinding, volumezone) ---------------

RWOP = "ReadWriteOncePod"
ZONE_KEYS = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region": "topology.kubernetes.io/region",
}


def claim_of(world: World, namespace: str, name: str) -> storage.PersistentVolumeClaim | None:
    for claim in world.storage.claims:
        if claim.namespace == namespace and claim.name == name:
            return claim
    return None


def volume_of(world: World, name: str) -> storage.PersistentVolume | None:
    for pv in world.storage.volumes:
        if pv.name == name:
            return pv
    return None


def class_of(world: World, name: str) -> storage.StorageClass | None:
    for sc in world.storage.classes:
        if sc.name == name:
            return sc
    return None


def claims_used(pod: api.Pod) -> list[tuple[str, bool]]:
    """(claim name, ephemeral) of the pod's claim-backed volumes."""
    out = []
    for v in pod.volumes:
        if v.kind is api.VolumeKind.CLAIM:
            out.append((v.claim_name, False))
        elif v.kind is api.VolumeKind.EPHEMERAL:
            out.append((f"{pod.name}-{v.name}", True))
    return out


def volume_restrictions(pod: api.Pod, node: api.Node, world: World) -> str:
    rwop_in_use = False
    for name, ephemeral in claims_used(pod):
        if ephemeral:
            continue
        claim = claim_of(world, pod.namespace, name)
        if claim is None:
            return Verdict.UNRESOLVABLE
        if storage.AccessMode(RWOP) in claim.access_modes:
            for other, _ in world.all_pods():
                if other.namespace == pod.namespace and any(
                    n == name for n, _ in claims_used(other)
                ):
                    rwop_in_use = True
    for mine in pod.volumes:
        for other in world.pods_on[node.name]:
            for theirs in other.volumes:
                if mine.kind is not theirs.kind or mine.disk != theirs.disk:
                    continue
                both_read_only = mine.read_only and theirs.read_only
                if mine.kind is api.VolumeKind.AWS_EBS:
                    return Verdict.UNSCHEDULABLE
                if (
                    mine.kind in (api.VolumeKind.GCE_PD, api.VolumeKind.ISCSI)
                    and not both_read_only
                ):
                    return Verdict.UNSCHEDULABLE
                if (
                    mine.kind is api.VolumeKind.RBD
                    and set(mine.monitors) & set(theirs.monitors)
                    and not both_read_only
                ):
                    return Verdict.UNSCHEDULABLE
    return Verdict.UNSCHEDULABLE if rwop_in_use else Verdict.FIT


def _attachable(
    pod: api.Pod, csi_node: storage.CSINode | None, world: World, *, new: bool
) -> dict[str, str] | None:
    """Unique volume -> driver; None when a claim of the ``new`` pod is missing (an
    existing pod's missing claim is skipped)."""
    found: dict[str, str] = {}
    for v in pod.volumes:
        if v.kind in storage.IN_TREE_PLUGIN and csi_node is not None:
            driver = storage.IN_TREE_TO_CSI[storage.IN_TREE_PLUGIN[v.kind]]
            found[f"{driver}/{v.disk}"] = driver
    for name, _ in claims_used(pod):
        claim = claim_of(world, pod.namespace, name)
        if claim is None:
            if new:
                return None
            continue
        pv = volume_of(world, claim.volume_name) if claim.volume_name else None
        if pv is not None:
            if pv.source is not None and not (pv.source.in_tree and csi_node is None):
                found[f"{pv.source.driver}/{pv.source.handle}"] = pv.source.driver
            continue
        sc = class_of(world, claim.class_name) if claim.class_name else None
        if sc is None:
            continue
        driver = storage.IN_TREE_TO_CSI.get(sc.provisioner, sc.provisioner)
        if sc.provisioner in storage.IN_TREE_TO_CSI and csi_node is None:
            continue
        found[f"{driver}/unbound-{claim.namespace}/{claim.name}"] = driver
    return found


def node_volume_limits(pod: api.Pod, node: api.Node, world: World) -> str:
    csi_node = next((c for c in world.storage.csi_nodes if c.name == node.name), None)
    wanted = _attachable(pod, csi_node, world, new=True)
    if wanted is None:
        return Verdict.UNRESOLVABLE
    if csi_node is None or not wanted:
        return Verdict.FIT
    attached: dict[str, str] = {}
    for other in world.pods_on[node.name]:
        attached.update(_attachable(other, csi_node, world, new=False) or {})
    for driver, limit in csi_node.drivers.items():
        if limit is None:
            continue
        new = {u for u, d in wanted.items() if d == driver and u not in attached}
        if new and len([u for u, d in attached.items() if d == driver]) + len(new) > limit:
            return Verdict.UNSCHEDULABLE
    return Verdict.FIT


def pv_accepts(pv: storage.PersistentVolume, node: api.Node) -> bool:
    if pv.node_affinity is None:
        return True
    return any(
        not t.is_empty and term_matches(t, api.Node("", node.labels)) for t in pv.node_affinity
    )


def volume_binding(pod: api.Pod, node: api.Node, world: World) -> str:
    delayed = []
    for name, ephemeral in dict.fromkeys(claims_used(pod)):  # a claim mounted twice: once
        claim = claim_of(world, pod.namespace, name)
        if claim is None or claim.phase is storage.ClaimPhase.LOST or claim.deleting:
            return Verdict.UNRESOLVABLE
        if ephemeral and claim.controller_uid != pod.uid:
            return Verdict.UNRESOLVABLE
        if claim.fully_bound:
            pv = volume_of(world, claim.volume_name)
            if pv is None or not pv_accepts(pv, node):
                return Verdict.UNRESOLVABLE
            continue
        sc = class_of(world, claim.class_name) if claim.class_name else None
        wait = sc is not None and sc.binding_mode is storage.BindingMode.WAIT_FOR_FIRST_CONSUMER
        if not wait or claim.volume_name:
            return Verdict.UNRESOLVABLE
        delayed.append(claim)
    chosen: set[str] = set()
    for claim in sorted(delayed, key=lambda c: c.request or 0):
        selected = claim.annotations.get(storage.ANN_SELECTED_NODE)
        if selected is not None:
            if selected != node.name or not _provisionable(claim, node, world):
                return Verdict.UNRESOLVABLE
            continue
        best: storage.PersistentVolume | None = None
        for pv in world.storage.volumes:
            if pv.name in chosen or pv.storage_class != claim.class_name or pv.deleting:
                continue
            if pv.claim_ref is not None or pv.phase is not storage.VolumePhase.AVAILABLE:
                continue
            if pv.capacity < (claim.request or 0) or pv.volume_mode is not claim.volume_mode:
                continue
            if not claim.access_modes <= pv.access_modes or not pv_accepts(pv, node):
                continue
            if claim.selector is not None and not claim.selector.matches(pv.labels):
                continue
            if best is None or (pv.capacity, pv.name) < (best.capacity, best.name):
                best = pv
        if best is not None:
            chosen.add(best.name)
        elif not _provisionable(claim, node, world):
            return Verdict.UNRESOLVABLE
    return Verdict.FIT


def _provisionable(claim: storage.PersistentVolumeClaim, node: api.Node, world: World) -> bool:
    sc = class_of(world, claim.class_name)
    if sc is None or sc.provisioner in ("", storage.NOT_SUPPORTED_PROVISIONER):
        return False
    if sc.allowed_topologies and not any(
        t.expressions and all(node.labels.get(k) in v for k, v in t.expressions)
        for t in sc.allowed_topologies
    ):
        return False
    driver = next((d for d in world.storage.csi_drivers if d.name == sc.provisioner), None)
    if claim.request is None or driver is None or not driver.storage_capacity:
        return True
    for capacity in world.storage.capacities:
        limit = (
            capacity.capacity
            if capacity.maximum_volume_size is None
            else capacity.maximum_volume_size
        )
        if (
            capacity.storage_class == sc.name
            and limit is not None
            and limit >= claim.request
            and capacity.node_topology is not None
            and selector_matches(capacity.node_topology, node.labels)
        ):
            return True
    return False


def volume_zone(pod: api.Pod, node: api.Node, world: World) -> str:
    for name, ephemeral in claims_used(pod):
        if ephemeral:
            continue
        claim = claim_of(world, pod.namespace, name)
        if claim is None:
            return Verdict.UNRESOLVABLE
        if not claim.volume_name:
            sc = class_of(world, claim.class_name) if claim.class_name else None
            if sc is None or sc.binding_mode is not storage.BindingMode.WAIT_FOR_FIRST_CONSUMER:
                return Verdict.UNRESOLVABLE
            continue
        pv = volume_of(world, claim.volume_name)
        if pv is None:
            return Verdict.UNRESOLVABLE
        if not any(k in node.labels for k in ZONE_KEYS):
            continue
        for key, value in pv.labels.items():
            if key not in ZONE_KEYS:
                continue
            zones = {z.strip() for z in value.split("__")}
            have = node.labels.get(key, node.labels.get(ZONE_KEYS[key]))
            if have is None or have not in zones:
                return Verdict.UNRESOLVABLE
    return Verdict.FIT


# --- dynamic resource allocation (dynamicresources, with the structured allocator) --------

_MODEL = re.compile(r'\.model == "(\w+)"$')


def claim_named(world: World, namespace: str, name: str) -> resource_claims.ResourceClaim | None:
    for claim in world.resources.claims:
        if claim.namespace == namespace and claim.name == name:
            return claim
    return None


def _wants(claim: resource_claims.ResourceClaim) -> tuple[str, int, str | None]:
    """(class, count, model or None) of the fuzz's one-request claims."""
    exactly = claim.parsed.spec.requests[0].exactly
    assert exactly is not None
    model = None
    for selector in exactly.selectors:
        found = _MODEL.search(selector or "")
        assert found is not None, selector
        model = found.group(1)
    return exactly.device_class_name, exactly.count, model


def _search(wanted: list[tuple[int, str | None]], free: list[tuple[str, str]]) -> bool:
    """Whether each claim (count, model) gets its own devices among ``free`` ((name,
    model)), every way tried."""
    if not wanted:
        return True
    (count, model), rest = wanted[0], wanted[1:]
    fitting = [d for d in free if model is None or d[1] == model]
    for chosen in itertools.combinations(fitting, count):
        if _search(rest, [d for d in free if d not in chosen]):
            return True
    return False


def dynamic_resources(pod: api.Pod, node: api.Node, world: World) -> str:
    """The pod's claims must exist; allocated ones must be on the node; the others must
    all get free devices of the node's slices (of their class's driver, their model)."""
    claims = []
    for entry in pod.resource_claims:
        claim = claim_named(world, pod.namespace, entry.claim_name)
        if claim is None or claim.deleting:
            return Verdict.UNRESOLVABLE
        claims.append(claim)
    pending = []
    for claim in claims:
        if claim.allocated:
            terms = claim.node_selector or ()
            if terms and not any(term_matches(t, node) for t in terms):
                return Verdict.UNRESOLVABLE
        else:
            pending.append(claim)
    if not pending:
        return Verdict.FIT
    classes = {c.name for c in world.resources.classes}
    wanted = []
    for claim in pending:
        class_name, count, model = _wants(claim)
        if class_name not in classes:
            return Verdict.UNRESOLVABLE
        wanted.append((count, model))
    taken = {d for c in world.resources.claims for d in c.devices}
    free = [
        (device.name, str(device.attributes["model"]))
        for s in world.resources.slices
        if s.node_name == node.name
        for device in s.devices
        if DeviceID(s.driver, s.pool, device.name) not in taken
    ]
    return Verdict.FIT if _search(wanted, free) else Verdict.UNRESOLVABLE


def filter_node(pod: api.Pod, node: api.Node, world: World) -> str:
    """The default Filter plugins in order (``getDefaultPlugins``), stopping at the first
    rejection."""
    for verdict in (
        node_unschedulable(pod, node),
        node_name(pod, node),
        taint_toleration(pod, node),
        node_affinity(pod, node),
        node_ports(pod, node, world),
        resources_fit(pod, node, world),
        volume_restrictions(pod, node, world),
        node_volume_limits(pod, node, world),
        volume_binding(pod, node, world),
        volume_zone(pod, node, world),
        topology_spread(pod, node, world),
        inter_pod_affinity(pod, node, world),
        dynamic_resources(pod, node, world),
    ):
        if verdict != Verdict.FIT:
            return verdict
    return Verdict.FIT


def feasible(pod: api.Pod, world: World) -> list[str]:
    return [n.name for n in world.nodes if filter_node(pod, n, world) == Verdict.FIT]


# --- Score ---------------------------------------------------------------------------------


def default_normalize(scores: list[int], reverse: bool) -> list[int]:
    """``DefaultNormalizeScore`` (``plugins/helper/normalize_score.go``)."""
    top = max(scores, default=0)
    if top == 0:
        return [100] * len(scores) if reverse else list(scores)
    out = [100 * s // top for s in scores]
    return [100 - s for s in out] if reverse else out


def taint_toleration_scores(pod: api.Pod, nodes: list[api.Node]) -> list[int]:
    """TaintToleration Score."""
    useful = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
    raw = [
        sum(
            1
            for taint in n.taints
            if taint.effect == "PreferNoSchedule" and not tolerated(useful, taint)
        )
        for n in nodes
    ]
    return default_normalize(raw, reverse=True)


def node_affinity_scores(pod: api.Pod, nodes: list[api.Node]) -> list[int] | None:
    """NodeAffinity Score; None: PreScore skips (no preferred terms)."""
    preferred = pod.affinity.preferred if pod.affinity else ()
    if not preferred:
        return None
    raw = [
        sum(p.weight for p in preferred if p.weight and term_matches(p.preference, n))
        for n in nodes
    ]
    return default_normalize(raw, reverse=False)


def least_allocated_scores(pod: api.Pod, nodes: list[api.Node], world: World) -> list[int]:
    """NodeResourcesFit's LeastAllocated over cpu and memory (weights 1), non-zero requests."""
    out = []
    for n in nodes:
        total = weights = 0
        for name in (CPU, MEMORY):
            cap = n.allocatable.get(name, 0)
            if cap == 0:
                continue
            mine = nonzero(pod, name)
            theirs = sum(nonzero(o, name) for o in world.pods_on[n.name])
            requested = mine + theirs
            total += 0 if requested > cap else (cap - requested) * 100 // cap
            weights += 1
        out.append(total // weights if weights else 0)
    return out


def balanced_allocation_scores(
    pod: api.Pod, nodes: list[api.Node], world: World
) -> list[int] | None:
    """NodeResourcesBalancedAllocation (v1.36): the change in balance the pod makes;
    None: a pod requesting neither cpu nor memory is skipped."""
    own = requests(pod)
    mine = {name: own.get(name, 0) for name in (CPU, MEMORY)}
    if not any(mine.values()):
        return None

    def balance(amounts: dict[str, int], n: api.Node) -> int:
        fractions = []
        for name in (CPU, MEMORY):
            cap = n.allocatable.get(name, 0)
            if cap <= 0:
                continue
            fractions.append(min(1.0, amounts.get(name, 0) / cap))
        std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
        return int((1 - std) * 100)

    out = []
    for n in nodes:
        have = used(n, world)
        with_pod = balance({name: have.get(name, 0) + mine[name] for name in mine}, n)
        difference = 50 + with_pod - balance(have, n)
        # Go's integer division truncates toward zero
        half = abs(difference) // 2 if difference >= 0 else -(abs(difference) // 2)
        out.append(50 + half)
    return out


def go_round(x: float) -> int:
    """Go's math.Round: half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def topology_spread_scores(pod: api.Pod, nodes: list[api.Node], world: World) -> list[int] | None:
    """PodTopologySpread Score (ScheduleAnyway constraints; no system defaults in these
    clusters)."""
    soft = [c for c in pod.spread_constraints if c.when_unsatisfiable.value == "ScheduleAnyway"]
    if not soft:
        return None
    keys = [c.topology_key for c in soft]
    ignored = {n.name for n in nodes if not all(k in n.labels for k in keys)}
    counted_nodes = [n for n in nodes if n.name not in ignored]
    weights = []
    values: list[set[str]] = []
    for c in soft:
        seen = {n.labels[c.topology_key] for n in counted_nodes}
        size = len(counted_nodes) if c.topology_key == HOSTNAME else len(seen)
        values.append(seen)
        weights.append(math.log(size + 2))
    counts: list[dict[str, int]] = [dict.fromkeys(v, 0) for v in values]
    for other in world.nodes:
        if not all(k in other.labels for k in keys):
            continue
        for i, c in enumerate(soft):
            if c.topology_key == HOSTNAME or not spread_eligible(pod, other, c):
                continue
            value = other.labels[c.topology_key]
            if value in counts[i]:
                counts[i][value] += spread_matching(pod, c, other, world)
    raw: list[int] = []
    for n in nodes:
        if n.name in ignored:
            raw.append(0)
            continue
        total = 0.0
        for i, c in enumerate(soft):
            if c.topology_key == HOSTNAME:
                count = spread_matching(pod, c, n, world)
            else:
                count = counts[i].get(n.labels[c.topology_key], 0)
            total += count * weights[i] + (c.max_skew - 1)
        raw.append(go_round(total))
    kept = [s for n, s in zip(nodes, raw, strict=True) if n.name not in ignored]
    if not kept:
        return [0] * len(nodes)
    low, high = min(kept), max(kept)
    out = []
    for n, s in zip(nodes, raw, strict=True):
        if n.name in ignored:
            out.append(0)
        elif high == 0:
            out.append(100)
        else:
            out.append(100 * (high + low - s) // high)
    return out


def inter_pod_affinity_scores(
    pod: api.Pod, nodes: list[api.Node], world: World, hard_weight: int = 1
) -> list[int] | None:
    """InterPodAffinity Score; None: no topology score at all (PreScore skips)."""
    topology: dict[tuple[str, str], int] = {}

    def add(key: str, where: api.Node, amount: int) -> None:
        if key in where.labels:
            slot = (key, where.labels[key])
            topology[slot] = topology.get(slot, 0) + amount

    affinity = pod.pod_affinity
    preferred = affinity.preferred if affinity else ()
    preferred_anti = affinity.preferred_anti if affinity else ()
    for other, where in world.all_pods():
        for w in preferred:
            if affinity_term_matches(w.term, pod.namespace, other, world):
                add(w.term.topology_key, where, w.weight)
        for w in preferred_anti:
            if affinity_term_matches(w.term, pod.namespace, other, world):
                add(w.term.topology_key, where, -w.weight)
        theirs = other.pod_affinity
        if theirs is None:
            continue
        for t in theirs.required:
            if hard_weight and affinity_term_matches(t, other.namespace, pod, world):
                add(t.topology_key, where, hard_weight)
        for w in theirs.preferred:
            if affinity_term_matches(w.term, other.namespace, pod, world):
                add(w.term.topology_key, where, w.weight)
        for w in theirs.preferred_anti:
            if affinity_term_matches(w.term, other.namespace, pod, world):
                add(w.term.topology_key, where, -w.weight)
    if not topology:
        return None
    raw = [
        sum(
            amount
            for (key, value), amount in topology.items()
            if n.labels.get(key) == value and key in n.labels
        )
        for n in nodes
    ]
    low, high = min(raw), max(raw)
    if high == low:
        return [0] * len(nodes)
    return [int(100 * ((s - low) / (high - low))) for s in raw]


def image_locality_scores(nodes: list[api.Node]) -> list[int]:
    """The generated nodes list no images: ImageLocality scores 0 everywhere."""
    assert all(not n.images for n in nodes)
    return [0] * len(nodes)


def scores(pod: api.Pod, names: list[str], world: World) -> dict[str, list[int]]:
    """Normalized scores per plugin over ``names`` (plugins whose PreScore skips left
    out), for the default profile without NodePressure."""
    nodes = [n for n in world.nodes if n.name in set(names)]
    found: dict[str, list[int] | None] = {
        "TaintToleration": taint_toleration_scores(pod, nodes),
        "NodeAffinity": node_affinity_scores(pod, nodes),
        "NodeResourcesFit": least_allocated_scores(pod, nodes, world),
        "PodTopologySpread": topology_spread_scores(pod, nodes, world),
        "InterPodAffinity": inter_pod_affinity_scores(pod, nodes, world),
        "NodeResourcesBalancedAllocation": balanced_allocation_scores(pod, nodes, world),
        "ImageLocality": image_locality_scores(nodes),
    }
    return {name: s for name, s in found.items() if s is not None}


# --- Preemption (DefaultPreemption) ----------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    node: str
    victims: tuple[api.Pod, ...]
    pdb_violations: int


def _importance(p: api.Pod) -> tuple[int, float]:
    return (-p.priority, p.start_time if p.start_time is not None else math.inf)


def _violating(
    pods: list[api.Pod], budgets: Sequence[api.DisruptionBudget]
) -> tuple[list[api.Pod], list[api.Pod]]:
    allowed = [b.disruptions_allowed for b in budgets]
    bad: list[api.Pod] = []
    good: list[api.Pod] = []
    for p in pods:
        hit = False
        for i, b in enumerate(budgets if p.labels else ()):  # upstream: no labels, no PDB
            if b.namespace != p.namespace or b.selector is None or b.selector.is_empty:
                continue
            if not selector_matches(b.selector, p.labels) or p.name in b.disrupted_pods:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                hit = True
        (bad if hit else good).append(p)
    return bad, good


def select_victims(
    pod: api.Pod, node: api.Node, world: World, budgets: Sequence[api.DisruptionBudget]
) -> Candidate | None:
    potential = [p for p in world.pods_on[node.name] if p.priority < pod.priority]
    if not potential:
        return None
    kept = [p for p in world.pods_on[node.name] if p.priority >= pod.priority]
    trial = World(world.nodes, {**world.pods_on, node.name: list(kept)}, world.namespace_labels)
    if filter_node(pod, node, trial) != Verdict.FIT:
        return None
    potential.sort(key=_importance)
    bad, good = _violating(potential, budgets)
    victims: list[api.Pod] = []
    violations = 0
    for group, violating in ((bad, True), (good, False)):
        for p in group:
            trial.pods_on[node.name].append(p)
            if filter_node(pod, node, trial) != Verdict.FIT:
                trial.pods_on[node.name].remove(p)
                victims.append(p)
                violations += int(violating)
    victims.sort(key=_importance)
    return Candidate(node.name, tuple(victims), violations)


def preemption(
    pod: api.Pod, world: World, budgets: Sequence[api.DisruptionBudget]
) -> list[Candidate]:
    """The best candidates (every one tied on ``pickOneNodeForPreemption``'s criteria 1-5);
    empty: no nomination. The product breaks the remaining tie by its random starting offset."""
    if pod.preemption_policy == "Never":
        return []
    candidates = []
    for node in world.nodes:
        if filter_node(pod, node, world) != Verdict.UNSCHEDULABLE:
            continue  # feasible nodes do not exist here; unresolvable ones are skipped
        found = select_victims(pod, node, world, budgets)
        if found is not None:
            candidates.append(found)
    if not candidates:
        return []

    def top_start(c: Candidate) -> float:
        if not c.victims:
            return math.inf
        top = max(v.priority for v in c.victims)
        starts = [v.start_time or 0.0 for v in c.victims if v.priority == top]
        return min(starts)

    def key(c: Candidate) -> tuple[int, int, int, int, float]:
        highest = max((v.priority for v in c.victims), default=-(2**31))
        total = sum(v.priority + 2**31 for v in c.victims)
        return (c.pdb_violations, highest, total, len(c.victims), -top_start(c))

    best = min(key(c) for c in candidates)
    return [c for c in candidates if key(c) == best]
