"""The live scheduler calls extenders through the same scheduling cycle and bind step as
`nodeagent schedule`: against the fake API server over HTTP and a scripted extender."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.scheduler import config, registry
from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.extenders import stub
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.live import harness as h
from tests.waiting import eventually


@pytest.fixture
def extender() -> Iterator[stub.StubExtender]:
    with stub.running() as server:
        yield server


def start(api: FakeAPIServer, extenders: list[dict[str, Any]]) -> LiveScheduler:
    document = {"profiles": [{"schedulerName": h.PROFILE}], "extenders": extenders}
    configuration = config.parse_configuration(document, registry.in_tree_registry())
    return h.start(api, live=dataclasses.replace(h.settings(), configuration=configuration))


def test_filter_and_prioritize_extenders_steer_live_scheduling(
    fake_api: FakeAPIServer, extender: stub.StubExtender
) -> None:
    for name in ("n1", "n2", "n3"):
        fake_api.cluster.create("nodes", h.node(name))
    extender.answers["filter"] = lambda body: (
        200,
        {
            "NodeNames": [n for n in body["NodeNames"] if n != "n1"],
            "FailedNodes": {"n1": "n1 is out of licences"},
        },
    )
    extender.answers["prioritize"] = lambda body: (
        200,
        [{"Host": n, "Score": 10 if n == "n3" else 0} for n in body["NodeNames"]],
    )
    scheduler = start(
        fake_api,
        [
            {
                "urlPrefix": extender.url,
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 5,
                "nodeCacheCapable": True,
            }
        ],
    )
    try:
        fake_api.cluster.create("pods", h.pod("web"))
        assert eventually(lambda: h.node_of(fake_api, "web"), what="web bound") == "n3"
        assert extender.verbs()[:2] == ["filter", "prioritize"]
    finally:
        scheduler.stop(bind_timeout=2)


def test_a_binder_extender_binds_live_pods(
    fake_api: FakeAPIServer, extender: stub.StubExtender
) -> None:
    fake_api.cluster.create("nodes", h.node("n1"))

    def bind(body: dict[str, Any]) -> tuple[int, Any]:
        fake_api.cluster.bind(
            body["PodNamespace"], body["PodName"], uid=body["PodUID"], node_name=body["Node"]
        )
        return 200, {"Error": ""}

    extender.answers["bind"] = bind
    scheduler = start(fake_api, [{"urlPrefix": extender.url, "bindVerb": "bind"}])
    try:
        fake_api.cluster.create("pods", h.pod("web"))
        assert eventually(lambda: h.node_of(fake_api, "web"), what="web bound") == "n1"
        assert extender.verbs() == ["bind"]
        assert fake_api.requests_to("POST", r".*/binding$") == []  # not DefaultBinder
    finally:
        scheduler.stop(bind_timeout=2)
