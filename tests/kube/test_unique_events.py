"""Events that never repeat, serialised from a template (:class:`UniqueEvents`): the same
Event the aggregating recorder creates, for any object and message, named as client-go
names them; written with ``post_event`` through the real HTTP client, the fake API
server stores it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nodeagent.base.clock import FakeClock
from nodeagent.kube import client, http
from nodeagent.kube.events import NORMAL, EventRecorder, InvolvedObject, UniqueEvents
from tests.fakeapi.server import FakeAPIServer

WALL = 1_700_000_000.0


class _Capture:
    """Just enough of a KubeClient for the recorder: what it creates."""

    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []

    def create_event(self, namespace: str, event: dict[str, Any]) -> client.KubeObject:
        self.created.append((namespace, event))
        return event


def _recorded(involved: InvolvedObject, message: str) -> tuple[str, dict[str, Any]]:
    capture = _Capture()
    recorder = EventRecorder(
        capture,  # type: ignore[arg-type]  # only create_event is reached
        node_name="replica-1",
        clock=FakeClock(wall_offset=WALL),
        component="my-scheduler",
    )
    recorder.record(involved, "Scheduled", message, NORMAL)
    [(namespace, event)] = capture.created
    return namespace, event


text = st.text(min_size=1, max_size=40)


class TestUniqueEvents:
    @given(name=text, namespace=st.text(max_size=20), uid=st.text(max_size=40), message=text)
    def test_the_body_is_the_recorders_event_for_any_object_and_message(
        self, name: str, namespace: str, uid: str, message: str
    ) -> None:
        involved = InvolvedObject("Pod", name, namespace, uid)
        events = UniqueEvents(
            reason="Scheduled", event_type=NORMAL, component="my-scheduler", host="replica-1"
        )
        body = json.loads(events.body(involved, message, WALL + 0.25))
        recorded_namespace, recorded = _recorded(involved, message)
        assert body["metadata"]["namespace"] == recorded_namespace
        # named as client-go's recorder names an event: the object, then Unix ns in hex
        assert body["metadata"]["name"] == f"{name}.{int((WALL + 0.25) * 1e9):x}"
        for document in (body, recorded):
            del document["metadata"]["name"]
        assert body == recorded

    def test_the_time_is_the_events_second(self) -> None:
        events = UniqueEvents(reason="Scheduled", event_type=NORMAL, component="s", host="h")
        stamps = [
            json.loads(events.body(InvolvedObject("Pod", "p", "ns"), "m", wall))["firstTimestamp"]
            for wall in (WALL, WALL + 0.999, WALL + 1.0, WALL + 61.5)
        ]
        assert stamps == [
            "2023-11-14T22:13:20Z",
            "2023-11-14T22:13:20Z",
            "2023-11-14T22:13:21Z",
            "2023-11-14T22:14:21Z",
        ]

    def test_posted_over_http_the_api_stores_it(
        self, fake_api: FakeAPIServer, kube: http.HTTPKubeClient
    ) -> None:
        events = UniqueEvents(reason="Scheduled", event_type=NORMAL, component="s", host="h")
        for name in ("p1", "p2"):
            kube.post_event("ns1", events.body(InvolvedObject("Pod", name, "ns1"), name))
        stored = fake_api.cluster.list("events").items
        assert sorted(e["involvedObject"]["name"] for e in stored) == ["p1", "p2"]
        assert {e["metadata"]["namespace"] for e in stored} == {"ns1"}
        assert {e["source"]["component"] for e in stored} == {"s"}
