"""Nothing on the way from a decision to its Eviction waits on another write, and no
failure of one drops the Eviction.

The agent is built as ``nodeagent run`` builds it and talks to the fake API server over
HTTP. A real tmpfs (nodefs) fills past its hard threshold while one of the writes that
accompany an eviction fails: the node's ``EvictionThresholdMet`` event, the condition
patch (``nodes/<node>/status``) or the taint patch (``nodes/<node>``), each answering 503
every time or hanging far longer than the eviction is allowed to take. The Eviction must
arrive regardless, once, and within a bound that a wait behind the hung write (its
timeout, then its retries) could not meet. Before the fix, the event went first,
synchronously and retried: three 503s and the Eviction was never sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.doubles import kube as fake
from tests.e2e import harness
from tests.fakeapi import server

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

FILL = 26 * harness.MIB
HUNG_SECONDS = 20.0
"""How long a hung write takes to answer; the agent's request timeout is above it."""
EVICTION_BOUND = 8.0
"""Seconds from the fill to the Eviction: the filesystem poll is 100 ms here, and a wait
behind one hung write alone would take HUNG_SECONDS."""


@dataclass(frozen=True)
class Failing:
    """A write that fails: which requests, and how."""

    what: str
    method: str
    path: str

    def break_it(self, api: server.FakeAPIServer, *, hang: bool) -> None:
        if hang:
            api.add_latency(HUNG_SECONDS, method=self.method, path=self.path)
        else:
            api.fail_next(1_000_000, status=503, method=self.method, path=self.path)

    def attempts(self, api: server.FakeAPIServer) -> list[server.Request]:
        return api.requests_to(self.method, self.path)


EVENTS = Failing("the node's EvictionThresholdMet event", "POST", r"/events$")
CONDITIONS = Failing("the condition patch", "PATCH", rf"/nodes/{harness.NODE}/status$")
TAINTS = Failing("the taint patch", "PATCH", rf"/nodes/{harness.NODE}$")
WRITES = (EVENTS, CONDITIONS, TAINTS)


def fill_and_wait_for_the_eviction(
    api: server.FakeAPIServer,
    cluster: fake.FakeCluster,
    nodefs: harness.Node,
    kubeconfig: Path,
    failing: tuple[Failing, ...],
    *,
    hang: bool,
) -> float:
    """Seconds from the fill to the Eviction's arrival, once the failing writes were
    attempted too."""
    pods = harness.seed_pods(cluster, nodefs)
    config = harness.e2e_config(
        nodefs,
        kubeconfig,
        kube_api_retries=5,
        kube_api_timeout=HUNG_SECONDS + 10,
        kube_api_retry_max_delay=2.0,
    )
    with harness.RunningAgent(config):
        # the agent has adopted the node and published its first state
        harness.wait_for(
            "the first condition",
            lambda: harness.condition_status(cluster, "NodeAgentDiskPressure") == "False",
        )
        for write in failing:
            write.break_it(api, hang=hang)
        sent_before = {write.what: len(write.attempts(api)) for write in failing}
        nodefs.write(nodefs.empty_dir(pods["hog"]["metadata"]["uid"]), "fill", FILL)
        filled = time.monotonic()
        harness.wait_for(
            "the hog's Eviction", lambda: harness.accepted_evictions(cluster), EVICTION_BOUND
        )
        evicted = time.monotonic() - filled
        # the failing writes are really in the way (when all hang, the first one holds
        # the node-status thread, and the others wait behind it: not the Eviction)
        harness.wait_for(
            "a failing write, attempted",
            lambda: any(len(w.attempts(api)) > sent_before[w.what] for w in failing),
            EVICTION_BOUND,
        )
        assert harness.accepted_evictions(cluster) == [("hog", 1)]
        api.clear_faults()
    return evicted


@pytest.mark.parametrize("hang", [False, True], ids=["503", "hung"])
@pytest.mark.parametrize(
    "failing",
    [(EVENTS,), (CONDITIONS,), (TAINTS,), WRITES],
    ids=["events", "conditions", "taints", "all"],
)
class TestAFailingWriteNeitherDelaysNorDropsTheEviction:
    def test_the_eviction_is_sent_once_within_the_bound(
        self,
        *,
        api: server.FakeAPIServer,
        cluster: fake.FakeCluster,
        nodefs: harness.Node,
        kubeconfig: Path,
        kubelet: harness.FakeKubelet,
        failing: tuple[Failing, ...],
        hang: bool,
    ) -> None:
        del kubelet  # running: it cleans up after the evicted pod
        evicted = fill_and_wait_for_the_eviction(
            api, cluster, nodefs, kubeconfig, failing, hang=hang
        )
        assert evicted < EVICTION_BOUND


def test_the_eviction_goes_out_before_the_threshold_event(
    api: server.FakeAPIServer,
    cluster: fake.FakeCluster,
    nodefs: harness.Node,
    kubeconfig: Path,
    kubelet: harness.FakeKubelet,
) -> None:
    """The event is what the Eviction once waited behind: it is now written after."""
    fill_and_wait_for_the_eviction(api, cluster, nodefs, kubeconfig, (EVENTS,), hang=False)
    order = [
        "eviction" if r.path.endswith("/eviction") else r.body["reason"]
        for r in api.requests
        if r.method == "POST" and (r.path.endswith("/eviction") or r.path.endswith("/events"))
    ]
    assert order[0] == "eviction"
    assert "EvictionThresholdMet" in order[1:]
