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

    python -m benchmarks.bench_vs_kube_scheduler [--nodes 5000] [--pods 10000] [--repeat 3]
        [--shapes basic,spread,anti-affinity,csi-pvs,local-pvs]

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
import json
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import urllib3
import yaml

from benchmarks.bench_scheduler import node_object, pod_object, shaped_pod
from tests.controlplane import cluster, processes
from tests.controlplane.cluster import ControlPlane, Rest

NAMESPACE = "bench"
INIT_NAMESPACE = "bench-init"
INIT_PODS = 1000
QPS = 5000
SHAPES = ("basic", "spread", "anti-affinity")
VOLUME_SHAPES = ("csi-pvs", "local-pvs")
CSI_DRIVER = "ebs.csi.aws.com"
LOCAL_CLASS = "bench-local"
SCHEDULERS = ("kube-scheduler", "nodeagent")
SCHEDULER_NAME = {"kube-scheduler": "default-scheduler", "nodeagent": "nodeagent-scheduler"}
REPO = Path(__file__).resolve().parents[1]


def create_all(rest: Rest, path: str, bodies: list[dict[str, Any]], threads: int = 16) -> None:
    def create(body: dict[str, Any]) -> None:
        rest.create(path.format(namespace=body["metadata"].get("namespace", "")), body)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, bodies))


def populate(plane: ControlPlane, nodes: int) -> None:
    """The nodes, and 1000 pods bound to random ones (SchedulingBasic's init pods)."""
    rng = random.Random(1)
    create_all(plane.admin, "/api/v1/nodes", [node_object(i, 3, rng) for i in range(nodes)])
    plane.namespace(INIT_NAMESPACE)
    init = []
    for i in range(INIT_PODS):
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
        pod = shaped_pod(shape, INIT_PODS + i)
        pod["metadata"]["namespace"] = NAMESPACE
        pod["spec"]["schedulerName"] = SCHEDULER_NAME[scheduler]
        if shape in VOLUME_SHAPES:
            claim = {"claimName": f"data-{INIT_PODS + i}"}
            pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": claim}]
        pod.pop("status", None)
        pods.append(pod)
    return pods


def delete_pending_namespace_pods(plane: ControlPlane) -> None:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    plane.admin.call("DELETE", path, {"gracePeriodSeconds": 0})
    deadline = time.monotonic() + 300
    while plane.admin.get(path, limit="1")["items"]:
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
        extra=["--log-level=warning"],
    )


def one_run(
    plane: ControlPlane, shape: str, which: str, pods: int, directory: Path, *, nodes: int
) -> dict[str, float]:
    run = f"{which}-{shape}-{time.monotonic_ns()}"
    if shape in VOLUME_SHAPES:
        create_storage(plane, shape, run, pods, nodes)
    create_all(
        plane.admin,
        "/api/v1/namespaces/{namespace}/pods",
        pending_pods(shape, pods, which),
    )
    watch = BoundWatch(plane, pods)
    apiserver = psutil.Process(plane.pid("kube-apiserver"))
    etcd = psutil.Process(plane.pid("etcd"))
    api_cpu, etcd_cpu = cpu_seconds([apiserver]), cpu_seconds([etcd])
    started = time.monotonic()
    scheduler = start_scheduler(plane, which, directory)
    try:
        root = psutil.Process(scheduler.pid)
        while not watch.done.wait(0.5):
            if not scheduler.alive():
                raise RuntimeError(f"{which} exited:\n{scheduler.tail()}")
            if time.monotonic() - started > 1800:
                raise RuntimeError(f"{which}: {watch.count}/{pods} bound after 30 min")
        procs = tree(root)
        result = {
            "seconds": watch.last - started,
            "pods_per_second": pods / (watch.last - started),
            "steady_pods_per_second": pods / max(1e-9, watch.last - watch.first),
            "cpu_ms_per_pod": 1000 * cpu_seconds(procs) / pods,
            "peak_rss_mib": peak_rss_mib(procs),
            "apiserver_cpu_ms_per_pod": 1000 * (cpu_seconds([apiserver]) - api_cpu) / pods,
            "etcd_cpu_ms_per_pod": 1000 * (cpu_seconds([etcd]) - etcd_cpu) / pods,
        }
    finally:
        scheduler.stop()
        watch.close()
    unbound = plane.admin.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", fieldSelector="spec.nodeName="
    )["items"]
    if unbound:
        raise RuntimeError(f"{which}: {len(unbound)} pods unbound after the run")
    delete_pending_namespace_pods(plane)
    if shape in VOLUME_SHAPES:
        delete_storage(plane, run)
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
    ("pods_per_second", "pods/s from start", "{:.0f}"),
    ("steady_pods_per_second", "pods/s first->last", "{:.0f}"),
    ("cpu_ms_per_pod", "CPU ms/pod", "{:.2f}"),
    ("peak_rss_mib", "peak RSS MiB", "{:.0f}"),
    ("apiserver_cpu_ms_per_pod", "apiserver CPU ms/pod", "{:.2f}"),
    ("etcd_cpu_ms_per_pod", "etcd CPU ms/pod", "{:.2f}"),
)


def describe(result: dict[str, float]) -> str:
    return ", ".join(f"{label} {fmt.format(result[key])}" for key, label, fmt in FIELDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"of {', '.join((*SHAPES, *VOLUME_SHAPES))}",
    )
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args()
    # SIGTERM (timeout, CI) unwinds like ^C, so the control plane is stopped by PID
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shapes = [s for s in args.shapes.split(",") if s]
    reason = cluster.unavailable()
    if reason is not None:
        raise SystemExit(reason)
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
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
            populate(plane, args.nodes)
            populate_storage(plane, args.nodes, shapes)
            plane.namespace(NAMESPACE)
            print(
                f"{args.nodes} nodes and {INIT_PODS} bound pods in {time.monotonic() - began:.0f} s"
            )
            for repetition in range(args.repeat):
                for shape in shapes:
                    order = SCHEDULERS if repetition % 2 == 0 else SCHEDULERS[::-1]
                    for which in order:
                        result = one_run(
                            plane, shape, which, args.pods, directory, nodes=args.nodes
                        )
                        runs.setdefault((shape, which), []).append(result)
                        print(
                            f"[{repetition + 1}] {shape:13} {which:14} {describe(result)}",
                            flush=True,
                        )
    if args.json:
        args.json.write_text(json.dumps({f"{s}/{w}": r for (s, w), r in runs.items()}, indent=2))
    print(f"\nmedians of {args.repeat} ({args.nodes} nodes, {args.pods} pods per run):")
    for shape in shapes:
        medians = {
            which: {
                key: statistics.median(r[key] for r in runs[(shape, which)]) for key, _, _ in FIELDS
            }
            for which in SCHEDULERS
        }
        for which in SCHEDULERS:
            print(f"  {shape:13} {which:14} {describe(medians[which])}")
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
