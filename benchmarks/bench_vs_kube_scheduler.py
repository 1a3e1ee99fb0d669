"""``nodeagent scheduler`` side by side with the real kube-scheduler, on one real
apiserver (etcd + kube-apiserver built by tests/controlplane/build.sh), in scheduler_perf's
shapes (``test/integration/scheduler_perf/misc/performance-config.yaml``):

* ``basic`` (SchedulingBasic): ``--nodes`` nodes as objects (4 CPU / 32 GiB / 110 pods,
  3 zones), 1000 pods already bound, ``--pods`` pending pods of 100m / 500 MiB;
* ``spread``: every pending pod in a 100-replica group with a zone topology-spread
  constraint (DoNotSchedule, maxSkew 1);
* ``anti-affinity``: a tenth of the pending pods in groups of 10 with required hostname
  anti-affinity to their group;
* ``csi-pvs`` (SchedulingCSIPVs, ``volumes/performance-config.yaml``): every node has a
  CSINode allowing 39 volumes of ``ebs.csi.aws.com``; every pending pod has its own claim,
  already bound to its own CSI PV (scheduler_perf's pv-csi and pvc templates);
* ``local-pvs``: a WaitForFirstConsumer StorageClass without a provisioner and one local
  PV per pending pod, each on one node (round robin): VolumeBinding picks a PV per pod,
  PreBind writes its claimRef, and kube-controller-manager's PV controller (started for
  this shape) completes the binding both schedulers wait for.
* ``claim-template`` (SchedulingWithResourceClaimTemplate, ``dra/performance-config.yaml``):
  a test driver publishes one ResourceSlice per node with ``--claims-per-node``
  devices (scheduler_perf's ``resourceSlice``: four attributes and a memory capacity
  each), a DeviceClass selects the driver's devices (CEL), and every pending pod
  (scheduler_perf's pod-with-claim-template: no resource requests) has a claim made from
  a ResourceClaimTemplate asking for one device; kube-controller-manager's resourceclaim
  controller (started for this shape) makes the claims, all of them before the scheduler
  starts. DynamicResources allocates a device per claim; PreBind writes the allocation
  and reservation (a finalizer update, then a status update) before binding. The init
  pods are scheduler_perf's too: ``--dra-init-pods`` (default: ``--pods``, as every
  workload of the shape has it) pods with a claim from the template, bound round robin
  over the nodes, each claim allocated the node's next device and reserved for its pod
  (the state scheduling them leaves), and, when only DRA shapes run, none of the
  other shapes' 1000 bound pods. scheduler_perf's ``5000pods_500nodes``:
  ``--nodes 500 --pods 2500 --shapes claim-template``.
* ``unschedulable`` (Unschedulable): besides the ``--pods`` basic pods, ``--never-fit``
  pods (200, scheduler_perf's count) asking 9 CPU, more than any node has, created
  first; while the run goes on, a churn of events that cannot help them: a cordoned
  4-CPU node created and an older one deleted, and a label changed on a bound pod, each
  ``--churn`` times a second. Also printed: the never-fit pods' **wasted retries** (their
  ``unschedulable`` attempts beyond the first, from the scheduler's
  ``scheduler_schedule_attempts_total``) per pod.

    python -m benchmarks.bench_vs_kube_scheduler [--nodes 5000] [--pods 10000] [--repeat 3]
        [--shapes basic,spread,anti-affinity,unschedulable,csi-pvs,local-pvs,claim-template]
        [--claims-per-node 10] [--dra-init-pods N]
        [--schedulers ...] [--ceiling]

``--ceiling``: in each repetition, before the schedulers, the API server's **ceiling** for
the per-pod writes: the pods/s at which it takes a Binding and its ``Scheduled`` event for
each of ``--pods`` pending pods (the same pods, in the same namespace, bound round robin
over the nodes), written by a client that schedules nothing, every pod at once. It is
measured with two clients, one after the other on fresh pods (their order alternating
between repetitions), and the ceiling is the faster of the two, so that it is the API
server's bound and not one client's:

* **kube-scheduler's client** (``tests/controlplane/bindclient``, built from the client-go
  release go.mod pins): protobuf bodies multiplexed over HTTP/2, a goroutine per pod
  (as kube-scheduler binds), the event as kube-scheduler writes it (events.k8s.io/v1);
* **nodeagent's** (its binding process's pipelined posters, :mod:`nodeagent.kube.pipeline`:
  JSON over 8 HTTP/1.1 connections of 8 requests in flight, a core/v1 Event).

Each client's ceiling is printed with what the whole machine spent on it (``/proc/stat``:
how busy its cores were, and CPU ms per pod over every process, the client's own
included); the **server's CPU per pod** is that less the client's own. A scheduler bound
by the machine's CPU cannot pass ``cores / (server's CPU per pod + its own CPU per pod)``:
each run prints that **CPU-bound limit** as a share of the ceiling beside its own share,
and how busy the machine was while it ran. A share of the ceiling close to the limit is
a scheduler the machine's cores hold back, not its design.

Each run then also prints the time from the scheduler's process start to its **first
binding**, and its pods/s from start as a share of the ceiling (no scheduler can pass
it: it is these writes with nothing before them). For nodeagent it prints where that
time went, from its start-up timeline (:mod:`nodeagent.scheduler.live.startup`): the
interpreter, imports and configuration until its informers start, the nodes' and the
bound pods' lists (at once, each from the informers' start), its cache synced (scheduling
begins), the first pod scheduled, its binding answered, the pod seen bound, and the
pending pods' list (opened at the cache synced) and informers synced. nodeagent runs
from a copy of this tree's package compiled to bytecode, as an installation has it (the
image installs with ``--compile``): a checkout on a machine with PYTHONDONTWRITEBYTECODE
would compile every module at every start.

Per shape and repetition, each scheduler gets the same cluster: the pending pods are
created while no scheduler runs, the scheduler process starts, and the clock runs from
its start to the last pod bound (seen on a watch of bound pods; then checked with a
list). The two alternate which goes first in each repetition. Both run as the same user
(``system:kube-scheduler``, so API Priority and Fairness treats them alike), without
leader election, with clientConnection qps = burst = 5000 (as scheduler_perf sets it);
kube-scheduler with its default profile, nodeagent with manifests/scheduler's
configuration (default plugins plus NodePressure; the nodes' pressure annotations are
stale, so it scores neutral). Printed per run and as medians:

* **pods/s**: pods / (last bound - process start), start-up and informer sync included,
  and pods / (last bound - first bound), the steady rate;
* **CPU per pod**: the scheduler's processes' CPU (nodeagent: the scheduler and its
  binding process) over the whole run, divided by the pods;
* **peak RSS** of the scheduler's processes (summed);
* **apiserver CPU** (and etcd's) over the run, per pod.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import hashlib
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import urllib3
import yaml

from benchmarks.bench_scheduler import node_object, pod_object, shaped_pod
from nodeagent.kube import http, pipeline, retry, writes
from nodeagent.kube.events import NORMAL, InvolvedObject, UniqueEvents
from nodeagent.scheduler.live.bind_child import BINDING_LIMITS, EVENT_LIMITS
from tests.controlplane import cluster, processes
from tests.controlplane.cluster import ControlPlane, Rest

NAMESPACE = "bench"
INIT_NAMESPACE = "bench-init"
INIT_PODS = 1000
QPS = 5000
SHAPES = ("basic", "spread", "anti-affinity", "unschedulable")
NEVER_FIT_CPU = "9"
"""pod-large-cpu: more than any node's 4 CPU."""
CEILING_SCHEDULER = "bench-ceiling"
"""No scheduler has this name: the ceiling's pods wait for its client alone."""
VOLUME_SHAPES = ("csi-pvs", "local-pvs")
CSI_DRIVER = "ebs.csi.aws.com"
LOCAL_CLASS = "bench-local"
DRA_SHAPES = ("claim-template",)
DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_CLASS = "test-class"
DRA_TEMPLATE = "test-claim-template"
DRA_INIT_NAMESPACE = "bench-dra-init"
RESOURCE_API = "/apis/resource.k8s.io/v1"
SCHEDULERS = ("kube-scheduler", "nodeagent")
SCHEDULER_NAME = {"kube-scheduler": "default-scheduler", "nodeagent": "nodeagent-scheduler"}
REPO = Path(__file__).resolve().parents[1]


