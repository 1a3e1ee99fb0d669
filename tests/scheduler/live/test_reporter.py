"""The reporter: a pod retried a hundred times costs one status write and one Event
(whose count is bumped, not repeated); victims are preempted once."""

from __future__ import annotations

import time

from nodeagent.base.clock import RealClock
from nodeagent.kube.events import EventRecorder
from nodeagent.scheduler import api
from nodeagent.scheduler.live.reporter import Reporter
from tests.doubles import kube as fake
from tests.scheduler.live import harness as h
from tests.waiting import eventually


def wait_idle(reporter: Reporter) -> None:
    eventually(reporter.idle, timeout=10, what="everything queued written")


def test_a_hundred_retries_write_one_condition_and_one_event() -> None:
    kube = fake.FakeKubeClient()
    kube.cluster.create("pods", h.pod("p"))
    uid = kube.cluster.get("pods", "default", "p")["metadata"]["uid"]
    pod = api.Pod("default", "p", uid=uid)
    recorder = EventRecorder(kube, node_name="me", clock=RealClock(), component="sched")
    reporter = Reporter(kube, recorder, wall=time.time, scheduler_name="sched")
    reporter.start()
    try:
        for _ in range(100):
            reporter.unschedulable(pod, "0/3 nodes are available: 3 Insufficient cpu.")
        wait_idle(reporter)
    finally:
        reporter.stop()
    assert len(kube.calls_to("patch_pod_status")) == 1
    (created,) = [c.args[1] for c in kube.calls_to("create_event")]
    assert created["reason"] == "FailedScheduling" and created["type"] == "Warning"
    assert created["reportingComponent"] == "sched"
    assert len(kube.calls_to("patch_event")) <= 1, "repeats bump the count, at most every minute"
    (condition,) = kube.cluster.get("pods", "default", "p")["status"]["conditions"]
    assert condition["reason"] == "Unschedulable"


def test_a_victim_is_preempted_once() -> None:
    kube = fake.FakeKubeClient()
    kube.cluster.create("pods", h.pod("victim", node_name="n1"))
    uid = kube.cluster.get("pods", "default", "victim")["metadata"]["uid"]
    victim = api.Pod("default", "victim", uid=uid, node_name="n1")
    preemptor = api.Pod("default", "high", uid="u-high", priority=100)
    recorder = EventRecorder(kube, node_name="me", clock=RealClock())
    reporter = Reporter(kube, recorder, wall=time.time, scheduler_name="sched")
    reporter.start()
    try:
        reporter.preempt(victim, preemptor, "n1")
        reporter.preempt(victim, preemptor, "n1")
        wait_idle(reporter)
    finally:
        reporter.stop()
    (patch,) = [c.args[2] for c in kube.calls_to("patch_pod_status")]
    assert patch["status"]["conditions"][0]["reason"] == "PreemptionByScheduler"
    (deleted,) = kube.calls_to("delete_pod")
    assert deleted.args == ("default", "victim")
    (event,) = [c.args[1] for c in kube.calls_to("create_event")]
    assert event["reason"] == "Preempted" and "u-high" in event["message"]
