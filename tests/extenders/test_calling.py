"""Our scheduler calling extenders over real HTTP (and HTTPS), with kube-scheduler's
semantics: filter, prioritize, bind, preempt, timeouts, ignorable, unresolvable,
managedResources, both node forms, and the configuration's validation."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent import cli
from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api, config, objects, planner, registry, scheduling
from nodeagent.scheduler.extenders.chain import Extenders
from nodeagent.scheduler.extenders.client import ExtenderError
from nodeagent.scheduler.extenders.preempting import process_preemption
from nodeagent.scheduler.extenders.settings import ExtenderConfig
from nodeagent.scheduler.framework import Victims
from tests.extenders import stub, tls
from tests.scheduler.builders import container, node_dict, pod_dict

NOW = 1_714_557_600.0


def cluster(*pods: dict[str, Any], nodes: int = 3) -> objects.ClusterObjects:
    docs: list[dict[str, Any]] = [
        node_dict(f"n{i}", labels={"rack": f"r{i}"}) for i in range(1, nodes + 1)
    ]
    docs.extend(pods or [pod_dict("p", requests={"cpu": "100m"})])
    return objects.read_cluster(docs)


def plan(
    extenders: list[dict[str, Any]],
    objs: objects.ClusterObjects | None = None,
    **document: Any,
) -> planner.Plan:
    plugins = registry.in_tree_registry()
    configuration = config.parse_configuration({"extenders": extenders, **document}, plugins)
    return planner.plan(
        objs or cluster(), configuration, plugins=plugins, seed=1, explain_nodes=True, now=NOW
    )


@pytest.fixture
def extender() -> Iterator[stub.StubExtender]:
    with stub.running() as server:
        yield server


def only(plan_: planner.Plan) -> planner.Placement:
    [placement] = plan_.placements
    return placement


# --- filter --------------------------------------------------------------------------------


def test_filter_reasons_reach_the_explanation_and_the_fit_error(
    extender: stub.StubExtender,
) -> None:
    def verdict(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {
            "NodeNames": ["n3"],
            "FailedNodes": {"n1": "n1 is out of licences"},
            "FailedAndUnresolvableNodes": {"n2": "n2 has no GPU"},
            "Error": "",
        }

    extender.answers["filter"] = verdict
    spec = {"urlPrefix": extender.url, "filterVerb": "filter", "nodeCacheCapable": True}
    placement = only(plan([spec]))
    assert placement.node == "n3"
    assert placement.nodes is not None
    assert placement.nodes["n1"].reasons == ("n1 is out of licences",)
    assert placement.nodes["n2"].reasons == ("n2 has no GPU",)
    assert not placement.nodes["n1"].feasible and placement.nodes["n1"].evaluated
    [call] = extender.calls
    assert call.path == "/scheduler/filter"
    assert call.headers["Content-Type"] == "application/json"
    assert sorted(call.body["NodeNames"]) == ["n1", "n2", "n3"]
    assert call.body["Nodes"] is None  # sent as kube-scheduler does, null
    assert call.body["Pod"]["metadata"]["name"] == "p"

    extender.answers["filter"] = lambda body: (
        200,
        {"NodeNames": [], "FailedNodes": {n: "busy" for n in body["NodeNames"]}},
    )
    placement = only(plan([spec]))
    assert placement.status is planner.Outcome.UNSCHEDULABLE
    # FailedNodes may be helped by preemption (nothing to preempt here)
    assert placement.message == (
        "0/3 nodes are available: 3 busy."
        " no new claims to deallocate, preemption: 0/3 nodes are available:"
        " 3 No preemption victims found for incoming pod."
    )


def test_unresolvable_wins_and_stays_out_of_preemption(extender: stub.StubExtender) -> None:
    extender.answers["filter"] = lambda body: (
        200,
        {
            "NodeNames": [],
            "FailedNodes": {"n1": "later", "n2": "later"},
            "FailedAndUnresolvableNodes": {"n2": "never", "n3": "never"},
        },
    )
    plugins = registry.in_tree_registry()
    document = {
        "extenders": [{"urlPrefix": extender.url, "filterVerb": "filter", "nodeCacheCapable": True}]
    }
    configuration = config.parse_configuration(document, plugins)
    from nodeagent.scheduler import framework
    from nodeagent.scheduler.snapshot import ClusterSnapshot

    objs = cluster()
    frameworks = framework.build_frameworks(configuration, plugins, framework.Handle(now=NOW))
    scheduler = scheduling.Scheduler(frameworks, ClusterSnapshot(objs.nodes))
    result = scheduler.schedule_one(objs.pods[0])
    assert result.node is None
    codes = {scheduler.snapshot.names[i]: s.code for i, s in result.rejection_statuses().items()}
    assert codes == {
        "n1": api.Code.UNSCHEDULABLE,
        "n2": api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        "n3": api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    }
    # Preemption tries only n1: the unresolvable nodes are "not helpful".
    assert result.status.message == (
        "0/3 nodes are available: 1 later, 2 never."
        " no new claims to deallocate, preemption: 0/3 nodes are available:"
        " 1 No preemption victims found for incoming pod,"
        " 2 Preemption is not helpful for scheduling."
    )


def test_filter_extenders_chain_in_order_each_on_what_the_previous_kept() -> None:
    with stub.running() as first, stub.running() as second:
        first.answers["filter"] = lambda body: (
            200,
            {"NodeNames": ["n1", "n2"], "FailedNodes": {"n3": "first says no"}},
        )
        second.answers["filter"] = stub.keep_all
        placement = only(
            plan(
                [
                    {"urlPrefix": first.url, "filterVerb": "filter", "nodeCacheCapable": True},
                    {"urlPrefix": second.url, "filterVerb": "filter", "nodeCacheCapable": True},
                ]
            )
        )
        assert placement.node in ("n1", "n2")
        assert second.calls[0].body["NodeNames"] == ["n1", "n2"]


def test_whole_nodes_are_sent_unless_node_cache_capable(extender: stub.StubExtender) -> None:
    extender.answers["filter"] = stub.keep_all
    placement = only(plan([{"urlPrefix": extender.url, "filterVerb": "filter"}]))
    assert placement.status is planner.Outcome.SCHEDULED
    [call] = extender.calls
    assert call.body["NodeNames"] is None
    items = call.body["Nodes"]["items"]
    assert {item["metadata"]["labels"]["rack"] for item in items} == {"r1", "r2", "r3"}
    assert items[0]["status"]["allocatable"]["cpu"] == "4"


def test_a_filter_answer_naming_a_node_not_sent_fails_the_attempt(
    extender: stub.StubExtender,
) -> None:
    extender.answers["filter"] = lambda body: (200, {"NodeNames": ["n1", "elsewhere"]})
    spec = {"urlPrefix": extender.url, "filterVerb": "filter", "nodeCacheCapable": True}
    placement = only(plan([spec]))
    assert placement.status is planner.Outcome.ERROR
    assert "claims a filtered node 'elsewhere'" in placement.message


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param((200, {"Error": "database down"}), "database down", id="error-field"),
        pytest.param((500, {}), "code 500", id="status"),
        pytest.param((200, "not an object"), "expected a JSON object", id="garbage"),
    ],
)
def test_a_failing_filter_fails_the_attempt_unless_ignorable(
    extender: stub.StubExtender, answer: tuple[int, Any], expected: str
) -> None:
    extender.answers["filter"] = lambda body: answer
    spec = {"urlPrefix": extender.url, "filterVerb": "filter", "nodeCacheCapable": True}
    placement = only(plan([spec]))
    assert placement.status is planner.Outcome.ERROR
    assert expected in placement.message
    placement = only(plan([{**spec, "ignorable": True}]))
    assert placement.status is planner.Outcome.SCHEDULED


def test_a_timeout_fails_the_attempt_unless_ignorable(extender: stub.StubExtender) -> None:
    extender.answers["filter"] = stub.keep_all
    extender.delays["filter"] = 1.0
    spec = {
        "urlPrefix": extender.url,
        "filterVerb": "filter",
        "nodeCacheCapable": True,
        "httpTimeout": "200ms",
    }
    started = time.monotonic()
    placement = only(plan([spec]))
    assert time.monotonic() - started < 0.9
    assert placement.status is planner.Outcome.ERROR
    assert "timeout" in placement.message
    assert only(plan([{**spec, "ignorable": True}])).status is planner.Outcome.SCHEDULED


def test_an_unreachable_ignorable_extender_never_stops_scheduling() -> None:
    with stub.running() as gone:
        url = gone.url
    spec = {
        "urlPrefix": url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": 1,
        "ignorable": True,
    }
    assert only(plan([spec])).status is planner.Outcome.SCHEDULED


# --- prioritize ----------------------------------------------------------------------------


def test_prioritize_adds_score_times_weight_times_ten(extender: stub.StubExtender) -> None:
    scores = {"n1": 2, "n2": 7, "n3": 4}
    extender.answers["prioritize"] = lambda body: (
        200,
        [{"Host": name, "Score": scores[name]} for name in body["NodeNames"]],
    )
    spec = {
        "urlPrefix": extender.url,
        "prioritizeVerb": "prioritize",
        "weight": 3,
        "nodeCacheCapable": True,
    }
    with_extender = only(plan([spec]))
    without = only(plan([]))
    assert with_extender.node == "n2"
    assert with_extender.nodes is not None and without.nodes is not None
    for name, score in scores.items():
        verdict = with_extender.nodes[name]
        assert verdict.extenders == {
            extender.url: planner.ExtenderScore(score=score, weighted=score * 3 * 10)
        }
        assert verdict.score == (without.nodes[name].score or 0) + score * 30
    entry = with_extender.to_dict()["nodes"]["n2"]
    assert entry["extenders"] == {extender.url: {"score": 7, "weighted": 210}}
    assert "extenders" not in without.to_dict()["nodes"]["n2"]


def test_prioritize_accepts_old_lowercase_field_names_and_ignores_failures(
    extender: stub.StubExtender,
) -> None:
    extender.answers["prioritize"] = lambda body: (200, [{"host": "n1", "score": 10}])
    spec = {"urlPrefix": extender.url, "prioritizeVerb": "prioritize", "weight": 5}
    placement = only(plan([spec]))
    assert placement.node == "n1"
    assert placement.nodes is not None and placement.nodes["n2"].extenders == {}
    extender.answers["prioritize"] = lambda body: (200, [{"Host": "n1", "Score": 2.5}])
    placement = only(plan([spec]))
    assert placement.status is planner.Outcome.SCHEDULED  # errors ignored: no scores
    assert placement.nodes is not None and placement.nodes["n1"].extenders == {}


def test_prioritizers_run_concurrently() -> None:
    with stub.running() as a, stub.running() as b:
        for server in (a, b):
            server.answers["prioritize"] = lambda body: (200, [])
            server.delays["prioritize"] = 0.4
        specs = [{"urlPrefix": s.url, "prioritizeVerb": "prioritize", "weight": 1} for s in (a, b)]
        started = time.monotonic()
        only(plan(specs))
        assert time.monotonic() - started < 0.75


def test_a_single_feasible_node_is_not_prioritized(extender: stub.StubExtender) -> None:
    extender.answers["prioritize"] = lambda body: (200, [])
    placement = only(
        plan(
            [{"urlPrefix": extender.url, "prioritizeVerb": "prioritize", "weight": 1}],
            cluster(nodes=1),
        )
    )
    assert placement.node == "n1"
    assert extender.calls == []


# --- managedResources ------------------------------------------------------------------------


def test_only_pods_using_a_managed_resource_are_sent(extender: stub.StubExtender) -> None:
    extender.answers["filter"] = stub.keep_all
    gpu_limit = container(requests={"cpu": "100m"})
    gpu_limit["resources"]["limits"] = {"example.com/gpu": "1"}
    objs = objects.read_cluster(
        [node_dict(f"n{i}", extra={"example.com/gpu": "2"}) for i in (1, 2)]
        + [
            pod_dict("plain", requests={"cpu": "100m"}),
            pod_dict(
                "init-gpu", init_containers=[container("init", requests={"example.com/gpu": "1"})]
            ),
            pod_dict("limit-gpu", containers=[gpu_limit]),
        ]
    )
    spec = {
        "urlPrefix": extender.url,
        "filterVerb": "filter",
        "nodeCacheCapable": True,
        "managedResources": [{"name": "example.com/gpu"}],
    }
    result = plan([spec], objs)
    assert all(p.status is planner.Outcome.SCHEDULED for p in result.placements)
    sent = sorted(call.body["Pod"]["metadata"]["name"] for call in extender.calls)
    assert sent == ["init-gpu", "limit-gpu"]


def test_ignored_by_scheduler_resources_are_left_to_the_extender(
    extender: stub.StubExtender,
) -> None:
    extender.answers["filter"] = stub.keep_all
    objs = objects.read_cluster(
        [node_dict("n1"), pod_dict("p", requests={"cpu": "100m", "example.com/fpga": "1"})]
    )
    spec = {"urlPrefix": extender.url, "filterVerb": "filter", "nodeCacheCapable": True}
    managed = {"managedResources": [{"name": "example.com/fpga", "ignoredByScheduler": True}]}
    assert only(plan([spec], objs)).message.startswith(
        "0/1 nodes are available: 1 Insufficient example.com/fpga."
    )
    assert only(plan([{**spec, **managed}], objs)).node == "n1"


# --- bind ------------------------------------------------------------------------------------


def test_an_interested_binder_binds_instead_of_default_binder(
    extender: stub.StubExtender,
) -> None:
    extender.answers["bind"] = lambda body: (200, {"Error": ""})
    objs = objects.read_cluster(
        [
            node_dict("n1"),
            {**pod_dict("p"), "metadata": {"name": "p", "namespace": "team", "uid": "u-1"}},
        ]
    )
    placement = only(plan([{"urlPrefix": extender.url, "bindVerb": "bind"}], objs))
    assert placement.node == "n1"
    [call] = extender.calls
    assert call.body == {"PodName": "p", "PodNamespace": "team", "PodUID": "u-1", "Node": "n1"}


def test_a_failing_binder_fails_the_pod_unless_ignorable(extender: stub.StubExtender) -> None:
    extender.answers["bind"] = lambda body: (200, {"Error": "pod is already bound"})
    spec = {"urlPrefix": extender.url, "bindVerb": "bind"}
    placement = only(plan([spec]))
    assert placement.status is planner.Outcome.ERROR
    assert "pod is already bound" in placement.message
    assert only(plan([{**spec, "ignorable": True}])).status is planner.Outcome.SCHEDULED


# --- preempt ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cache_capable", [True, False])
def test_preempt_trims_victims_resolved_by_uid(
    extender: stub.StubExtender, cache_capable: bool
) -> None:
    docs: list[dict[str, Any]] = [node_dict("n1"), node_dict("n2")]
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        doc = pod_dict(name, node_name=node)
        doc["metadata"]["uid"] = f"uid-{name}"
        docs.append(doc)
    objs = objects.read_cluster(docs)
    from nodeagent.scheduler.snapshot import ClusterSnapshot

    snapshot = ClusterSnapshot(objs.nodes, objs.bound_pods())
    pods = {p.name: p for p in objs.pods}

    def trim(body: dict[str, Any]) -> tuple[int, Any]:
        if cache_capable:
            assert body["NodeNameToVictims"] is None
            sent = body["NodeNameToMetaVictims"]
            assert sent["n1"] == {
                "Pods": [{"UID": "uid-a"}, {"UID": "uid-b"}],
                "NumPDBViolations": 1,
            }
        else:
            assert body["NodeNameToMetaVictims"] is None
            names = [p["metadata"]["name"] for p in body["NodeNameToVictims"]["n1"]["Pods"]]
            assert names == ["a", "b"]
        return 200, {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-b"}]}}}

    extender.answers["preempt"] = trim
    spec = ExtenderConfig.model_validate(
        {"urlPrefix": extender.url, "preemptVerb": "preempt", "nodeCacheCapable": cache_capable}
    )
    chain = Extenders([spec])
    candidates = {
        "n1": Victims((pods["a"], pods["b"]), 1),
        "n2": Victims((pods["c"],)),
    }
    result = process_preemption(chain, pods["a"], snapshot, candidates)
    assert result == {"n1": Victims((pods["b"],), 0)}

    extender.answers["preempt"] = lambda body: (
        200,
        {"NodeNameToMetaVictims": {"n1": {"Pods": []}}},
    )
    with pytest.raises(ExtenderError, match="at least one victim"):
        process_preemption(chain, pods["a"], snapshot, candidates)
    ignorable = Extenders([spec.model_copy(update={"ignorable": True})])
    assert process_preemption(ignorable, pods["a"], snapshot, candidates) == {}

    extender.answers["preempt"] = lambda body: (
        200,
        {"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "uid-a"}]}}},
    )
    with pytest.raises(ExtenderError, match="not found on that node"):
        process_preemption(chain, pods["a"], snapshot, candidates)


def test_preemption_in_the_plan_asks_the_preempt_extender(extender: stub.StubExtender) -> None:
    docs: list[dict[str, Any]] = [node_dict("n1", cpu="1")]
    for name in ("a", "b"):
        doc = pod_dict(name, requests={"cpu": "500m"}, node_name="n1", priority=0)
        doc["metadata"]["uid"] = f"uid-{name}"
        docs.append(doc)
    docs.append(pod_dict("urgent", requests={"cpu": "500m"}, priority=1000))
    objs = objects.read_cluster(docs)
    extender.answers["preempt"] = lambda body: (
        200,
        {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-a"}], "NumPDBViolations": 0}}},
    )
    spec = {"urlPrefix": extender.url, "preemptVerb": "preempt", "nodeCacheCapable": True}
    [placement] = plan([spec], objs).placements
    assert placement.status is planner.Outcome.NOMINATED
    assert placement.nominated_node == "n1"
    assert placement.victims == ("default/a",)  # the extender's choice
    [call] = extender.calls
    [sent] = call.body["NodeNameToMetaVictims"]["n1"]["Pods"]
    assert sent["UID"] in ("uid-a", "uid-b")
    # A failing preempt extender fails the PostFilter: kube-scheduler logs it and the pod
    # stays unschedulable, nominated nowhere.
    extender.answers["preempt"] = lambda body: (500, {})
    [placement] = plan([spec], objs).placements
    assert placement.status is planner.Outcome.UNSCHEDULABLE
    assert placement.nominated_node is None
    assert placement.message == "0/1 nodes are available: 1 Insufficient cpu."


# --- TLS -------------------------------------------------------------------------------------


def _server_context(pki: tls.Pki, *, require_client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if require_client:
        context.load_verify_locations(pki.ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def test_https_with_ca_file_ca_data_and_a_client_certificate(tmp_path: Path) -> None:
    import base64

    pki = tls.make_pki(tmp_path)
    with stub.running(_server_context(pki, require_client=True)) as server:
        server.answers["filter"] = stub.keep_all
        data = {
            "caData": base64.b64encode(pki.ca.read_bytes()).decode(),
            "certData": base64.b64encode(pki.client_cert.read_bytes()).decode(),
            "keyData": base64.b64encode(pki.client_key.read_bytes()).decode(),
        }
        files = {
            "caFile": str(pki.ca),
            "certFile": str(pki.client_cert),
            "keyFile": str(pki.client_key),
        }
        for tls_config in (data, files):
            spec = {
                "urlPrefix": server.url,
                "filterVerb": "filter",
                "nodeCacheCapable": True,
                "enableHTTPS": True,
                "tlsConfig": tls_config,
            }
            assert only(plan([spec])).status is planner.Outcome.SCHEDULED
        no_client_cert = {
            "urlPrefix": server.url,
            "filterVerb": "filter",
            "nodeCacheCapable": True,
            "tlsConfig": {"caFile": str(pki.ca)},
        }
        assert only(plan([no_client_cert])).status is planner.Outcome.ERROR
        assert len(server.calls) == 2


def test_https_server_verification(tmp_path: Path) -> None:
    pki = tls.make_pki(tmp_path / "a")
    other = tls.make_pki(tmp_path / "b")
    with stub.running(_server_context(pki)) as server:
        server.answers["filter"] = stub.keep_all
        base = {"urlPrefix": server.url, "filterVerb": "filter", "nodeCacheCapable": True}
        wrong_ca = {**base, "tlsConfig": {"caFile": str(other.ca)}}
        placement = only(plan([wrong_ca]))
        assert placement.status is planner.Outcome.ERROR
        assert "CERTIFICATE_VERIFY_FAILED" in placement.message
        # enableHTTPS without a CA does not verify the server (kube-scheduler's makeTransport)
        assert only(plan([{**base, "enableHTTPS": True}])).status is planner.Outcome.SCHEDULED
        insecure = {**base, "tlsConfig": {"insecure": True, "caFile": str(other.ca)}}
        assert only(plan([insecure])).status is planner.Outcome.SCHEDULED
        named = {**base, "tlsConfig": {"caFile": str(pki.ca), "serverName": "localhost"}}
        assert only(plan([named])).status is planner.Outcome.SCHEDULED
        wrong_name = {**base, "tlsConfig": {"caFile": str(pki.ca), "serverName": "elsewhere"}}
        assert only(plan([wrong_name])).status is planner.Outcome.ERROR


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extenders", "field"),
    [
        pytest.param(
            [{"urlPrefix": "http://x", "prioritizeVerb": "p", "weight": 0}],
            "extenders[0].weight (value 0): must be positive",
            id="weight",
        ),
        pytest.param(
            [
                {"urlPrefix": "http://a", "bindVerb": "b"},
                {"urlPrefix": "http://b", "bindVerb": "b"},
            ],
            "extenders (found 2 extenders implementing bind): only one extender can implement bind",
            id="two-binders",
        ),
        pytest.param(
            [{"urlPrefix": "http://x", "managedResources": [{"name": "kubernetes.io/foo"}]}],
            "extenders[0].managedResources[0].name (value 'kubernetes.io/foo')",
            id="native-resource",
        ),
        pytest.param(
            [
                {"urlPrefix": "http://a", "managedResources": [{"name": "example.com/x"}]},
                {"urlPrefix": "http://b", "managedResources": [{"name": "example.com/x"}]},
            ],
            "extenders[1].managedResources[0].name (value 'example.com/x'): duplicate",
            id="duplicate-resource",
        ),
        pytest.param(
            [{"urlPrefix": "ftp://x"}],
            "extenders[0].urlPrefix (value 'ftp://x'): must be an http",
            id="url",
        ),
        pytest.param(
            [{"urlPrefix": "http://x", "httpTimeout": "soon"}],
            "extenders[0].httpTimeout (value 'soon')",
            id="timeout",
        ),
        pytest.param([{"urlPrefix": "http://x", "filterverb": "f"}], "filterverb", id="unknown"),
        pytest.param(
            [{"urlPrefix": "http://x", "tlsConfig": {"caData": "%%%"}}],
            "extenders[0].tlsConfig.caData (value '%%%'): PEM data must be base64",
            id="ca-data",
        ),
        pytest.param(
            [{"urlPrefix": "https://x", "tlsConfig": {"caFile": "/nonexistent/ca.crt"}}],
            "extenders[0].tlsConfig",
            id="ca-file",
        ),
    ],
)
def test_invalid_extenders_exit_2_naming_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extenders: list[dict[str, Any]],
    field: str,
) -> None:
    import yaml

    config_file = tmp_path / "sched.yaml"
    config_file.write_text(yaml.safe_dump({"extenders": extenders}))
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump_all([node_dict("n1"), pod_dict("p")]))
    code = cli.main(["schedule", "--cluster", str(cluster_file), "--config", str(config_file)])
    assert code == 2
    assert field in capsys.readouterr().err


def test_valid_extenders_default_like_kube_scheduler() -> None:
    configuration = config.parse_configuration(
        {"extenders": [{"urlPrefix": "http://x", "filterVerb": "filter"}]},
        registry.in_tree_registry(),
    )
    [spec] = configuration.extenders
    assert spec.timeout == 5.0 and spec.weight == 0 and not spec.ignorable
    assert not spec.enable_https and not spec.node_cache_capable
    with pytest.raises(ConfigError):
        config.parse_configuration(
            {"extenders": [{"urlPrefix": "http://x", "httpTimeout": "-1s"}]},
            registry.in_tree_registry(),
        )