def create_all(rest: Rest, path: str, bodies: list[dict[str, Any]], threads: int = 16) -> None:
    def create(body: dict[str, Any]) -> None:
        rest.create(path.format(namespace=body["metadata"].get("namespace", "")), body)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, bodies))


def populate(plane: ControlPlane, nodes: int, init_pods: int = INIT_PODS) -> None:
    """The nodes, and 1000 pods bound to random ones (SchedulingBasic's init pods)."""
    rng = random.Random(1)
    create_all(plane.admin, "/api/v1/nodes", [node_object(i, 3, rng) for i in range(nodes)])
    plane.namespace(INIT_NAMESPACE)
    init = []
    for i in range(init_pods):
        pod = pod_object(i, f"node-{rng.randrange(nodes)}")
        pod["metadata"]["namespace"] = INIT_NAMESPACE
        init.append(pod)
    create_all(plane.admin, "/api/v1/namespaces/{namespace}/pods", init)


def populate_storage(plane: ControlPlane, nodes: int, shapes: list[str]) -> None:
    """What the volume shapes need once: the CSINodes, the local StorageClass."""
    if "csi-pvs" in shapes:
        csi_nodes = [
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": f"node-{i}"},
                "spec": {
                    "drivers": [
                        {"name": CSI_DRIVER, "nodeID": f"node-{i}", "allocatable": {"count": 39}}
                    ]
                },
            }
            for i in range(nodes)
        ]
        create_all(plane.admin, "/apis/storage.k8s.io/v1/csinodes", csi_nodes)
    if "local-pvs" in shapes:
        plane.admin.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "metadata": {"name": LOCAL_CLASS},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )


def storage_objects(
    shape: str, count: int, run: str, nodes: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The PVs and claims of a volume shape's pending pods (claim ``data-<i>`` for pod
    ``i``), labelled with the run so they can be deleted after it."""
    pvs: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    labels = {"bench-run": run}
    for i in range(count):
        index = INIT_PODS + i
        name, pv_name = f"data-{index}", f"{run}-{index}"
        claim: dict[str, Any] = {
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        }
        pv: dict[str, Any] = {
            "metadata": {"name": pv_name, "labels": labels},
            "spec": {"capacity": {"storage": "1Gi"}, "persistentVolumeReclaimPolicy": "Retain"},
        }
        if shape == "csi-pvs":  # scheduler_perf's pv-csi.yaml and pvc.yaml, bound
            claim["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "true"}
            claim["spec"].update(accessModes=["ReadOnlyMany"], volumeName=pv_name)
            pv["spec"].update(
                accessModes=["ReadOnlyMany"],
                csi={"driver": CSI_DRIVER, "volumeHandle": f"vol-{pv_name}"},
                claimRef={"namespace": NAMESPACE, "name": name},
            )
        else:
            node = f"node-{i % nodes}"
            claim["spec"].update(accessModes=["ReadWriteOnce"], storageClassName=LOCAL_CLASS)
            term = {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                ]
            }
            pv["spec"].update(
                accessModes=["ReadWriteOnce"],
                storageClassName=LOCAL_CLASS,
                local={"path": f"/mnt/{pv_name}"},
                nodeAffinity={"required": {"nodeSelectorTerms": [term]}},
            )
        pvs.append(pv)
        claims.append(claim)
    return pvs, claims


CLAIMS_PATH = "/api/v1/namespaces/{namespace}/persistentvolumeclaims"


def dra_device(index: int) -> dict[str, Any]:
    """scheduler_perf's ``resourceSlice`` device ``instance-<index>``."""
    return {
        "name": f"instance-{index}",
        "attributes": {
            "model": {"string": "A100"},
            "family": {"string": "GPU"},
            "driverVersion": {"version": "1.2.3"},
            "dra.example.com/numa": {"int": index},
        },
        "capacity": {"memory": {"value": "1Gi"}},
    }


