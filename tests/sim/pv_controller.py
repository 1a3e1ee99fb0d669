"""Storage in the scheduler's simulation: the PV controller, the objects, the oracle.

kube-controller-manager's PersistentVolume controller (``pkg/controller/volume/
persistentvolume/pv_controller.go``) is what completes a binding the scheduler starts:
VolumeBinding's PreBind only writes the PV's ``claimRef`` (and waits); the controller
then marks the PV ``Bound`` (``updateVolumePhase``) and, in a later write, the claim
(``bindClaimToVolume``: ``volumeName``, ``pv.kubernetes.io/bind-completed``, ``Bound``).
:class:`PVController` does the same on the :class:`~tests.sim.api.SimAPI`, one write per
step, so the simulation can interleave anything between them (the scheduler's informers
see a PV Bound before its claim, or the other way round). It also binds an
``Immediate`` class's claim to the smallest available PV of its class as soon as there
is one (``syncUnboundClaim``, node affinity ignored, as upstream), releases a PV whose
claim is gone (``Released``) and recycles it (``Available`` again, claimRef cleared: the
``Recycle`` policy, so PVs come back into play), and unbinds a PV pointing at a claim
that was bound to another PV (two schedulers across a leader change may each have
written one). An outage stops it like any client.

The oracle (:func:`volumes_fit`) and the invariants (:func:`binding_errors`,
:func:`unreachable_volumes`, :func:`stolen_volume`) read the API's objects directly,
with no code from the scheduler: a claim bound to a PV is at most one claim per PV, and
a pod may only be bound where each of its claims' PVs' node affinity lets it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from nodeagent.kube import client
from tests.sim.api import SimAPI

PVS, CLAIMS, CLASSES = "persistentvolumes", "persistentvolumeclaims", "storageclasses"
LOCAL, FAST = "local", "fast"
"""The classes: ``local`` WaitForFirstConsumer, ``fast`` Immediate; neither provisions
(``kubernetes.io/no-provisioner``): every PV is made by the simulation, on one node."""
GI = 2**30
HOSTNAME = "kubernetes.io/hostname"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"


def gibibytes(text: object) -> int:
    value = str(text)
    return int(value[:-2]) * GI if value.endswith("Gi") else int(value)


# --- objects ------------------------------------------------------------------------------
def storage_class(name: str, mode: str) -> client.KubeObject:
    return {
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": mode,
    }


def local_volume(name: str, node: str, class_name: str, size: str) -> client.KubeObject:
    return {
        "metadata": {"name": name},
        "spec": {
            "storageClassName": class_name,
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Recycle",
            "local": {"path": f"/mnt/disks/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Available"},
    }


def claim(name: str, class_name: str, size: str) -> client.KubeObject:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "storageClassName": class_name,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
        "status": {"phase": "Pending"},
    }


def claims_of(pod: client.KubeObject) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes") or ()
        if "persistentVolumeClaim" in v
    ]


def _ref(pv: client.KubeObject) -> dict[str, Any] | None:
    ref = pv["spec"].get("claimRef")
    return ref if isinstance(ref, dict) else None


def _phase(obj: client.KubeObject) -> str:
    return str((obj.get("status") or {}).get("phase", ""))


def reaches(pv: client.KubeObject, node: client.KubeObject) -> bool:
    """The PV's required node affinity (``In`` terms, the only kind made here) lets the
    node in."""
    terms = ((pv["spec"].get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
    if not terms:
        return True
    labels = node["metadata"].get("labels") or {}
    return any(
        all(labels.get(e["key"]) in e["values"] for e in term.get("matchExpressions") or ())
        for term in terms
    )


def _claim_wants(pvc: client.KubeObject) -> tuple[str, int]:
    spec = pvc["spec"]
    return str(spec.get("storageClassName") or ""), gibibytes(
        spec["resources"]["requests"]["storage"]
    )


def _fits_claim(pv: client.KubeObject, class_name: str, size: int) -> bool:
    return (
        _ref(pv) is None
        and _phase(pv) == "Available"
        and pv["spec"].get("storageClassName") == class_name
        and gibibytes(pv["spec"]["capacity"]["storage"]) >= size
        and not pv["metadata"].get("deletionTimestamp")
    )


# --- the controller -----------------------------------------------------------------------
class PVController:
    """One write per :meth:`step`, chosen at random among what it has to do."""

    def __init__(self, api: SimAPI, rng: random.Random, note: Any) -> None:
        self.api = api
        self.rng = rng
        self.note = note

    def _work(self) -> Iterator[tuple[str, str]]:
        api = self.api
        claims = {c["metadata"]["name"]: c for c in api.items(CLAIMS)}
        uids = {c["metadata"]["uid"]: c for c in claims.values()}
        classes = {c["metadata"]["name"]: c for c in api.items(CLASSES)}
        pointed: set[str] = set()
        for pv in api.items(PVS):
            name = pv["metadata"]["name"]
            ref = _ref(pv)
            if ref is None:
                continue
            holder = uids.get(ref.get("uid", ""))
            if holder is None or holder["metadata"]["name"] != ref.get("name"):
                if _phase(pv) == "Released":
                    yield "recycle", name
                else:
                    yield "release", name
                continue
            bound_to = holder["spec"].get("volumeName")
            if bound_to and bound_to != name:
                yield "unbind", name  # the claim went to another PV it pointed at
                continue
            pointed.add(holder["metadata"]["name"])
            if _phase(pv) != "Bound":
                yield "volume-bound", name
            elif not holder["spec"].get("volumeName"):
                yield "claim-bound", holder["metadata"]["name"]
        for name, pvc in claims.items():
            if pvc["spec"].get("volumeName") or name in pointed:
                continue
            sc = classes.get(str(pvc["spec"].get("storageClassName")))
            if sc is None or sc.get("volumeBindingMode") != "Immediate":
                continue  # WaitForFirstConsumer: the scheduler chooses
            class_name, size = _claim_wants(pvc)
            if any(_fits_claim(pv, class_name, size) for pv in api.items(PVS)):
                yield "match", name

    def pending(self) -> bool:
        return next(self._work(), None) is not None

    def step(self) -> bool:
        if self.api.faults.down:
            return False
        work = list(self._work())
        if not work:
            return False
        what, name = self.rng.choice(work)
        getattr(self, "_" + what.replace("-", "_"))(name)
        self.note(f"pv-controller: {what} {name}")
        return True

    def _volume_bound(self, name: str) -> None:
        self.api.update(PVS, "", name, _set_phase("Bound"))

    def _claim_bound(self, name: str) -> None:
        pv_name = next(
            pv["metadata"]["name"]
            for pv in self.api.items(PVS)
            if (_ref(pv) or {}).get("name") == name and _phase(pv) == "Bound"
        )

        def bound(pvc: client.KubeObject) -> None:
            pvc["spec"]["volumeName"] = pv_name
            annotations = pvc["metadata"].setdefault("annotations", {})
            annotations[BIND_COMPLETED] = "yes"
            annotations[BOUND_BY_CONTROLLER] = "yes"
            pvc["status"] = {"phase": "Bound"}

        self.api.update(CLAIMS, "default", name, bound)

    def _match(self, name: str) -> None:
        """``findBestMatchForClaim`` for an Immediate claim: the smallest fitting PV."""
        pvc = self.api.get(CLAIMS, "default", name)
        assert pvc is not None
        class_name, size = _claim_wants(pvc)
        fitting = [pv for pv in self.api.items(PVS) if _fits_claim(pv, class_name, size)]
        best = min(
            fitting,
            key=lambda pv: (gibibytes(pv["spec"]["capacity"]["storage"]), pv["metadata"]["name"]),
        )
        meta = pvc["metadata"]

        def claimed(pv: client.KubeObject) -> None:
            pv["spec"]["claimRef"] = {
                "kind": "PersistentVolumeClaim",
                "namespace": "default",
                "name": meta["name"],
                "uid": meta["uid"],
            }
            pv["metadata"].setdefault("annotations", {})[BOUND_BY_CONTROLLER] = "yes"

        self.api.update(PVS, "", best["metadata"]["name"], claimed)

    def _release(self, name: str) -> None:
        self.api.update(PVS, "", name, _set_phase("Released"))

    def _recycle(self, name: str) -> None:
        self._unbind(name)

    def _unbind(self, name: str) -> None:
        """``unbindVolume``: a PV the controller bound gets its claimRef cleared."""

        def recycled(pv: client.KubeObject) -> None:
            pv["spec"].pop("claimRef", None)
            (pv["metadata"].get("annotations") or {}).pop(BOUND_BY_CONTROLLER, None)
            pv["status"] = {"phase": "Available"}

        self.api.update(PVS, "", name, recycled)


def _set_phase(phase: str) -> Any:
    def change(obj: client.KubeObject) -> None:
        obj["status"] = {"phase": phase}

    return change


# --- oracle and invariants ------------------------------------------------------------------
def volumes_fit(api: SimAPI, pod: client.KubeObject, node: client.KubeObject) -> bool:
    """Whether the pod's claims can be had on ``node``: each bound to a PV that reaches
    it, or unbound of the WaitForFirstConsumer class with an available PV there (one
    claim per pod here, so no matching between claims is needed)."""
    for name in claims_of(pod):
        pvc = api.get(CLAIMS, "default", name)
        if pvc is None or pvc["metadata"].get("deletionTimestamp"):
            return False
        bound_to = pvc["spec"].get("volumeName")
        if bound_to:
            pv = api.get(PVS, "", bound_to)
            if pv is None or not reaches(pv, node):
                return False
            continue
        class_name, size = _claim_wants(pvc)
        sc = api.get(CLASSES, "", class_name)
        if sc is None or sc.get("volumeBindingMode") != "WaitForFirstConsumer":
            return False
        if not any(
            _fits_claim(pv, class_name, size) and reaches(pv, node) for pv in api.items(PVS)
        ):
            return False
    return True


def binding_errors(api: SimAPI) -> list[str]:
    """A PV is bound to at most one claim: no two claims name it, and a claim naming a PV
    is the claim the PV's claimRef names (UID included)."""
    found: list[str] = []
    named: dict[str, list[str]] = {}
    for pvc in api.items(CLAIMS):
        volume = pvc["spec"].get("volumeName")
        if not volume:
            continue
        named.setdefault(volume, []).append(pvc["metadata"]["name"])
        pv = api.get(PVS, "", volume)
        ref = None if pv is None else _ref(pv)
        if pv is not None and (ref is None or ref.get("uid") != pvc["metadata"]["uid"]):
            found.append(
                f"claim {pvc['metadata']['name']} is bound to {volume}, whose claimRef is {ref}"
            )
    found.extend(
        f"{pv} is bound to claims {names}" for pv, names in named.items() if len(names) > 1
    )
    return found


