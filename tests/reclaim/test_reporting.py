"""How node-level reclaim shows in the decision line, the metrics and the wiring."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from nodeagent import cli
from nodeagent.agent import metrics, report
from nodeagent.agent.config import load_config, snake_to_camel
from nodeagent.base.errors import ConfigError
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import Decision, NodeReclaimResult, Signal, ThresholdMet

MIB = 1 << 20
DISK_MET = ThresholdMet(Signal.NODEFS_AVAILABLE, True, True, 1024 * MIB, 800 * MIB)


def result(*, enough: bool, dry_run: bool = False) -> NodeReclaimResult:
    return NodeReclaimResult(
        kinds=("containers", "images"),
        containers_removed=3,
        images_removed=2,
        bytes_reclaimed=120 * MIB,
        seconds=0.045,
        enough=enough,
        dry_run=dry_run,
    )


def decision(reclaimed: NodeReclaimResult | None) -> Decision:
    return Decision(
        time=1.0,
        thresholds_met=(DISK_MET,),
        pressure={p: p is Pressure.DISK for p in Pressure},
        conditions=(),
        taints=(),
        evictions=(),
        node_reclaim=("containers", "images"),
        node_reclaim_result=reclaimed,
    )


@pytest.mark.parametrize(
    ("reclaimed", "clause"),
    [
        pytest.param(
            result(enough=True),
            "node-level reclaim removed 3 dead containers, 2 unused images, freed 120Mi in "
            "0.045s: enough, no pod evicted",
            id="enough",
        ),
        pytest.param(
            result(enough=False, dry_run=True),
            "node-level reclaim would remove 3 dead containers, 2 unused images, freed 120Mi "
            "in 0.045s: not enough",
            id="dry-run-not-enough",
        ),
        pytest.param(
            replace(result(enough=False), errors=("CRI list_images: UNAVAILABLE",) * 2),
            "node-level reclaim removed 3 dead containers, 2 unused images, freed 120Mi in "
            "0.045s, 2 CRI errors: not enough",
            id="errors",
        ),
        pytest.param(None, "node-level reclaim containers, images", id="asked-not-run"),
    ],
)
def test_the_decision_line_says_what_reclaim_did(
    reclaimed: NodeReclaimResult | None, clause: str
) -> None:
    message = report.decision_message(decision(reclaimed))
    assert message.endswith("; " + clause)
    # What follows a reclaim that was not enough is the eviction clause's to say (here
    # "no pod to evict"), never "evicting" without a pod.
    assert "evicting" not in message
    # Nothing to evict because reclaim was enough is not "no pod to evict".
    assert ("no pod to evict" in message) is not (reclaimed is not None and reclaimed.enough)


def test_the_fields_say_when_eviction_was_skipped() -> None:
    fields = report.decision_fields(decision(result(enough=True)), trigger="poll", decided_at=1.0)
    assert fields["nodeReclaimResult"] == {
        "containersRemoved": 3,
        "imagesRemoved": 2,
        "bytesReclaimed": 120 * MIB,
        "seconds": 0.045,
        "enough": True,
        "evictionSkipped": True,
        "dryRun": False,
    }
    json.dumps(fields)
    errors = replace(result(enough=False), errors=("CRI RemoveImage: UNAVAILABLE",))
    failed = report.decision_fields(decision(errors), trigger="poll", decided_at=1.0)
    assert failed["nodeReclaimResult"]["errors"] == ["CRI RemoveImage: UNAVAILABLE"]
    # A reclaim changes the line's shape, so it is logged at once.
    assert report.shape_of(decision(result(enough=True))) != report.shape_of(decision(None))


def test_metrics_count_reclaims_removals_bytes_and_duration() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.record_node_reclaim(result(enough=True))
    agent.record_node_reclaim(result(enough=False))
    agent.record_node_reclaim(result(enough=True, dry_run=True))

    def sample(name: str, **labels: str) -> float | None:
        return agent.registry.get_sample_value(name, labels)

    assert sample("nodeagent_node_reclaims_total", result="enough") == 1
    assert sample("nodeagent_node_reclaims_total", result="not_enough") == 1
    assert sample("nodeagent_node_reclaims_total", result="dry_run") == 1
    assert sample("nodeagent_node_reclaim_removed_total", kind="containers") == 6  # not dry run
    assert sample("nodeagent_node_reclaim_removed_total", kind="images") == 4
    assert sample("nodeagent_node_reclaimed_bytes_total") == 3 * 120 * MIB
    assert sample("nodeagent_node_reclaim_duration_seconds_count") == 3


@pytest.mark.parametrize(
    ("argv", "dry_run"),
    [
        (["run"], None),
        (["run", "--dry-run"], True),
        (["run", "--standalone", "--no-dry-run"], False),
    ],
)
def test_run_takes_no_dry_run(argv: list[str], dry_run: bool | None) -> None:
    assert cli.build_parser().parse_args(argv).cfg_dry_run is dry_run


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("container_runtime_endpoint", "npipe:////./pipe/x", "unix:///path/to/socket"),
        ("container_runtime_request_timeout", "0s", "greater than 0"),
    ],
)
def test_bad_runtime_settings_name_the_field(field: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError, match=allowed) as raised:
        load_config(overrides={field: value}, environ={})
    assert f"config field '{snake_to_camel(field)}'" in str(raised.value)