def populate_resources(
    plane: ControlPlane, nodes: int, claims_per_node: int, init_pods: int
) -> None:
    """What the DRA shape needs once: the driver's slices (scheduler_perf's
    ``resourceSlice``: one per node, its pool named after the node, ``instance-<i>``
    devices), the DeviceClass, the ResourceClaimTemplate in the pending pods' and the
    init pods' namespaces, and the init pods (:func:`populate_dra_init`)."""
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"node-{i}"},
            "spec": {
                "driver": DRA_DRIVER,
                "nodeName": f"node-{i}",
                "pool": {"name": f"node-{i}", "generation": 0, "resourceSliceCount": 1},
                "devices": [dra_device(d) for d in range(claims_per_node)],
            },
        }
        for i in range(nodes)
    ]
    create_all(plane.admin, f"{RESOURCE_API}/resourceslices", slices)
    plane.admin.create(
        f"{RESOURCE_API}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRA_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
        },
    )
    plane.namespace(DRA_INIT_NAMESPACE)
    for namespace in (NAMESPACE, DRA_INIT_NAMESPACE):
        plane.admin.create(
            f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": DRA_TEMPLATE, "namespace": namespace},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "req-0", "exactly": {"deviceClassName": DRA_CLASS}}
                            ]
                        }
                    }
                },
            },
        )
    populate_dra_init(plane, nodes, init_pods)


def with_claim_template(pod: dict[str, Any]) -> dict[str, Any]:
    """scheduler_perf's pod-with-claim-template: one claim from the template, used by the
    containers, which request nothing else."""
    pod["spec"]["resourceClaims"] = [
        {"name": "resource", "resourceClaimTemplateName": DRA_TEMPLATE}
    ]
    for container in pod["spec"]["containers"]:
        container["resources"] = {"claims": [{"name": "resource"}]}
    return pod


def populate_dra_init(plane: ControlPlane, nodes: int, count: int) -> None:
    """scheduler_perf's init pods, as their scheduling leaves them: pod ``i`` bound to
    node ``i mod nodes``, its claim (made by the resourceclaim controller) allocated that
    node's next free device and reserved for the pod."""
    pods = []
    for i in range(count):
        pod = with_claim_template(pod_object(i, f"node-{i % nodes}"))
        pod["metadata"]["namespace"] = DRA_INIT_NAMESPACE
        pods.append(pod)
    create_all(plane.admin, "/api/v1/namespaces/{namespace}/pods", pods)
    wait_for_claims(plane, count, DRA_INIT_NAMESPACE)
    listed = plane.admin.get(f"/api/v1/namespaces/{DRA_INIT_NAMESPACE}/pods")["items"]
    path = f"{RESOURCE_API}/namespaces/{DRA_INIT_NAMESPACE}/resourceclaims"
    patches = []
    for pod in listed:
        index = int(pod["metadata"]["name"].rsplit("-", 1)[1])
        node = pod["spec"]["nodeName"]
        claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        result = {
            "request": "req-0",
            "driver": DRA_DRIVER,
            "pool": node,
            "device": f"instance-{index // nodes}",
        }
        only = {"key": "metadata.name", "operator": "In", "values": [node]}
        status = {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [only]}]},
            },
            "reservedFor": [
                {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            ],
        }
        patches.append((f"{path}/{claim}/status", {"status": status}))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: plane.admin.merge_patch(*p), patches))


def wait_for_claims(plane: ControlPlane, pods: int, namespace: str = NAMESPACE) -> None:
    """Until the resourceclaim controller has made every pending pod's claim and named it
    in the pod's status (before the scheduler starts: the run measures the scheduler)."""
    deadline = time.monotonic() + 900
    while True:
        listed = plane.admin.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        named = sum(1 for p in listed if (p.get("status") or {}).get("resourceClaimStatuses"))
        if named >= pods:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{named}/{pods} pods' claims made after 900 s")
        time.sleep(1.0)


def delete_claims(plane: ControlPlane) -> None:
    """The run's claims, gone before the next run allocates again: the scheduler's
    delete-protection finalizer (lifted by the resourceclaim controller once a claim is
    unused, which takes its pod's deletion to reach it) is lifted by hand."""
    path = f"{RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaims"
    items = plane.admin.get(path)["items"]
    paths = [f"{path}/{o['metadata']['name']}" for o in items]
    unprotect = {"metadata": {"finalizers": None}}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(plane.admin.merge_patch, paths, [unprotect] * len(paths)))
    plane.admin.call("DELETE", path)
    deadline = time.monotonic() + 300
    while plane.admin.get(path)["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError("resourceclaims not gone after 300 s")
        time.sleep(0.5)


def create_storage(plane: ControlPlane, shape: str, run: str, pods: int, nodes: int) -> None:
    """The run's PVs and claims, before the scheduler starts. With the PV controller
    running (for local-pvs), csi-pvs' claims are bound by it as in a cluster: the claims
    first (without the bind-completed mark, naming their PV), then the PVs naming each
    claim's UID, then a wait until every claim is Bound (a pre-marked claim whose PV the
    controller has not seen, or whose claimRef lacks its UID, would be marked Lost)."""
    pvs, claims = storage_objects(shape, pods, run, nodes)
    controller = "persistentvolume-binder-controller" in plane.controllers
    if shape != "csi-pvs" or not controller:
        create_all(plane.admin, "/api/v1/persistentvolumes", pvs)
        if controller:
            wait_for(plane, "/api/v1/persistentvolumes", run, pods, ("Available",))
        create_all(plane.admin, CLAIMS_PATH, claims)
        return
    for claim in claims:
        claim["metadata"].pop("annotations", None)
    create_all(plane.admin, CLAIMS_PATH, claims)
    listed = plane.admin.get(
        CLAIMS_PATH.format(namespace=NAMESPACE), labelSelector=f"bench-run={run}"
    )
    uids = {c["metadata"]["name"]: c["metadata"]["uid"] for c in listed["items"]}
    for pv in pvs:
        pv["spec"]["claimRef"]["uid"] = uids[pv["spec"]["claimRef"]["name"]]
    create_all(plane.admin, "/api/v1/persistentvolumes", pvs)
    wait_for(plane, CLAIMS_PATH.format(namespace=NAMESPACE), run, pods, ("Bound",))


def wait_for(plane: ControlPlane, path: str, run: str, count: int, phases: tuple[str, ...]) -> None:
    """Until the PV controller has put all ``count`` objects of the run in ``phases``."""
    deadline = time.monotonic() + 600
    while True:
        listed = plane.admin.get(path, labelSelector=f"bench-run={run}")
        seen = sum(1 for o in listed["items"] if (o.get("status") or {}).get("phase") in phases)
        if seen == count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path}: {seen}/{count} {'/'.join(phases)} after 600 s")
        time.sleep(0.5)