def stolen_volume(api: SimAPI, old: client.KubeObject, new: client.KubeObject) -> str | None:
    """A PV write that moves its claimRef away from a claim that still exists."""
    before, after = _ref(old), _ref(new)
    if before is None or not before.get("uid"):
        return None
    if after is not None and after.get("uid") == before["uid"]:
        return None
    holder = api.get(CLAIMS, str(before.get("namespace", "")), str(before.get("name", "")))
    if holder is None or holder["metadata"]["uid"] != before["uid"]:
        return None
    return f"{old['metadata']['name']}'s claimRef moved from {before} to {after}"


def unreachable_volumes(api: SimAPI, pod: client.KubeObject, node_name: str) -> str | None:
    """Why a pod bound to ``node_name`` now could not reach its volumes (None: it can):
    each claim exists, is bound, and its PV's node affinity lets the node in."""
    node = api.get("nodes", "", node_name)
    for name in claims_of(pod):
        pvc = api.get(CLAIMS, "default", name)
        if pvc is None:
            return f"claim {name} does not exist"
        volume = pvc["spec"].get("volumeName")
        pv = api.get(PVS, "", volume) if volume else None
        if pv is None:
            return f"claim {name} is not bound ({pvc['spec']}, {pvc.get('status')})"
        if node is not None and not reaches(pv, node):
            return f"claim {name}'s {volume} cannot reach {node_name}: {pv['spec']['nodeAffinity']}"
    return None
