"""A node the watch deletes while a call is being answered is a node the extender does
not know: it passes the filter and gets the neutral score, never a 500. The deletion is
made to fall exactly between a reader's membership check and its read (a view whose
mapping has lost the node although its tainted set still names it), so the test does not
depend on thread timing."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from io import BytesIO
from typing import Any

import pytest

from nodeagent.scheduler.extenders import server
from nodeagent.scheduler.extenders.nodeview import KnownNode, NodeView
from nodeagent.scheduler.plugins import node_pressure
from tests.scheduler.builders import node_dict, pod_dict

TAINT = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}


class DeletedOnRead(Mapping[str, KnownNode]):
    """The view's nodes as a reader meets them when the watch deletes ``gone`` between
    the reader's check and its read: ``in`` still finds it, reading it does not."""

    def __init__(self, nodes: Mapping[str, KnownNode], gone: str) -> None:
        self._nodes, self._gone = nodes, gone

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __getitem__(self, name: str) -> KnownNode:
        if name == self._gone:
            raise KeyError(name)
        return self._nodes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


class VanishingView(NodeView):
    gone = ""

    @property
    def nodes(self) -> Mapping[str, KnownNode]:
        return DeletedOnRead(super().nodes, self.gone)


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


@pytest.fixture
def service() -> server.ExtenderService:
    view = VanishingView()
    for name in ("kept", "going"):
        view.upsert(node_dict(name, taints=[TAINT]))
    view.gone = "going"
    judge = server.PressureJudge(node_pressure.Args(neutral_score=30))
    return server.ExtenderService(view, judge, server.ExtenderMetrics(view))


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