def pending_pods(shape: str, count: int, scheduler: str) -> list[dict[str, Any]]:
    pods = []
    for i in range(count):
        pod = shaped_pod("basic" if shape == "unschedulable" else shape, INIT_PODS + i)
        pod["metadata"]["namespace"] = NAMESPACE
        pod["spec"]["schedulerName"] = SCHEDULER_NAME.get(scheduler, scheduler)
        if shape in VOLUME_SHAPES:
            claim = {"claimName": f"data-{INIT_PODS + i}"}
            pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": claim}]
        if shape in DRA_SHAPES:
            with_claim_template(pod)
        pod.pop("status", None)
        pods.append(pod)
    return pods


def never_fit_pods(count: int, scheduler: str) -> list[dict[str, Any]]:
    """Pods asking more CPU than any node has (scheduler_perf's pod-large-cpu)."""
    pods = []
    for i in range(count):
        pod = pod_object(i, None, cpu=NEVER_FIT_CPU)
        pod["metadata"] = {"name": f"never-fit-{i}", "namespace": NAMESPACE}
        pod["spec"]["schedulerName"] = SCHEDULER_NAME[scheduler]
        pods.append(pod)
    return pods


class Churn:
    """Events that cannot help a pod that fits no node, ``rate`` of each a second: a
    cordoned 4-CPU node created (and the one before last deleted), and a label of a
    bound pod changed."""

    def __init__(self, plane: ControlPlane, rate: float, nodes: int) -> None:
        self._plane, self._rate, self._nodes = plane, rate, nodes
        self._stop = threading.Event()
        self.events = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="churn")
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(7)
        rest = self._plane.admin
        created: list[str] = []
        n = 0
        while not self._stop.wait(1 / self._rate):
            node = node_object(self._nodes + n, 3, rng)
            node["metadata"]["name"] = name = f"churn-{n}"
            node["spec"] = {"unschedulable": True}
            rest.create("/api/v1/nodes", node)
            created.append(name)
            if len(created) > 2:
                rest.delete(f"/api/v1/nodes/{created.pop(0)}")
            victim = f"pod-{rng.randrange(INIT_PODS)}"
            rest.merge_patch(
                f"/api/v1/namespaces/{INIT_NAMESPACE}/pods/{victim}",
                {"metadata": {"labels": {"churn": str(n)}}},
            )
            self.events += 3 if n >= 2 else 2
            n += 1
        for name in created:
            rest.delete(f"/api/v1/nodes/{name}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def informers_synced(log: Path) -> float | None:
    """When nodeagent logged "informers synced" (its JSON log's ``time``), Unix seconds."""
    for line in log.read_text(errors="replace").splitlines():
        if '"informers synced"' in line:
            stamp = json.loads(line)["time"]
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def startup_timeline(log: Path) -> dict[str, float]:
    """nodeagent's start-up timeline (nodeagent.scheduler.live.startup), from its
    ``cache synced``, ``informers synced`` and ``first binding`` lines: seconds since
    its process started, and each first list's seconds (the nodes and bound pods listed
    at once from the informers' start, the pending pods from the cache synced)."""
    timeline: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if '"cache synced"' in line:
            fields = json.loads(line)
            lists = fields["listSeconds"]
            timeline.update(
                informers_started_seconds=fields["informersStartedAt"],
                nodes_list_seconds=lists["nodes"],
                pods_list_seconds=lists["pods"],
                cache_synced_seconds=fields["sinceStart"],
            )
        elif '"informers synced"' in line:
            fields = json.loads(line)
            if "sinceStart" not in fields:
                continue  # an older tree's
            lists = fields["listSeconds"]
            if "cache_synced_seconds" in timeline:
                timeline.update(pending_list_seconds=lists["pods"])
            else:  # a tree with one pod informer
                timeline.update(
                    informers_started_seconds=fields["informersStartedAt"],
                    nodes_list_seconds=lists["nodes"],
                    pods_list_seconds=lists["pods"],
                )
            timeline.update(synced_since_start_seconds=fields["sinceStart"])
        elif '"first binding"' in line:
            fields = json.loads(line)
            timeline.update(
                first_scheduled_seconds=fields["firstScheduledAt"],
                first_bound_answered_seconds=fields["sinceStart"],
            )
    return timeline


TIMELINE = (
    ("informers_started_seconds", "interpreter, imports, configuration"),
    ("nodes_list_seconds", "nodes listed (from the informers' start)"),
    ("pods_list_seconds", "bound pods listed (all pods, for a tree with one pod informer)"),
    ("cache_synced_seconds", "nodes and bound pods in, scheduling begins"),
    ("first_scheduled_seconds", "first pod scheduled (its binding handed over)"),
    ("first_bound_answered_seconds", "first binding's answer back in the scheduler"),
    ("first_binding_seconds", "first pod seen bound (the benchmark's watch)"),
    ("pending_list_seconds", "pending pods listed (from the cache synced)"),
    ("synced_since_start_seconds", "informers synced"),
)
"""The start-up breakdown printed per nodeagent run: seconds since its process start,
but for the lists, which are durations."""


def describe_timeline(result: dict[str, float]) -> str:
    return "; ".join(f"{label} {result[key]:.2f}" for key, label in TIMELINE if key in result)


def unschedulable_attempts(plane: ControlPlane, which: str, port: int) -> float:
    """``scheduler_schedule_attempts_total{result="unschedulable"}`` summed over
    profiles, from the scheduler's own metrics (kube-scheduler's secure port is read
    with the admin's client certificate)."""
    if which == "kube-scheduler":
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # its own cert
        pool = urllib3.PoolManager(
            cert_reqs="CERT_NONE",
            cert_file=str(plane.admin_credentials.certificate),
            key_file=str(plane.admin_credentials.key),
        )
        url = f"https://127.0.0.1:{port}/metrics"
    else:
        pool = urllib3.PoolManager()
        url = f"http://127.0.0.1:{port}/metrics"
    text = pool.request("GET", url, timeout=10.0).data.decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("scheduler_schedule_attempts_total{")
        and 'result="unschedulable"' in line
    )


