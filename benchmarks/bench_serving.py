"""What secure serving costs a scrape, and how many reviews a scrape storm makes.

    python -m benchmarks.bench_serving [--scrapes 300] [--threads 16] [--per-thread 25]

One server per case, on the shared server of :mod:`nodeagent.serving` with the agent's
metrics registry, reviewed by the fake API server (tests/fakeapi: TokenReview and
SubjectAccessReview over HTTP, through the project's ``kubernetes`` client):

* ``none``: plain HTTP, no checks (``--metrics-auth none``);
* ``kubernetes``: HTTPS, a bearer token; reviews cached for 10 s (the default);
* ``kubernetes, no cache``: the same with the caches off, i.e. a TokenReview and a
  SubjectAccessReview per scrape, to show what the caches save.

Each scrape is a new connection (the server answers HTTP/1.0, so HTTPS means a TLS
handshake per scrape, as Prometheus then does). The cases run interleaved, one scrape of
each per round, so a loaded machine slows them alike. Reported: p50 and p99 wall time,
the ratio of p50 to ``none``, and the reviews each case asked for.

Then the storm: ``--threads`` scrapers at once, ``--per-thread`` scrapes each, with one
token (every scraper is the same Prometheus) and with a token per scraper.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import ssl
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from nodeagent.base.clock import FakeClock
from nodeagent.serving.auth import review_client
from nodeagent.serving.endpoints import ObservabilityServer
from nodeagent.serving.health import Health
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import ListenAddress, MetricsAuth, resolve
from tests.doubles.reviews import Identity
from tests.fakeapi.fixtures import configuration
from tests.fakeapi.server import FakeAPIServer, running
from tests.observability import samples

USER = "system:serviceaccount:monitoring:prometheus"


@dataclass
class Case:
    name: str
    server: ObservabilityServer
    token: str | None
    times: list[float]


CLIENT_CONTEXT = ssl.create_default_context()
"""One client context for every scrape, as a scraper keeps one (making one loads the
system's CA store, ~20 ms). The servers' certificates are self-signed: not checked."""
CLIENT_CONTEXT.check_hostname = False
CLIENT_CONTEXT.verify_mode = ssl.CERT_NONE


def scrape(server: ObservabilityServer, token: str | None) -> int:
    if server.url.startswith("https"):
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            "127.0.0.1", server.port, context=CLIENT_CONTEXT, timeout=30
        )
    else:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@contextmanager
def serve(
    api: FakeAPIServer, auth: MetricsAuth, *, ttl: float = 10.0
) -> Iterator[ObservabilityServer]:
    security = resolve(auth, None, None, None)
    reviews = review_client(configuration(api.url))
    protection = Protection(
        security,
        reviews=reviews if auth is MetricsAuth.KUBERNETES else None,
        review_ttl=ttl,
    )
    health = Health(clock=FakeClock(start=1.0), liveness_timeout=10.0, requires_api=False)
    with ObservabilityServer(
        ListenAddress("127.0.0.1", 0),
        registry=samples.fed_metrics().registry,
        health=health,
        protection=protection,
    ) as server:
        yield server
    reviews.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def reviews(api: FakeAPIServer) -> tuple[int, int]:
    return api.reviews.token_reviews, api.reviews.access_reviews


def timed(what: Callable[[], int]) -> float:
    started = time.perf_counter()
    status = what()
    assert status == 200, status
    return time.perf_counter() - started


def storm(api: FakeAPIServer, threads: int, per_thread: int, *, shared_token: bool) -> str:
    with serve(api, MetricsAuth.KUBERNETES) as server:
        before = reviews(api)
        tokens = ["storm" if shared_token else f"storm-{i}" for i in range(threads)]

        def scraper(token: str) -> None:
            for _ in range(per_thread):
                assert scrape(server, token) == 200

        workers = [threading.Thread(target=scraper, args=(t,)) for t in tokens]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        took = time.perf_counter() - started
        after = reviews(api)
    total = threads * per_thread
    kind = "one token" if shared_token else f"{threads} tokens"
    return (
        f"storm, {kind}: {total} scrapes from {threads} threads in {took:.1f} s:"
        f" {after[0] - before[0]} token reviews, {after[1] - before[1]} access reviews"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--per-thread", type=int, default=25)
    options = parser.parse_args()
    with running() as api:
        api.reviews.add_token("prometheus", Identity(USER))
        for i in range(options.threads):
            api.reviews.add_token(f"storm-{i}", Identity(USER))
        api.reviews.add_token("storm", Identity(USER))
        api.reviews.grant(user=USER)
        with ExitStack() as stack:
            cases = [
                Case("none (HTTP)", stack.enter_context(serve(api, MetricsAuth.NONE)), None, []),
                Case(
                    "kubernetes (HTTPS, cached)",
                    stack.enter_context(serve(api, MetricsAuth.KUBERNETES)),
                    "prometheus",
                    [],
                ),
                Case(
                    "kubernetes (HTTPS, no cache)",
                    stack.enter_context(serve(api, MetricsAuth.KUBERNETES, ttl=0.0)),
                    "prometheus",
                    [],
                ),
            ]
            counts: dict[str, list[int]] = {case.name: [0, 0] for case in cases}
            started = time.perf_counter()
            for _ in range(options.scrapes):
                for case in cases:
                    before = reviews(api)
                    case.times.append(timed(functools.partial(scrape, case.server, case.token)))
                    after = reviews(api)
                    counts[case.name][0] += after[0] - before[0]
                    counts[case.name][1] += after[1] - before[1]
            wall = time.perf_counter() - started
        base = statistics.median(cases[0].times)
        print(f"{options.scrapes} scrapes per case, interleaved, {wall:.1f} s in all")
        print(f"{'case':32} {'p50 ms':>8} {'p99 ms':>8} {'x none':>7}  reviews (token/access)")
        for case in cases:
            p50 = statistics.median(case.times)
            tokens, accesses = counts[case.name]
            print(
                f"{case.name:32} {p50 * 1e3:8.2f} {percentile(case.times, 0.99) * 1e3:8.2f}"
                f" {p50 / base:7.2f}  {tokens}/{accesses} per {options.scrapes} scrapes"
            )
        print(storm(api, options.threads, options.per_thread, shared_token=True))
        print(storm(api, options.threads, options.per_thread, shared_token=False))


if __name__ == "__main__":
    main()
