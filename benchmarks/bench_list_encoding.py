"""How long the real API server takes to stream a scheduler's start-up lists, as JSON (what
nodeagent reads) and as protobuf (what kube-scheduler's client-go asks for), to a client
that only reads the bytes and drops them.

A scheduler cannot have its informers synced before the API server has written its lists,
so this is the floor under its first binding that no work on the client's side lowers:
the time from asking for the pods' streamed list (WatchList: a watch with
``sendInitialEvents=true``, as both schedulers' informers ask) to its closing bookmark,
with the nodes' list streamed at the same time, as the informers stream them.

The cluster is ``bench_vs_kube_scheduler``'s: ``--nodes`` nodes, 1000 bound pods and
``--pods`` pending ones. The encodings alternate round by round; printed per encoding:
the median (fastest) wall time until each list's bookmark, the bytes, and the API
server's CPU seconds over the two lists.

    python -m benchmarks.bench_list_encoding [--nodes 5000] [--pods 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import psutil

from benchmarks import bench_vs_kube_scheduler as side_by_side
from nodeagent.kube import http as kube_http
from nodeagent.kube import retry
from nodeagent.kube.address import Address
from tests.controlplane import cluster

ENCODINGS = {
    "json": "application/json",
    "protobuf": "application/vnd.kubernetes.protobuf;stream=watch",
}
BOOKMARK_END = b"k8s.io/initial-events-end"
"""The annotation of the bookmark that closes the initial events (in either encoding the
annotation's key is written as these bytes)."""


def stream_until_bookmark(
    address: Address, headers: dict[str, str], path: str, accept: str
) -> tuple[float, int]:
    """Seconds from asking for ``path``'s streamed list to its closing bookmark, and the
    bytes read by then."""
    connection = http.client.HTTPSConnection(address.host, address.port, context=address.tls())
    query = urllib.parse.urlencode(
        {
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "60",
        }
    )
    started = time.perf_counter()
    connection.request("GET", f"{path}?{query}", headers={**headers, "Accept": accept})
    response = connection.getresponse()
    if response.status != http.client.OK:
        raise RuntimeError(f"{path}: {response.status} {response.read()[:300]!r}")
    read = 0
    tail = b""
    while True:
        block = response.read1(1 << 16)
        if not block:
            raise RuntimeError(f"{path}: the stream ended before its bookmark")
        read += len(block)
        if BOOKMARK_END in tail + block:
            elapsed = time.perf_counter() - started
            connection.close()
            return elapsed, read
        tail = block[-64:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    reason = cluster.unavailable()
    if reason is not None:
        raise SystemExit(reason)
    with (
        tempfile.TemporaryDirectory(prefix="nodeagent-lists-") as work,
        cluster.running(
            Path(work) / "controlplane",
            controllers=("serviceaccount-controller",),
            apiserver_flags=("--disable-admission-plugins=TaintNodesByCondition",),
        ) as plane,
    ):
        side_by_side.populate(plane, args.nodes)
        plane.namespace(side_by_side.NAMESPACE)
        side_by_side.create_all(
            plane.admin,
            "/api/v1/namespaces/{namespace}/pods",
            side_by_side.pending_pods("basic", args.pods, "nodeagent"),
        )
        print(f"{args.nodes} nodes, 1000 bound pods, {args.pods} pending pods")
        spec = kube_http.ConnectionSpec(
            plane.scheduler_kubeconfig,
            qps=1000,
            burst=1000,
            retry_policy=retry.NO_RETRY,
            timeout=(5.0, 60.0),
        )
        address, credentials = spec.resolve()
        headers = {**dict(address.headers), **credentials()}
        apiserver = psutil.Process(plane.pid("kube-apiserver"))
        times: dict[str, dict[str, list[float]]] = {
            e: {"pods": [], "nodes": [], "cpu": []} for e in ENCODINGS
        }
        sizes: dict[str, dict[str, int]] = {e: {} for e in ENCODINGS}
        for round_ in range(args.rounds):
            order = list(ENCODINGS) if round_ % 2 == 0 else list(ENCODINGS)[::-1]
            for encoding in order:
                accept = ENCODINGS[encoding]
                got: dict[str, tuple[float, int]] = {}

                def one(
                    kind: str,
                    path: str,
                    accept: str = accept,
                    got: dict[str, tuple[float, int]] = got,
                ) -> None:
                    got[kind] = stream_until_bookmark(address, headers, path, accept)

                cpu = sum(apiserver.cpu_times()[:2])
                threads = [
                    threading.Thread(target=one, args=("pods", "/api/v1/pods")),
                    threading.Thread(target=one, args=("nodes", "/api/v1/nodes")),
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                times[encoding]["cpu"].append(sum(apiserver.cpu_times()[:2]) - cpu)
                for kind, (seconds, size) in got.items():
                    times[encoding][kind].append(seconds)
                    sizes[encoding][kind] = size
                print(
                    f"[{round_ + 1}] {encoding:8} pods {got['pods'][0]:.2f} s, nodes"
                    f" {got['nodes'][0]:.2f} s, apiserver CPU {times[encoding]['cpu'][-1]:.2f} s",
                    flush=True,
                )
        print(f"\n{args.rounds} rounds, encodings alternating; medians (fastest)")
        for encoding in ENCODINGS:
            row = times[encoding]
            pods = f"{statistics.median(row['pods']):.2f} s ({min(row['pods']):.2f})"
            print(
                f"{encoding:8} pods {pods},"
                f" {sizes[encoding]['pods'] / 2**20:.1f} MiB;"
                f" nodes {statistics.median(row['nodes']):.2f} s ({min(row['nodes']):.2f}),"
                f" {sizes[encoding]['nodes'] / 2**20:.1f} MiB;"
                f" apiserver CPU {statistics.median(row['cpu']):.2f} s"
            )


if __name__ == "__main__":
    main()