CEILING_CLIENTS = ("kube-scheduler's client", "nodeagent's client")


@dataclasses.dataclass(frozen=True)
class MachineCPU:
    """The machine's CPU time (``/proc/stat``: every core, every process) at an instant."""

    busy: float
    total: float

    @classmethod
    def now(cls) -> MachineCPU:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        ticks = os.sysconf("SC_CLK_TCK")
        idle = fields[3] + fields[4]  # idle, iowait
        total = sum(fields[:8])  # guest time is counted in user already
        return cls((total - idle) / ticks, total / ticks)

    def since(self, before: MachineCPU) -> tuple[float, float]:
        """(CPU seconds spent, share of the machine busy) since ``before``."""
        busy = self.busy - before.busy
        return busy, busy / max(1e-9, self.total - before.total)


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """One repetition's ceiling: pods/s per client, and the faster; per client, the
    machine's CPU per pod (every process) and its own, and how busy the machine was."""

    rates: dict[str, float]
    machine_ms_per_pod: dict[str, float]
    client_ms_per_pod: dict[str, float]
    busy: dict[str, float]

    @property
    def fastest(self) -> str:
        return max(self.rates, key=self.rates.__getitem__)

    @property
    def best(self) -> float:
        return self.rates[self.fastest]

    @property
    def server_ms_per_pod(self) -> float:
        """What the writes cost the machine beside their client, at the faster client."""
        fastest = self.fastest
        return self.machine_ms_per_pod[fastest] - self.client_ms_per_pod[fastest]

    def __str__(self) -> str:
        each = ", ".join(
            f"{client} {rate:.0f} (machine {100 * self.busy[client]:.0f}% busy,"
            f" {self.machine_ms_per_pod[client]:.2f} CPU ms/pod,"
            f" the client's own {self.client_ms_per_pod[client]:.2f})"
            for client, rate in self.rates.items()
        )
        return f"{self.best:.0f} pods/s ({each})"


def cpu_bound_limit(server_ms_per_pod: float, scheduler_ms_per_pod: float) -> float:
    """Pods/s the machine's cores allow a scheduler spending ``scheduler_ms_per_pod``
    beside the writes' ``server_ms_per_pod`` (module docstring)."""
    cores = os.cpu_count() or 1
    return 1000 * cores / (server_ms_per_pod + scheduler_ms_per_pod)


def bind_ceiling(plane: ControlPlane, pods: int, nodes: int, repetition: int) -> Ceiling:
    """The API server's ceiling for a binding and its Scheduled event per pod: the
    faster of kube-scheduler's client and nodeagent's (module docstring)."""
    order = CEILING_CLIENTS if repetition % 2 == 0 else CEILING_CLIENTS[::-1]
    rates: dict[str, float] = {}
    machine: dict[str, float] = {}
    own: dict[str, float] = {}
    busy: dict[str, float] = {}
    for client in order:
        create_all(
            plane.admin,
            "/api/v1/namespaces/{namespace}/pods",
            pending_pods("basic", pods, CEILING_SCHEDULER),
        )
        listed = plane.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        targets = [(p["metadata"]["name"], p["metadata"]["uid"]) for p in listed]
        before = MachineCPU.now()
        if client == CEILING_CLIENTS[0]:
            rates[client], client_seconds = go_bind_ceiling(plane, targets, nodes)
        else:
            rates[client], client_seconds = python_bind_ceiling(plane, targets, nodes)
        spent, busy[client] = MachineCPU.now().since(before)
        machine[client] = 1000 * spent / len(targets)
        own[client] = 1000 * client_seconds / len(targets)
        delete_pending_namespace_pods(plane)
    return Ceiling(
        {c: rates[c] for c in CEILING_CLIENTS},
        {c: machine[c] for c in CEILING_CLIENTS},
        {c: own[c] for c in CEILING_CLIENTS},
        {c: busy[c] for c in CEILING_CLIENTS},
    )


BINDCLIENT = cluster.HERE / "bindclient"


def bindclient() -> Path:
    """kube-scheduler's client for the ceiling, built (or found up to date) beside the
    control plane's binaries, with build.sh's flags so that its Go build cache serves."""
    directory = cluster.binaries_directory()
    binary = directory / "bindclient"
    sources = (BINDCLIENT / "main.go", cluster.HERE / "go.mod", cluster.HERE / "go.sum")
    stamp = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    stamp_file = directory / ".bindclient.stamp"
    if os.access(binary, os.X_OK) and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return binary
    building = directory / f".bindclient.{os.getpid()}"
    try:  # into a file of its own, then renamed: two builds at once leave one whole binary
        flags = ["-trimpath", "-buildvcs=false", "-ldflags=-s -w"]
        subprocess.run(
            ["go", "build", *flags, "-o", str(building), "./bindclient"],
            cwd=cluster.HERE,
            check=True,
            timeout=1800,
        )
        os.replace(building, binary)
    finally:
        building.unlink(missing_ok=True)
    stamp_file.write_text(stamp)
    return binary


