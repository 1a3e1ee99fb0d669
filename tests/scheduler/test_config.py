"""KubeSchedulerConfiguration: defaults, merging with the default plugin set, MultiPoint
expansion, plugin args, and errors that name the field (exit code 2 via the CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent import cli
from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import config, framework, registry
from nodeagent.scheduler.plugins import node_resources_fit
from tests.scheduler import builders as b

REGISTRY = registry.in_tree_registry()


def profile_doc(plugins: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    profile: dict[str, Any] = {"schedulerName": "default-scheduler", **extra}
    if plugins is not None:
        profile["plugins"] = plugins
    return {"apiVersion": config.API_VERSION, "kind": config.KIND, "profiles": [profile]}


def build(document: dict[str, Any] | None) -> framework.Framework:
    return b.default_framework(document)


def names(plugins: list[Any]) -> list[str]:
    return [p.name for p in plugins]


def test_defaults_match_kube_scheduler_plus_node_pressure() -> None:
    fw = build(None)
    assert names(fw.queue_sort) == ["PrioritySort"]
    # v1.36: DefaultPreemption holds a pod back while its asynchronous preemption runs
    assert names(fw.pre_enqueue) == ["SchedulingGates", "DynamicResources", "DefaultPreemption"]
    assert names(fw.pre_filter)[-1] == "NodeDeclaredFeatures"
    assert names(fw.filter) == [
        "NodeUnschedulable",
        "NodeName",
        "NodePressure",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "NodeDeclaredFeatures",
    ]
    # DynamicResources deallocates an idle claim before DefaultPreemption evicts a pod
    assert names(fw.post_filter) == ["DynamicResources", "DefaultPreemption"]
    assert names(fw.reserve) == ["VolumeBinding", "DynamicResources"]
    assert names(fw.pre_bind) == ["VolumeBinding", "DynamicResources"]
    assert fw.weights == {
        "NodePressure": 2,
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "VolumeBinding": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "DynamicResources": 2,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }
    assert names(fw.bind) == ["DefaultBinder"]
    assert fw.profile.scheduler_name == "default-scheduler"


def test_disabling_a_default_removes_it_everywhere() -> None:
    fw = build(profile_doc({"multiPoint": {"disabled": [{"name": "NodePressure"}]}}))
    assert "NodePressure" not in names(fw.filter) + names(fw.score)


def test_disabling_at_one_point_keeps_the_others() -> None:
    fw = build(profile_doc({"score": {"disabled": [{"name": "TaintToleration"}]}}))
    assert "TaintToleration" in names(fw.filter)
    assert "TaintToleration" not in names(fw.score)


def test_enabled_default_with_new_weight_keeps_its_place() -> None:
    fw = build(profile_doc({"multiPoint": {"enabled": [{"name": "TaintToleration", "weight": 7}]}}))
    assert fw.weights["TaintToleration"] == 7
    assert names(fw.filter).index("TaintToleration") == 3


def test_score_point_weight_overrides_multi_point_and_moves_first() -> None:
    fw = build(profile_doc({"score": {"enabled": [{"name": "ImageLocality", "weight": 5}]}}))
    assert fw.weights["ImageLocality"] == 5
    assert names(fw.score)[0] == "ImageLocality"  # explicit overrides come first


def test_explicit_overrides_keep_the_order_of_their_own_point() -> None:
    # Both are default MultiPoint plugins (TaintToleration first there); named at the
    # score point in the other order, they lead in the score point's order, and the
    # remaining MultiPoint plugins follow in MultiPoint order.
    fw = build(
        profile_doc(
            {
                "score": {
                    "enabled": [
                        {"name": "ImageLocality", "weight": 4},
                        {"name": "TaintToleration", "weight": 6},
                    ]
                }
            }
        )
    )
    assert names(fw.score) == [
        "ImageLocality",
        "TaintToleration",
        "NodePressure",
        "NodeAffinity",
        "NodeResourcesFit",
        "VolumeBinding",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "NodeResourcesBalancedAllocation",
    ]
    assert (fw.weights["ImageLocality"], fw.weights["TaintToleration"]) == (4, 6)


def test_star_disables_all_defaults_at_a_point() -> None:
    fw = build(
        profile_doc(
            {
                "score": {
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": "NodeResourcesFit", "weight": 2}],
                }
            }
        )
    )
    assert names(fw.score) == ["NodeResourcesFit"]
    assert fw.weights["NodeResourcesFit"] == 2


def test_zero_weight_means_one() -> None:
    fw = build(profile_doc({"multiPoint": {"enabled": [{"name": "ImageLocality", "weight": 0}]}}))
    assert fw.weights["ImageLocality"] == 1


def test_percentage_of_nodes_to_score_global_and_per_profile() -> None:
    doc = profile_doc(percentageOfNodesToScore=30)
    doc["percentageOfNodesToScore"] = 70
    parsed = config.parse_configuration(doc, REGISTRY)
    assert parsed.percentage_of_nodes_to_score == 70
    assert parsed.profiles[0].percentage_of_nodes_to_score == 30


def test_node_resources_fit_args_defaults_and_rtcr_shape() -> None:
    doc = profile_doc(
        pluginConfig=[
            {
                "name": "NodeResourcesFit",
                "args": {
                    "scoringStrategy": {
                        "type": "RequestedToCapacityRatio",
                        "resources": [{"name": "cpu"}, {"name": "example.com/foo", "weight": 5}],
                        "requestedToCapacityRatio": {
                            "shape": [
                                {"utilization": 0, "score": 0},
                                {"utilization": 100, "score": 10},
                            ]
                        },
                    }
                },
            }
        ]
    )
    parsed = config.parse_configuration(doc, REGISTRY)
    args = parsed.profiles[0].plugin_args["NodeResourcesFit"]
    assert isinstance(args, node_resources_fit.Args)
    assert args.scoring_resources() == [("cpu", 1), ("example.com/foo", 5)]
    default = node_resources_fit.Args()
    assert default.scoring_strategy.type == "LeastAllocated"
    assert default.scoring_resources() == [("cpu", 1), ("memory", 1)]


def test_a_shape_with_another_strategy_is_accepted_and_unused() -> None:
    # kube-scheduler validates the shape but only RequestedToCapacityRatio uses it.
    shape = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
    strategy = fit_strategy(type="MostAllocated", requestedToCapacityRatio={"shape": shape})
    doc = {"apiVersion": config.API_VERSION, "kind": config.KIND, **strategy}
    args = config.parse_configuration(doc, REGISTRY).profiles[0].plugin_args["NodeResourcesFit"]
    assert args.scoring_strategy.type == "MostAllocated"


def test_a_single_unnamed_profile_is_the_default_scheduler() -> None:
    doc = {"apiVersion": config.API_VERSION, "kind": config.KIND, "profiles": [{}]}
    parsed = config.parse_configuration(doc, REGISTRY)
    assert [p.scheduler_name for p in parsed.profiles] == ["default-scheduler"]


def test_args_for_plugins_nodeagent_lacks_are_accepted_when_not_enabled() -> None:
    doc = profile_doc(
        {"multiPoint": {"disabled": [{"name": "PodTopologySpread"}]}},
        pluginConfig=[{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 10}}],
    )
    build(doc)


def with_args(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """A document whose single profile configures plugin ``name`` with ``args``."""
    return {"profiles": [{"pluginConfig": [{"name": name, "args": args}]}]}


def fit_strategy(**strategy: Any) -> dict[str, Any]:
    return with_args("NodeResourcesFit", {"scoringStrategy": strategy})


ARGS = "profiles[0].pluginConfig[0].args"
SHAPE = f"{ARGS}.scoringStrategy.requestedToCapacityRatio.shape"
ADDED = f"{ARGS}.addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"

BAD_CONFIGS = [
    pytest.param({"percentageOfNodesToScore": 150}, "percentageOfNodesToScore", id="percentage"),
    pytest.param({"apiVersion": "kubescheduler.config.k8s.io/v1beta3"}, "apiVersion", id="version"),
    pytest.param({"profilez": []}, "profilez", id="unknown-field"),
    pytest.param(
        {"extenders": [{"urlPrefix": "http://x", "prioritizeVerb": "p"}]},
        "extenders[0].weight",
        id="extenders",
    ),
    pytest.param(
        {"podInitialBackoffSeconds": 5, "podMaxBackoffSeconds": 1},
        "podMaxBackoffSeconds 1: must be greater than or equal to podInitialBackoffSeconds (5)",
        id="backoff-order",
    ),
    pytest.param(
        {"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]},
        "profiles[1].schedulerName 'a': duplicate",
        id="dup-profile",
    ),
    pytest.param(
        {"profiles": [{"schedulerName": "a"}, {}]},
        "profiles[1].schedulerName: required",
        id="unnamed-second-profile",
    ),
    pytest.param(
        {
            "profiles": [
                {"plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": -1}]}}}
            ]
        },
        "profiles[0].plugins.score.enabled[0].weight (value -1)",
        id="negative-weight",
    ),
    pytest.param(
        {"profiles": [{"plugins": {"filter": {"enabled": [{"name": "Bogus"}]}}}]},
        "not registered",
        id="unknown-plugin",
    ),
    pytest.param(
        {"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "EBSLimits"}]}}}]},
        "does not implement yet",
        id="not-implemented-yet",
    ),
    pytest.param(
        {"profiles": [{"plugins": {"filter": {"enabled": [{"name": "ImageLocality"}]}}}]},
        "does not extend the filter",
        id="wrong-extension-point",
    ),
    pytest.param(
        {
            "profiles": [
                {
                    "plugins": {
                        "queueSort": {"disabled": [{"name": "*"}]},
                        "multiPoint": {"disabled": [{"name": "PrioritySort"}]},
                    }
                }
            ]
        },
        "exactly one queueSort",
        id="no-queue-sort",
    ),
    pytest.param(
        fit_strategy(type="LeastAllocated", resources=[{"name": "cpu", "weight": 101}]),
        f"{ARGS}.scoringStrategy.resources[0].weight 101: resource weight of cpu not in valid"
        " range (0, 100]",
        id="resource-weight",
    ),
    pytest.param(
        fit_strategy(type="Random"), f"{ARGS}.scoringStrategy.type (value 'Random')", id="type"
    ),
    pytest.param(
        fit_strategy(type="RequestedToCapacityRatio"),
        f"{SHAPE}: at least one point must be specified",
        id="rtcr-needs-shape",
    ),
    pytest.param(
        fit_strategy(type="LeastAllocated", requestedToCapacityRatio={"shape": []}),
        f"{SHAPE}: at least one point must be specified",
        id="given-shape-is-validated-whatever-the-type",
    ),
    pytest.param(
        fit_strategy(
            type="RequestedToCapacityRatio",
            requestedToCapacityRatio={
                "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]
            },
        ),
        f"{SHAPE}[1].utilization 50: values must be sorted in increasing order",
        id="rtcr-shape-order",
    ),
    pytest.param(
        fit_strategy(
            type="RequestedToCapacityRatio",
            requestedToCapacityRatio={"shape": [{"utilization": 50, "score": 11}]},
        ),
        f"{ARGS}.scoringStrategy.requestedToCapacityRatio.shape[0].score (value 11)",
        id="rtcr-shape-score",
    ),
    pytest.param(
        with_args("NodeResourcesFit", {"ignoredResourceGroups": ["example.com/x"]}),
        f"{ARGS}.ignoredResourceGroups[0] 'example.com/x': can't contain '/'",
        id="ignored-group-slash",
    ),
    pytest.param(
        with_args("NodeResourcesBalancedAllocation", {"resources": [{"name": "cpu", "weight": 2}]}),
        f"{ARGS}.resources[0].weight 2: must be 1",
        id="balanced-weight",
    ),
    pytest.param(
        with_args(
            "NodeAffinity",
            {
                "addedAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "a", "operator": "Near", "values": ["x"]}
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        f"{ADDED}.nodeSelectorTerms[0].matchExpressions[0]: 'Near' is not a valid operator",
        id="added-affinity-operator",
    ),
    pytest.param(
        with_args(
            "NodeAffinity",
            {
                "addedAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": {"key": "a"}}]
                    }
                }
            },
        ),
        f"{ADDED}.nodeSelectorTerms[0].matchExpressions = {{'key': 'a'}}: expected a list",
        id="added-affinity-shape",
    ),
    pytest.param(
        with_args("NodePressure", {"fullScoreHeadroomPercent": 0}),
        f"{ARGS}.fullScoreHeadroomPercent (value 0)",
        id="node-pressure-args",
    ),
    pytest.param(
        {"profiles": [{"pluginConfig": [{"name": "NodePressure"}, {"name": "NodePressure"}]}]},
        "profiles[0].pluginConfig[1].name 'NodePressure': duplicate plugin config",
        id="duplicate-plugin-config",
    ),
]


@pytest.mark.parametrize(("overrides", "mentions"), BAD_CONFIGS)
def test_invalid_configuration_is_a_config_error_naming_the_field(
    overrides: dict[str, Any], mentions: str
) -> None:
    document = {"apiVersion": config.API_VERSION, "kind": config.KIND, **overrides}
    with pytest.raises(ConfigError) as caught:
        plugins = registry.in_tree_registry()
        framework.build_frameworks(config.parse_configuration(document, plugins), plugins)
    assert mentions in str(caught.value)


def test_cli_exits_2_on_invalid_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "sched.yaml"
    bad.write_text(
        f"apiVersion: {config.API_VERSION}\nkind: {config.KIND}\npercentageOfNodesToScore: 101\n"
    )
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("kind: List\nitems: []\n")
    code = cli.main(["schedule", "--cluster", str(cluster), "--config", str(bad)])
    assert code == 2
    assert "percentageOfNodesToScore" in capsys.readouterr().err


class FifoSort:
    name = "FifoSort"

    def less(self, a: framework.QueuedPod, b: framework.QueuedPod) -> bool:
        return a.timestamp < b.timestamp


def test_profiles_are_keyed_by_scheduler_name_and_must_share_the_queue_sort() -> None:
    plugins = {**REGISTRY, "FifoSort": framework.PluginSpec(lambda args, handle: FifoSort())}
    same: dict[str, Any] = {"apiVersion": config.API_VERSION, "kind": config.KIND}
    same["profiles"] = [{"schedulerName": "a"}, {"schedulerName": "b"}]
    frameworks = framework.build_frameworks(config.parse_configuration(same, plugins), plugins)
    assert sorted(frameworks) == ["a", "b"]
    fifo = {"queueSort": {"disabled": [{"name": "*"}], "enabled": [{"name": "FifoSort"}]}}
    different = {
        **same,
        "profiles": [{"schedulerName": "a"}, {"schedulerName": "b", "plugins": fifo}],
    }
    with pytest.raises(ConfigError, match="queueSort must be the same for all profiles"):
        framework.build_frameworks(config.parse_configuration(different, plugins), plugins)


def test_added_preferred_terms_of_weight_zero_are_not_validated() -> None:
    # kube-scheduler drops them before parsing, so even a bad operator is accepted.
    bad_term = {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}
    preferred = [{"weight": 0, "preference": bad_term}]
    added = {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    doc = {
        "apiVersion": config.API_VERSION,
        "kind": config.KIND,
        **with_args("NodeAffinity", added),
    }
    build(doc)
    preferred[0]["weight"] = 1
    with pytest.raises(ConfigError, match="'Near' is not a valid operator"):
        build(doc)
