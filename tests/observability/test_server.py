"""ObservabilityServer over real sockets: /metrics in the classic text format, probes
that turn 503 and back, clean stop, IPv6, and a bind failure that names the field."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import parser

from nodeagent.base.clock import FakeClock
from nodeagent.base.errors import ConfigError
from nodeagent.serving.endpoints import ObservabilityServer
from nodeagent.serving.health import Health
from nodeagent.serving.settings import ListenAddress
from tests.observability import samples


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=50.0)


@pytest.fixture
def health(clock: FakeClock) -> Health:
    return Health(clock=clock, liveness_timeout=10.0, requires_api=True)


@pytest.fixture
def server(health: Health) -> Iterator[ObservabilityServer]:
    agent = samples.fed_metrics()
    with ObservabilityServer(
        ListenAddress("127.0.0.1", 0), registry=agent.registry, health=health
    ) as running:
        yield running


def test_metrics_are_served_in_the_classic_text_format(server: ObservabilityServer) -> None:
    status, headers, body = get(server.url + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    names = {family.name for family in parser.text_string_to_metric_families(body.decode())}
    assert {"nodeagent_signal_available_bytes", "nodeagent_evictions"} <= names


def test_metrics_speak_openmetrics_when_asked(server: ObservabilityServer) -> None:
    status, headers, body = get(
        server.url + "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_probes_follow_the_loop(
    server: ObservabilityServer, health: Health, clock: FakeClock
) -> None:
    assert get(server.url + "/healthz")[0] == 200
    status, _, body = get(server.url + "/readyz")
    assert (status, body) == (503, b"failed: first evaluation not done yet\n")

    health.beat(clock.now())
    health.set_api_reachable(True)
    assert get(server.url + "/readyz")[0] == 200

    clock.advance(11.0)
    status, _, body = get(server.url + "/healthz")
    assert status == 503
    assert body.startswith(b"failed: no evaluation for 11.0 s")
    assert get(server.url + "/readyz")[0] == 503

    health.beat(clock.now())
    assert get(server.url + "/healthz")[0] == 200


def test_unknown_paths_are_404(server: ObservabilityServer) -> None:
    assert get(server.url + "/metricz")[0] == 404
    assert get(server.url + "/")[0] == 200


def test_stop_releases_the_port_and_is_idempotent(health: Health) -> None:
    agent = samples.fed_metrics()
    first = ObservabilityServer(
        ListenAddress("127.0.0.1", 0), registry=agent.registry, health=health
    )
    first.start()
    port = first.port
    first.stop()
    first.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    with ObservabilityServer(
        ListenAddress("127.0.0.1", port), registry=agent.registry, health=health
    ) as second:
        assert get(second.url + "/healthz")[0] == 200


def _context_switches(native_id: int) -> int:
    """How often the kernel has put this thread to sleep and woken it (each idle
    wake-up of the serving loop is one)."""
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_an_idle_server_sleeps_and_still_stops_at_once(server: ObservabilityServer) -> None:
    serving = server._thread
    assert serving is not None and serving.native_id is not None
    time.sleep(0.2)
    before = _context_switches(serving.native_id)
    time.sleep(1.0)
    assert _context_switches(serving.native_id) - before <= 1  # not ten times a second
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 1.0  # not after the next idle wake
    assert not serving.is_alive()


def test_a_busy_port_is_a_config_error_naming_the_field(
    server: ObservabilityServer, health: Health
) -> None:
    clash = ObservabilityServer(
        ListenAddress("127.0.0.1", server.port),
        registry=samples.fed_metrics().registry,
        health=health,
    )
    with pytest.raises(ConfigError) as raised:
        clash.start()
    assert raised.value.field == "metricsAddress"
    assert f"127.0.0.1:{server.port}" in str(raised.value)
    assert "in use" in str(raised.value)


def test_ipv6_loopback(health: Health) -> None:
    if not socket.has_ipv6:
        pytest.skip("this Python has no IPv6 support")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback on this machine: {exc}")
    with ObservabilityServer(
        ListenAddress("::1", 0), registry=samples.fed_metrics().registry, health=health
    ) as running:
        assert running.url.startswith("http://[::1]:")
        assert get(running.url + "/metrics")[0] == 200
