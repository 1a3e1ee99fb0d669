"""Orderings a real API server produces, forced on the fake one over real HTTP: a late
update of a pod already bound, the scheduler's own status patch replayed after an
outage, a binding whose answer is lost, a pod or its node deleted while the binding is
in flight, a 410 in the middle of a burst.

Each test holds requests or watches at the server (:meth:`FakeAPIServer.hold`) to put
the events in the order it names, then checks what matters: every pod bound once, no
binding sent after the scheduler got its 201, and a follow-up pod that needs exactly
the capacity left is bound (no phantom usage)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.fakeapi.server import FakeAPIServer, Hold, Request
from tests.scheduler.live import harness as h
from tests.scheduler.live.harness import node_of
from tests.waiting import eventually

POD_WATCH = r"^/api/v1/pods$"


def binding_path(name: str) -> str:
    return rf"/namespaces/default/pods/{name}/binding$"


def posts(api: FakeAPIServer, name: str) -> list[Request]:
    return api.requests_to("POST", binding_path(name))


def binding_held(api: FakeAPIServer, name: str, *, cpu: str) -> Hold:
    """Create pod ``name``; return once the scheduler's binding of it waits at the
    server (held, not applied)."""
    binding = api.hold(binding_path(name))
    api.cluster.create("pods", h.pod(name, cpu=cpu))
    eventually(lambda: posts(api, name), what=f"{name}'s binding at the server")
    return binding


def bound_once(api: FakeAPIServer) -> None:
    pods = [b[1] for b in api.cluster.bindings]
    assert len(pods) == len(set(pods)), f"a pod bound twice: {pods}"


def follow_up_binds(api: FakeAPIServer, *, cpu: str, node: str, what: str) -> None:
    """A pod ``b`` asking exactly the room that should be left is bound to ``node``: the
    proof that no phantom usage stayed behind."""
    api.cluster.create("pods", h.pod("b", cpu=cpu))
    eventually(lambda: node_of(api, "b") == node, what=what)


def settled(scheduler: LiveScheduler) -> bool:
    """Nothing assumed, nothing binding: the cache holds what the watch showed."""
    return scheduler.cache.stats().assumed == 0 and scheduler.binder.in_flight == 0


@pytest.fixture
def scheduler(fake_api: FakeAPIServer) -> Iterator[LiveScheduler]:
    running = h.start(fake_api)
    try:
        yield running
    finally:
        fake_api.clear_faults()
        running.stop(bind_timeout=2)


class TestOrderings:
    def test_an_update_seen_after_the_binding_succeeded_neither_binds_again_nor_leaks(
        self, fake_api: FakeAPIServer, scheduler: LiveScheduler
    ) -> None:
        cluster = fake_api.cluster
        cluster.create("nodes", h.node("n1", cpu="2"))
        binding = binding_held(fake_api, "a", cpu="1500m")
        watch = fake_api.hold(POD_WATCH)
        update = {"metadata": {"annotations": {"touched": "1"}}}
        late = cluster.patch("pods", "default", "a", update)["metadata"]["resourceVersion"]
        binding.release()  # bound after the update; the watch shows neither yet
        eventually(lambda: scheduler.bound_count == 1, what="the scheduler has its 201")
        watch.release_through(late)  # the update (a unbound), and not yet a bound
        eventually(lambda: scheduler.pending_pods.resource_version == late, what="the update seen")
        uid = str(cluster.get("pods", "default", "a")["metadata"]["uid"])
        assert scheduler.queue.where(uid) is None, "an update of an assumed pod never queues it"
        watch.release()
        eventually(lambda: settled(scheduler), what="a confirmed")
        follow_up_binds(
            fake_api, cpu="500m", node="n1", what="b bound where a left room"
        )  # exactly what is left
        assert len(posts(fake_api, "a")) == 1, "a bound pod is never bound again"
        bound_once(fake_api)

    def test_our_status_patch_replayed_after_an_outage_does_not_requeue_a_bound_pod(
        self, fake_api: FakeAPIServer, scheduler: LiveScheduler
    ) -> None:
        cluster = fake_api.cluster
        cluster.create("nodes", h.node("n1", cpu="2"))
        binding = binding_held(fake_api, "a", cpu="1500m")
        watch = fake_api.hold(POD_WATCH)
        fake_api.lose_responses(1, method="POST", path=binding_path("a"))
        with fake_api.outage():
            binding.release()  # applied, its answer lost; the retries meet the outage
            eventually(
                lambda: len(posts(fake_api, "a")) >= 2 and settled(scheduler),
                what="the binding given up as failed",
            )
        cluster.expire_watches()  # the watch comes back with 410: a relist
        watch.release()
        eventually(
            lambda: (h.condition(fake_api, "a") or {}).get("status") == "False",
            what="the scheduler's Binding rejected status written after the outage",
        )
        eventually(lambda: scheduler.queue.where(self._uid(fake_api, "a")) is None)
        follow_up_binds(fake_api, cpu="500m", node="n1", what="b bound where a left room")
        assert scheduler.queue.where(self._uid(fake_api, "a")) is None
        bound_once(fake_api)
        assert node_of(fake_api, "a") == "n1"

    def test_a_binding_whose_answer_is_lost_binds_once(
        self, fake_api: FakeAPIServer, scheduler: LiveScheduler
    ) -> None:
        cluster = fake_api.cluster
        cluster.create("nodes", h.node("n1", cpu="2"))
        fake_api.lose_responses(1, method="POST", path=binding_path("a"))
        cluster.create("pods", h.pod("a", cpu="1500m"))
        eventually(lambda: node_of(fake_api, "a") == "n1" and settled(scheduler))
        follow_up_binds(fake_api, cpu="500m", node="n1", what="b bound where a left room")
        bound_once(fake_api)

    def test_a_pod_deleted_while_its_binding_is_in_flight_leaves_no_usage(
        self, fake_api: FakeAPIServer, scheduler: LiveScheduler
    ) -> None:
        cluster = fake_api.cluster
        cluster.create("nodes", h.node("n1", cpu="2"))
        binding = binding_held(fake_api, "a", cpu="1500m")
        cluster.delete("pods", "default", "a")
        binding.release()  # 404
        eventually(lambda: settled(scheduler), what="a forgotten")
        follow_up_binds(
            fake_api, cpu="2", node="n1", what="b bound on the freed node"
        )  # the whole node
        assert [b[1] for b in cluster.bindings] == ["b"]

    def test_a_node_deleted_while_a_binding_to_it_is_in_flight(
        self, fake_api: FakeAPIServer, scheduler: LiveScheduler
    ) -> None:
        cluster = fake_api.cluster
        cluster.create("nodes", h.node("n1", cpu="2"))
        cluster.create("nodes", h.node("n2", cpu="2"))
        binding = binding_held(fake_api, "a", cpu="1500m")
        target = str(posts(fake_api, "a")[0].body["target"]["name"])
        other = "n2" if target == "n1" else "n1"
        cluster.delete("nodes", "", target)
        binding.release()  # as kube-apiserver, the binding does not check the node
        eventually(lambda: settled(scheduler), what="a's binding finished")
        follow_up_binds(
            fake_api, cpu="2", node=other, what="b bound on the other node"
        )  # the whole surviving node
        bound_once(fake_api)
        cluster.delete("pods", "default", "a")  # the pod GC removes the orphan
        cluster.create("nodes", h.node(target, cpu="2"))  # the node comes back, empty
        cluster.create("pods", h.pod("c", cpu="2"))
        eventually(lambda: node_of(fake_api, "c") == target, what="c bound on the node back")
        bound_once(fake_api)

    def test_a_410_in_the_middle_of_a_burst_binds_every_pod_once(
        self, fake_api: FakeAPIServer, scheduler: LiveScheduler
    ) -> None:
        cluster = fake_api.cluster
        cluster.create("nodes", h.node("n1", cpu="2500m"))
        for i in range(20):
            cluster.create("pods", h.pod(f"p{i}", cpu="100m"))
        eventually(lambda: len(cluster.bindings) >= 5, what="the burst under way")
        cluster.expire_watches()
        eventually(lambda: all(node_of(fake_api, f"p{i}") for i in range(20)), what="20 bound")
        eventually(lambda: settled(scheduler))
        cluster.create("pods", h.pod("last", cpu="500m"))  # exactly what is left
        eventually(lambda: node_of(fake_api, "last") == "n1", what="the last pod bound")
        bound_once(fake_api)
        assert scheduler.pending_pods.stats.relists_after_gone >= 1

    @staticmethod
    def _uid(api: FakeAPIServer, name: str) -> str:
        return str(api.cluster.get("pods", "default", name)["metadata"]["uid"])
