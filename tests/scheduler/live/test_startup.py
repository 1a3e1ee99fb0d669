"""The start-up timeline: the process's start read from /proc as the kernel writes it,
and the fields the scheduler logs when its informers sync and when its first binding is
answered."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.base.logs import FIELDS
from nodeagent.kube import informer
from nodeagent.scheduler.live import startup
from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.doubles.kube import FakeKubeClient
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.live import harness as h
from tests.waiting import eventually


def fake_proc(root: Path, started_ticks: int) -> Path:
    """A /proc whose self/stat says the process started ``started_ticks`` after boot (a
    command name with a space and a parenthesis, as the kernel may write one)."""
    fields = ["S", *["0"] * 18, str(started_ticks), *["0"] * 30]
    (root / "self").mkdir(parents=True)
    (root / "self" / "stat").write_text(f"4242 (sched (x) y) {' '.join(fields)}\n")
    return root


def test_process_started_places_the_kernels_start_time_on_the_monotonic_clock(
    tmp_path: Path,
) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    started_ticks = int((since_boot - 2.5) * ticks)  # 2.5 s ago
    started = startup.process_started(fake_proc(tmp_path, started_ticks))
    assert started is not None
    assert 2.4 <= time.monotonic() - started <= 2.5 + 1 / ticks + 1.0


def test_process_started_is_none_without_proc(tmp_path: Path) -> None:
    assert startup.process_started(tmp_path) is None
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text("garbage")
    assert startup.process_started(tmp_path) is None


def test_this_process_started_before_now() -> None:
    started = startup.process_started()
    assert started is not None
    assert started <= time.monotonic()


def test_synced_fields_name_each_first_list_and_times_since_the_start() -> None:
    kube = FakeKubeClient()
    nodes = informer.Informer(informer.nodes(kube))
    budgets = informer.Informer(informer.disruption_budgets(kube))
    timeline = startup.StartupTimeline(time.monotonic() - 1.0)
    timeline.starting_informers()
    nodes.sync_once()
    fields = timeline.synced([nodes, budgets])  # budgets never listed: left out
    assert set(fields) == {"sinceStart", "informersStartedAt", "listSeconds"}
    assert 1.0 <= fields["informersStartedAt"] <= fields["sinceStart"]
    assert list(fields["listSeconds"]) == ["nodes"]
    assert 0 <= fields["listSeconds"]["nodes"] <= fields["sinceStart"]


def test_first_binding_is_reported_once_with_when_it_was_scheduled() -> None:
    timeline = startup.StartupTimeline(time.monotonic() - 3.0)
    timeline.scheduled()
    first_scheduled = timeline.first_scheduled
    timeline.scheduled()  # a later pod does not move it
    assert timeline.first_scheduled == first_scheduled
    fields = timeline.bound()
    assert fields is not None
    assert 3.0 <= fields["firstScheduledAt"] <= fields["sinceStart"]
    assert timeline.bound() is None  # only the first


def test_no_process_start_no_timeline() -> None:
    timeline = startup.StartupTimeline(None)
    timeline.starting_informers()
    timeline.scheduled()
    assert timeline.since_start() is None
    assert timeline.synced([informer.Informer(informer.nodes(FakeKubeClient()))]) == {}
    assert timeline.bound() is None


def test_the_scheduler_logs_its_timeline_when_synced_and_at_its_first_binding(
    fake_api: FakeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    """What ``bench_vs_kube_scheduler`` reads back from nodeagent's log."""
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", cpu="1"))
    cluster.create("pods", h.pod("p0", cpu="500m"))
    caplog.set_level(logging.INFO, logger="nodeagent.scheduler")
    scheduler = h.start(fake_api)
    try:
        eventually(lambda: h.node_of(fake_api, "p0") == "n1", what="bound")
        eventually(lambda: _fields(caplog, "first binding"), what="the first binding logged")
    finally:
        scheduler.stop()
    cache = _fields(caplog, "cache synced")
    assert cache is not None
    assert {"nodes", "pods"} <= set(cache["listSeconds"])
    assert 0 < cache["informersStartedAt"] <= cache["sinceStart"]
    synced = _fields(caplog, "informers synced")  # the pending pods' list too
    assert synced is not None
    assert set(synced["listSeconds"]) == {"pods"}
    assert cache["sinceStart"] <= synced["sinceStart"]
    first = _fields(caplog, "first binding")
    assert first is not None and first["pod"] == "default/p0"
    assert cache["sinceStart"] <= first["firstScheduledAt"] <= first["sinceStart"]


