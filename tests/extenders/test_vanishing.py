"""A node the watch deletes while a call is being answered is a node the extender does
not know: it passes the filter and gets the neutral score, never a 500.

A call reads the view once (:meth:`NodeView.scores` or :meth:`NodeView.failing`,
under the view's lock), so a
deletion lands either before that read (the node is unknown) or after it (the call
answers from what it read). The first class puts the deletion exactly between the
request's decoding and that read, without depending on thread timing; the second has a
writer thread delete and re-add the nodes for as long as the calls run."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from io import BytesIO
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from nodeagent.extender import server
from nodeagent.extender.nodeview import NodeView, Taints, V
from nodeagent.scheduler.plugins import node_pressure
from tests.scheduler.builders import node_dict, pod_dict

TAINT = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}


class DeletedBeforeTheRead(NodeView):
    """The view as a call meets it when the watch deletes ``gone`` after the call was
    decoded and before it reads the view."""

    gone = ""

    def scores(self, names: Sequence[str], now: float, neutral: int) -> npt.NDArray[np.int8]:
        self.delete({"metadata": {"name": self.gone}})
        return super().scores(names, now, neutral)

    def failing(
        self, names: Sequence[str], verdict: Callable[[Taints], V | None]
    ) -> dict[V, list[str]]:
        self.delete({"metadata": {"name": self.gone}})
        return super().failing(names, verdict)


def call(app: Any, body: dict[str, Any]) -> tuple[str, Any]:
    data = json.dumps(body).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_LENGTH": str(len(data)),
        "wsgi.input": BytesIO(data),
    }
    answer: list[str] = []
    chunks = app(environ, lambda status, headers: answer.append(status))
    return answer[0], json.loads(b"".join(chunks))


def service_of(view: NodeView) -> server.ExtenderService:
    judge = server.PressureJudge(node_pressure.Args(neutral_score=30))
    return server.ExtenderService(view, judge, server.ExtenderMetrics(view))


@pytest.fixture
def service() -> server.ExtenderService:
    view = DeletedBeforeTheRead()
    for name in ("kept", "going"):
        view.upsert(node_dict(name, taints=[TAINT]))
    view.gone = "going"
    return service_of(view)


ARGS = {"Pod": pod_dict("web"), "Nodes": None, "NodeNames": ["kept", "going"]}


class TestANodeDeletedMidCall:
    def test_passes_the_filter(self, service: server.ExtenderService) -> None:
        status, result = call(service.routes()["/filter"], ARGS)
        assert status.startswith("200")
        assert result["NodeNames"] == ["going"]
        assert list(result["FailedAndUnresolvableNodes"]) == ["kept"]

    def test_gets_the_neutral_score(self, service: server.ExtenderService) -> None:
        status, result = call(service.routes()["/prioritize"], ARGS)
        assert status.startswith("200")
        assert {entry["Host"]: entry["Score"] for entry in result}["going"] == 3


class TestNodesChurningDuringCalls:
    def test_every_call_is_answered_from_nodes_there_or_gone(self) -> None:
        names = [f"n{i}" for i in range(200)]
        view = NodeView()
        for name in names:
            view.upsert(node_dict(name, taints=[TAINT]))
        routes = service_of(view).routes()
        stop, churning = threading.Event(), threading.Event()

        def churn() -> None:
            while not stop.is_set():
                for name in names[::2]:
                    view.delete({"metadata": {"name": name}})
                    churning.set()
                for name in names[::2]:
                    view.upsert(node_dict(name, taints=[TAINT]))

        writer = threading.Thread(target=churn)
        writer.start()
        try:
            assert churning.wait(10)
            args = {**ARGS, "NodeNames": names}
            for _ in range(50):
                status, result = call(routes["/filter"], args)
                assert status.startswith("200")
                passed, failed = result["NodeNames"], result["FailedAndUnresolvableNodes"]
                assert sorted([*passed, *failed]) == sorted(names)
                assert not set(passed) & set(names[1::2])  # never deleted: always known
                status, scores = call(routes["/prioritize"], args)
                assert status.startswith("200")
                assert [entry["Host"] for entry in scores] == names
        finally:
            stop.set()
            writer.join(timeout=10)
