"""The planner refuses what the API server refuses (the same table is run against the
real kube-apiserver in tests/controlplane/test_validation.py) and accepts what it
accepts; the error names the object, the field, the value and what is allowed."""

from __future__ import annotations

import pytest

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import objects
from tests.scheduler.validation_cases import ACCEPTED, REFUSED, Case, base_node, cases


def _read(case: Case) -> objects.ClusterObjects:
    obj = case.build()
    other = base_node() if case.kind != "Node" else None
    return objects.read_cluster([obj] + ([other] if other else []))


@pytest.mark.parametrize("case", cases(REFUSED))
def test_refused(case: Case) -> None:
    with pytest.raises(ConfigError) as caught:
        _read(case)
    message = str(caught.value)
    assert case.field in message, message
    assert f"{case.kind} " in message
    assert ": " in message.split(" = ", 1)[1]  # the value, then what is allowed


@pytest.mark.parametrize("case", cases(ACCEPTED))
def test_accepted(case: Case) -> None:
    _read(case)


def test_the_cli_exits_2_on_a_refused_shape(tmp_path: object) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    case = REFUSED[0]
    path = Path(str(tmp_path)) / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": [base_node(), case.build()]}))
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", "schedule", "--cluster", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "spec.nodeSelector.zone" in done.stderr