def go_bind_ceiling(
    plane: ControlPlane, targets: list[tuple[str, str]], nodes: int
) -> tuple[float, float]:
    """Pods/s of kube-scheduler's client writing the bindings and events, and its CPU
    seconds."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [
            str(bindclient()),
            f"-kubeconfig={plane.scheduler_kubeconfig}",
            f"-namespace={NAMESPACE}",
            f"-nodes={nodes}",
            f"-qps={QPS}",
            f"-component={CEILING_SCHEDULER}",
        ],
        input="".join(f"{name} {uid}\n" for name, uid in targets),
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    result = json.loads(done.stdout)
    if result["failures"]:
        raise RuntimeError(f"ceiling: {result['failures']} writes failed, e.g. {result['error']}")
    if result["retries"]:
        print(f"  (kube-scheduler's client tried {result['retries']} writes again)")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    return float(result["pods"]) / float(result["seconds"]), cpu


def python_bind_ceiling(
    plane: ControlPlane, targets: list[tuple[str, str]], nodes: int
) -> tuple[float, float]:
    """Pods/s of nodeagent's binding process's posters writing the bindings and events
    (from this process, which does nothing else meanwhile), and its CPU seconds."""
    spec = http.ConnectionSpec(
        plane.scheduler_kubeconfig,
        qps=100_000,
        burst=100_000,
        retry_policy=retry.RetryPolicy(attempts=3),
        timeout=(5.0, 60.0),
    )
    address, credentials = spec.resolve()
    events = UniqueEvents(
        reason="Scheduled", event_type=NORMAL, component=CEILING_SCHEDULER, host="ceiling"
    )
    failures: list[BaseException] = []

    async def write_all() -> float:
        bindings = pipeline.Poster(address, credentials, limits=BINDING_LIMITS)
        recorder = pipeline.Poster(address, credentials, limits=EVENT_LIMITS)
        finished = asyncio.Event()
        left = 2 * len(targets)

        def done(error: BaseException | None) -> None:
            nonlocal left
            if error is not None:
                failures.append(error)
            left -= 1
            if left == 0:
                finished.set()

        def bound(name: str, uid: str, node: str, error: BaseException | None) -> None:
            done(error)
            body = events.body(
                InvolvedObject("Pod", name, NAMESPACE, uid),
                f"Successfully assigned {NAMESPACE}/{name} to {node}",
            )
            recorder.post(
                "create",
                "events",
                what=name,
                path=writes.events_path(NAMESPACE),
                body=body,
                done=done,
            )

        started = time.perf_counter()
        for i, (name, uid) in enumerate(targets):
            node = f"node-{i % nodes}"
            bindings.post(
                "create",
                "pods/binding",
                what=name,
                path=writes.binding_path(NAMESPACE, name),
                body=writes.binding_body(NAMESPACE, name, uid=uid, node_name=node),
                done=functools.partial(bound, name, uid, node),
            )
        await finished.wait()
        elapsed = time.perf_counter() - started
        bindings.close()
        recorder.close()
        return elapsed

    cpu = time.process_time()
    elapsed = asyncio.run(write_all())
    cpu = time.process_time() - cpu
    if failures:
        raise RuntimeError(f"ceiling: {len(failures)} writes failed, e.g. {failures[0]}")
    return len(targets) / elapsed, cpu


def delete_pending_namespace_pods(plane: ControlPlane) -> None:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    deadline = time.monotonic() + 300
    asked = 0.0
    while True:
        if time.monotonic() - asked > 10:
            asked = time.monotonic()
            try:
                plane.admin.call("DELETE", path, {"gracePeriodSeconds": 0})
                asked = float("inf")  # answered: the deletion is under way
            except cluster.ApiError as exc:
                # a loaded apiserver answers 504 with the deletion half done: ask again
                if exc.status != 504:
                    raise
            except urllib3.exceptions.ProtocolError:
                pass  # or drops the connection of a collection delete it timed out
        if not plane.admin.get(path, limit="1")["items"]:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("pods of the last run not gone after 300 s")
        time.sleep(0.5)


class BoundWatch:
    """Counts pods of NAMESPACE as they get a nodeName, from a watch with a field
    selector (a pod entering the selection arrives as ADDED): the time of the first and
    of the last, without parsing the pods."""

    def __init__(self, plane: ControlPlane, expected: int) -> None:
        listed = plane.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods", limit="1")
        self.expected = expected
        self.first = 0.0
        self.last = 0.0
        self.count = 0
        self.done = threading.Event()
        pool = urllib3.PoolManager(
            cert_reqs="CERT_REQUIRED",
            ca_certs=str(plane.ca.certificate),
            cert_file=str(plane.admin_credentials.certificate),
            key_file=str(plane.admin_credentials.key),
        )
        self._response = pool.request(
            "GET",
            f"{plane.url}/api/v1/namespaces/{NAMESPACE}/pods?watch=1"
            f"&fieldSelector=spec.nodeName%21%3D&resourceVersion="
            f"{listed['metadata']['resourceVersion']}&timeoutSeconds=1800",
            preload_content=False,
            timeout=urllib3.Timeout(connect=5, read=None),
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        # amt=None: each chunk as it arrives (with an amount, urllib3 holds back a short tail)
        for chunk in self._response.stream(None):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.startswith(b'{"type":"ADDED"'):
                    now = time.monotonic()
                    self.first = self.first or now
                    self.last = now
                    self.count += 1
            if self.count >= self.expected:
                self.done.set()
                break
        self._response.release_conn()

    def close(self) -> None:
        if self._thread.is_alive():
            self._response.shutdown()


def tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def peak_rss_mib(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except (OSError, ValueError):
            pass
    return total


def installed_package(directory: Path) -> Path:
    """This tree's package copied and compiled to bytecode, as ``pip install`` (and the
    image, ``--compile``) leaves it: run from the checkout on a machine that sets
    PYTHONDONTWRITEBYTECODE, every start would compile every module again, 0.1-0.3 s
    of CPU no installation spends."""
    from benchmarks.bench_startup import installed_copy

    return installed_copy(REPO, directory / "installed")


def start_scheduler(plane: ControlPlane, which: str, directory: Path) -> processes.Process:
    if which == "kube-scheduler":
        return processes.kube_scheduler(
            plane,
            "bench-kube-scheduler",
            {
                "leaderElection": {"leaderElect": False},
                "clientConnection": {
                    "kubeconfig": str(plane.scheduler_kubeconfig),
                    "qps": QPS,
                    "burst": QPS,
                },
            },
            verbosity=0,
        )
    document = yaml.safe_load((REPO / "manifests" / "scheduler" / "config.yaml").read_text())
    document["leaderElection"] = {"leaderElect": False}
    document["clientConnection"] = {"qps": QPS, "burst": QPS}
    config = directory / "nodeagent-scheduler.yaml"
    config.write_text(yaml.safe_dump(document))
    return processes.nodeagent_scheduler(
        plane,
        "bench-nodeagent-scheduler",
        kubeconfig=plane.scheduler_kubeconfig,
        config=config,
        # plain-HTTP metrics on loopback, read at the end of an unschedulable run
        extra=["--log-level=info", "--metrics-auth=none"],
        python_path=directory / "installed",
    )


@dataclasses.dataclass(frozen=True)
class RunShape:
    """What one run creates besides its pods: the never-fit pods and the churn."""

    never_fit: int = 0
    churn: float = 0.0
    nodes: int = 0


def one_run(
    plane: ControlPlane,
    shape: str,
    which: str,
    pods: int,
    directory: Path,
    *,
    extra: RunShape,
) -> dict[str, float]:
    never_fit = extra.never_fit if shape == "unschedulable" else 0
    if never_fit:
        create_all(
            plane.admin, "/api/v1/namespaces/{namespace}/pods", never_fit_pods(never_fit, which)
        )
    run = f"{which}-{shape}-{time.monotonic_ns()}"
    if shape in VOLUME_SHAPES:
        create_storage(plane, shape, run, pods, extra.nodes)
    create_all(
        plane.admin,
        "/api/v1/namespaces/{namespace}/pods",
        pending_pods(shape, pods, which),
    )
    if shape in DRA_SHAPES:
        wait_for_claims(plane, pods)
    watch = BoundWatch(plane, pods)
    apiserver = psutil.Process(plane.pid("kube-apiserver"))
    etcd = psutil.Process(plane.pid("etcd"))
    api_cpu, etcd_cpu = cpu_seconds([apiserver]), cpu_seconds([etcd])
    machine = MachineCPU.now()
    started, started_wall = time.monotonic(), time.time()
    scheduler = start_scheduler(plane, which, directory)
    churn = Churn(plane, extra.churn, extra.nodes) if never_fit and extra.churn else None
    try:
        root = psutil.Process(scheduler.pid)
        while not watch.done.wait(0.5):
            if not scheduler.alive():
                raise RuntimeError(f"{which} exited:\n{scheduler.tail()}")
            if time.monotonic() - started > 1800:
                raise RuntimeError(f"{which}: {watch.count}/{pods} bound after 30 min")
        procs = tree(root)
        _, busy = MachineCPU.now().since(machine)
        if churn is not None:
            churn.stop()
        result = {
            "seconds": watch.last - started,
            "first_binding_seconds": watch.first - started,
            "pods_per_second": pods / (watch.last - started),
            "steady_pods_per_second": pods / max(1e-9, watch.last - watch.first),
            "cpu_ms_per_pod": 1000 * cpu_seconds(procs) / pods,
            "peak_rss_mib": peak_rss_mib(procs),
            "apiserver_cpu_ms_per_pod": 1000 * (cpu_seconds([apiserver]) - api_cpu) / pods,
            "etcd_cpu_ms_per_pod": 1000 * (cpu_seconds([etcd]) - etcd_cpu) / pods,
            "machine_busy_percent": 100 * busy,
        }
        synced = informers_synced(scheduler.log) if which == "nodeagent" else None
        if synced is not None:
            result["informers_synced_seconds"] = synced - started_wall
            result.update(startup_timeline(scheduler.log))
        if never_fit:
            attempts = unschedulable_attempts(plane, which, scheduler.port)
            result["wasted_retries_per_pod"] = (attempts - never_fit) / never_fit
            result["churn_events"] = float(churn.events if churn is not None else 0)
    finally:
        if churn is not None:
            churn.stop()
        scheduler.stop()
        watch.close()
    unbound = plane.admin.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", fieldSelector="spec.nodeName="
    )["items"]
    if len(unbound) != never_fit:
        raise RuntimeError(f"{which}: {len(unbound) - never_fit} pods unbound after the run")
    delete_pending_namespace_pods(plane)
    if shape in VOLUME_SHAPES:
        delete_storage(plane, run)
    if shape in DRA_SHAPES:
        delete_claims(plane)
    return result


def delete_storage(plane: ControlPlane, run: str) -> None:
    """The run's claims and PVs, gone before the next run reuses the claims' names. The
    API server's StorageObjectInUseProtection gives both a finalizer that only the
    protection controllers (not run here) would lift: it is lifted by hand."""
    selector = {"labelSelector": f"bench-run={run}"}
    unprotect = {"metadata": {"finalizers": None}}
    for path in (CLAIMS_PATH.format(namespace=NAMESPACE), "/api/v1/persistentvolumes"):
        items = plane.admin.get(path, **selector)["items"]
        paths = [f"{path}/{o['metadata']['name']}" for o in items]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(plane.admin.merge_patch, paths, [unprotect] * len(paths)))
        plane.admin.call("DELETE", path, query=selector)
        deadline = time.monotonic() + 300
        while plane.admin.get(path, **selector)["items"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path} of run {run} not gone after 300 s")
            time.sleep(0.5)


FIELDS = (
    ("informers_synced_seconds", "informers synced s", "{:.2f}"),
    ("first_binding_seconds", "first binding s", "{:.2f}"),
    ("pods_per_second", "pods/s from start", "{:.0f}"),
    ("steady_pods_per_second", "pods/s first->last", "{:.0f}"),
    ("cpu_ms_per_pod", "CPU ms/pod", "{:.2f}"),
    ("peak_rss_mib", "peak RSS MiB", "{:.0f}"),
    ("apiserver_cpu_ms_per_pod", "apiserver CPU ms/pod", "{:.2f}"),
    ("etcd_cpu_ms_per_pod", "etcd CPU ms/pod", "{:.2f}"),
    ("machine_busy_percent", "machine busy %", "{:.0f}"),
    ("wasted_retries_per_pod", "wasted retries/never-fit pod", "{:.2f}"),
)


def describe(result: dict[str, float]) -> str:
    return ", ".join(
        f"{label} {fmt.format(result[key])}" for key, label, fmt in FIELDS if key in result
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"of {', '.join((*SHAPES, *VOLUME_SHAPES, *DRA_SHAPES))}",
    )
    parser.add_argument(
        "--claims-per-node", type=int, default=10, help="devices per node (claim-template)"
    )
    parser.add_argument(
        "--dra-init-pods",
        type=int,
        help="claim-template's bound pods holding a device each (default: --pods)",
    )
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--never-fit", type=int, default=200)
    parser.add_argument("--churn", type=float, default=10.0, help="churn events/s of each kind")
    parser.add_argument("--ceiling", action="store_true", help="measure the apiserver's ceiling")
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args()
    # SIGTERM (timeout, CI) unwinds like ^C, so the control plane is stopped by PID
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shapes = [s for s in args.shapes.split(",") if s]
    schedulers = tuple(s for s in args.schedulers.split(",") if s)
    extra = RunShape(args.never_fit, args.churn, args.nodes)
    ceilings: list[Ceiling] = []
    reason = cluster.unavailable()
    if reason is not None:
        raise SystemExit(reason)
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        installed_package(directory)
        # nodes are objects here, as in scheduler_perf: no node lifecycle controller would
        # lift TaintNodesByCondition's not-ready taint, so that plugin is off; the only
        # controller is the one that makes the namespace's default ServiceAccount
        # the PV controller completes the bindings VolumeBinding starts (local-pvs)
        controllers: tuple[str, ...] = ("serviceaccount-controller",)
        controller_flags: tuple[str, ...] = ()
        if "local-pvs" in shapes:
            controllers += ("persistentvolume-binder-controller",)
            # claims are bound on the controller's claim resync: every second, and with
            # room for its writes, so that the schedulers, not it, set the pace
            controller_flags = (
                "--pvclaimbinder-sync-period=1s",
                "--kube-api-qps=2000",
                "--kube-api-burst=2000",
            )
        if set(DRA_SHAPES) & set(shapes):
            # makes the pods' claims from their template
            controllers += ("resourceclaim-controller",)
            controller_flags = tuple(
                dict.fromkeys((*controller_flags, "--kube-api-qps=2000", "--kube-api-burst=2000"))
            )
        with cluster.running(
            directory / "controlplane",
            controllers=controllers,
            controller_manager_flags=controller_flags,
            apiserver_flags=(
                "--disable-admission-plugins=TaintNodesByCondition",
                # clearing 10,000 pods between runs: one worker takes minutes
                "--delete-collection-workers=8",
            ),
        ) as plane:
            print(f"control plane {cluster.pinned_version()} started in {plane.times}")
            began = time.monotonic()
            only_dra = set(shapes) <= set(DRA_SHAPES)
            populate(plane, args.nodes, 0 if only_dra else INIT_PODS)
            populate_storage(plane, args.nodes, shapes)
            plane.namespace(NAMESPACE)
            if set(DRA_SHAPES) & set(shapes):
                dra_init = args.pods if args.dra_init_pods is None else args.dra_init_pods
                if dra_init > args.nodes * args.claims_per_node:
                    parser.error(
                        f"--dra-init-pods {dra_init}: more than the"
                        f" {args.nodes * args.claims_per_node} devices"
                    )
                populate_resources(plane, args.nodes, args.claims_per_node, dra_init)
            bound = (0 if only_dra else INIT_PODS) + (
                dra_init if set(DRA_SHAPES) & set(shapes) else 0
            )
            print(f"{args.nodes} nodes and {bound} bound pods in {time.monotonic() - began:.0f} s")
            for repetition in range(args.repeat):
                if args.ceiling:
                    ceilings.append(bind_ceiling(plane, args.pods, args.nodes, repetition))
                    print(f"[{repetition + 1}] ceiling: {ceilings[-1]}", flush=True)
                for shape in shapes:
                    order = schedulers if repetition % 2 == 0 else schedulers[::-1]
                    for which in order:
                        result = one_run(plane, shape, which, args.pods, directory, extra=extra)
                        runs.setdefault((shape, which), []).append(result)
                        print(
                            f"[{repetition + 1}] {shape:13} {which:14} {describe(result)}",
                            flush=True,
                        )
                        if "first_bound_answered_seconds" in result:
                            print(f"    start-up, s: {describe_timeline(result)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({f"{s}/{w}": r for (s, w), r in runs.items()}, indent=2))
    print(f"\nmedians of {args.repeat} ({args.nodes} nodes, {args.pods} pods per run):")
    ceiling = statistics.median(c.best for c in ceilings) if ceilings else None
    server_ms = statistics.median(c.server_ms_per_pod for c in ceilings) if ceilings else 0.0
    if ceiling is not None:
        each = ", ".join(
            f"{client} {statistics.median(c.rates[client] for c in ceilings):.0f}"
            for client in CEILING_CLIENTS
        )
        print(
            f"  apiserver ceiling (binding + Scheduled event): {ceiling:.0f} pods/s"
            f" (the faster client of each repetition; medians: {each});"
            f" the server's CPU per pod {server_ms:.2f} ms"
        )
    for shape in shapes:
        medians = {
            which: {
                key: statistics.median(r[key] for r in runs[(shape, which)])
                for key, _, _ in FIELDS
                if key in runs[(shape, which)][0]
            }
            for which in schedulers
        }
        for which in schedulers:
            share = ""
            if ceiling is not None:
                limit = cpu_bound_limit(server_ms, medians[which]["cpu_ms_per_pod"])
                share = (
                    f", {100 * medians[which]['pods_per_second'] / ceiling:.0f}% of the ceiling"
                    f" (its CPU-bound limit: {100 * min(limit, ceiling) / ceiling:.0f}%)"
                )
            print(f"  {shape:13} {which:14} {describe(medians[which])}{share}")
        timed = [
            r for r in runs.get((shape, "nodeagent"), []) if "first_bound_answered_seconds" in r
        ]
        if timed:
            median = {
                key: statistics.median(r[key] for r in timed)
                for key, _ in TIMELINE
                if all(key in r for r in timed)
            }
            print(f"  {shape:13} nodeagent start-up, s (medians): {describe_timeline(median)}")
        if set(SCHEDULERS) - set(schedulers):
            continue
        ours, theirs = medians["nodeagent"], medians["kube-scheduler"]
        print(
            f"  {shape:13} nodeagent / kube-scheduler: throughput"
            f" {ours['pods_per_second'] / theirs['pods_per_second']:.2f}x from start,"
            f" {ours['steady_pods_per_second'] / theirs['steady_pods_per_second']:.2f}x steady;"
            f" CPU per pod {ours['cpu_ms_per_pod'] / theirs['cpu_ms_per_pod']:.2f}x;"
            f" peak RSS {ours['peak_rss_mib'] / theirs['peak_rss_mib']:.2f}x;"
            f" apiserver CPU per pod"
            f" {ours['apiserver_cpu_ms_per_pod'] / theirs['apiserver_cpu_ms_per_pod']:.2f}x"
        )


if __name__ == "__main__":
    main()