def _unstarted(api: FakeAPIServer) -> LiveScheduler:
    return LiveScheduler(h.connect(api), h.settings(), seed=1, watch_timeout=30)


def _pending_list_held(scheduler: LiveScheduler) -> threading.Event:
    """The pending pods' informer starts only once the returned event is set."""
    release = threading.Event()
    start = scheduler.pending_pods.start

    def held() -> None:
        threading.Thread(target=lambda: release.wait(10) and start(), daemon=True).start()

    scheduler.pending_pods.start = held  # type: ignore[method-assign]
    return release


def test_scheduling_begins_with_the_nodes_and_bound_pods_before_the_pending_pods(
    fake_api: FakeAPIServer,
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", cpu="1"))
    cluster.create("pods", h.pod("bound", cpu="600m", node_name="n1"))
    cluster.create("pods", h.pod("big", cpu="500m"))
    cluster.create("pods", h.pod("small", cpu="300m"))
    # as kube-apiserver: a streamed list's closing bookmark comes at a bookmark tick, so
    # the pending list's own pods are bound before it
    cluster.initial_events_end_delay = 0.5
    scheduler = _unstarted(fake_api)
    release = _pending_list_held(scheduler)
    try:
        assert scheduler.start(sync_timeout=10)
        # the loop runs with the cache in: the bound pod counted, no pending pod listed
        assert scheduler.cache_synced and not scheduler.synced
        assert not scheduler.readiness().ok
        assert scheduler.cache.accounts(_uid(fake_api, "bound"))
        release.set()
        eventually(lambda: h.node_of(fake_api, "small") == "n1", what="small bound")
        eventually(lambda: scheduler.synced, what="the pending pods listed")
        assert scheduler.pending_pods.stats.first_list is not None
        assert scheduler.pending_pods.stats.failures == 0, "a list is not refused for a change"
        assert h.node_of(fake_api, "big") == "", "the bound pod's room was counted"
        assert scheduler.readiness().ok
    finally:
        release.set()
        scheduler.stop()


def test_a_pending_pod_holding_a_nomination_makes_the_start_wait_for_every_pending_pod(
    fake_api: FakeAPIServer,
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", cpu="1"))
    preemptor = h.pod("preemptor", cpu="800m", priority=100)
    preemptor["status"]["nominatedNodeName"] = "n1"  # its victims gone before a restart
    cluster.create("pods", preemptor)
    cluster.create("pods", h.pod("low", cpu="500m"))
    scheduler = _unstarted(fake_api)
    release = _pending_list_held(scheduler)
    started: list[bool] = []
    starting = threading.Thread(target=lambda: started.append(scheduler.start(sync_timeout=10)))
    try:
        starting.start()
        time.sleep(0.5)
        assert not started, "no cycle before the nominated pod is known"
        release.set()
        starting.join(10)
        assert started == [True] and scheduler.synced
        eventually(lambda: h.node_of(fake_api, "preemptor") == "n1", what="preemptor bound")
        assert h.node_of(fake_api, "low") == "", "the nominated room was kept"
    finally:
        release.set()
        starting.join(10)
        scheduler.stop()


def _uid(api: FakeAPIServer, name: str) -> str:
    return str(api.cluster.get("pods", "default", name)["metadata"]["uid"])


def _fields(caplog: pytest.LogCaptureFixture, message: str) -> dict[str, Any] | None:
    for record in caplog.records:
        if record.getMessage() == message:
            fields: dict[str, Any] = getattr(record, FIELDS)
            return fields
    return None
