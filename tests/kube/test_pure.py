"""Pure parts of the client layer: pod conversion (QoS, effective requests, critical,
static, mirror, DaemonSet), selectors, patch semantics, retry waits, the token bucket, and
the actuation settings' parsing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent import podinfo as pods
from nodeagent.agent.config import load_config
from nodeagent.base import errors
from nodeagent.base.clock import FakeClock
from nodeagent.k8s.pods import QOSClass, qos_class
from nodeagent.kube import errors as kube_errors
from nodeagent.kube import http, ratelimit, retry, selectors
from tests.doubles import merge
from tests.fakeapi import objects


def container(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


@pytest.mark.parametrize(
    ("containers", "inits", "expected"),
    [
        pytest.param([container()], [], QOSClass.BEST_EFFORT, id="no-resources"),
        pytest.param(
            [container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
            [],
            QOSClass.GUARANTEED,
            id="requests-equal-limits",
        ),
        pytest.param(
            [container(None, {"cpu": "1", "memory": "1Gi"})],
            [],
            QOSClass.GUARANTEED,
            id="limits-only-defaults-requests",
        ),
        pytest.param(
            [container({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})],
            [],
            QOSClass.BURSTABLE,
            id="limit-above-request",
        ),
        pytest.param([container({"memory": "1Gi"})], [], QOSClass.BURSTABLE, id="request-only"),
        pytest.param(
            [container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
            [container()],
            QOSClass.BURSTABLE,
            id="init-without-limits-demotes",
        ),
        pytest.param(
            [container({"ephemeral-storage": "1Gi"})],
            [],
            QOSClass.BEST_EFFORT,
            id="only-unsupported-resources",
        ),
    ],
)
def test_derived_qos(
    containers: list[dict[str, Any]], inits: list[dict[str, Any]], expected: QOSClass
) -> None:
    spec = {"containers": containers, "initContainers": inits}
    assert qos_class(pods.read_resources(spec)) is expected


def test_status_qos_class_wins_over_derivation() -> None:
    pod = objects.pod("p", requests={"memory": "1Gi"})
    pod["status"]["qosClass"] = "Guaranteed"
    assert pods.pod_info(pod).qos is QOSClass.GUARANTEED


def test_effective_requests_count_sidecars_init_containers_and_overhead() -> None:
    spec = {
        "containers": [
            container({"memory": "100Mi", "cpu": "100m"}),
            container({"memory": "50Mi"}),
        ],
        "initContainers": [
            container({"memory": "20Mi"}, restartPolicy="Always"),  # sidecar
            container({"memory": "500Mi", "cpu": "2"}),  # runs alone, with the sidecar
        ],
        "overhead": {"memory": "10Mi", "cpu": "50m"},
    }
    requests, _ = pods.requests_and_limits(pods.read_resources(spec))
    mi = 1 << 20
    assert requests["memory"] == max(150 * mi + 20 * mi, 520 * mi) + 10 * mi
    assert requests["cpu"] == 2000 + 50


def test_limits_get_overhead_only_where_set() -> None:
    spec = {
        "containers": [container(None, {"memory": "1Gi"})],
        "overhead": {"memory": "10Mi", "cpu": "50m"},
    }
    _, limits = pods.requests_and_limits(pods.read_resources(spec))
    assert limits == {"memory": (1 << 30) + (10 << 20)}


@pytest.mark.parametrize(
    ("pod", "critical", "static", "mirror", "daemonset"),
    [
        pytest.param(objects.pod("a"), False, False, False, False, id="plain"),
        pytest.param(
            objects.pod("a", priority=2_000_000_000),
            True,
            False,
            False,
            False,
            id="system-cluster-critical",
        ),
        pytest.param(
            objects.pod("a", priority=1_999_999_999), False, False, False, False, id="just-below"
        ),
        pytest.param(
            objects.pod(
                "a",
                annotations={
                    "kubernetes.io/config.mirror": "x",
                    "kubernetes.io/config.source": "file",
                },
            ),
            True,
            True,
            True,
            False,
            id="mirror",
        ),
        pytest.param(
            objects.pod("a", annotations={"kubernetes.io/config.source": "api"}),
            False,
            False,
            False,
            False,
            id="api-source",
        ),
        pytest.param(
            objects.pod("a", owner_kind="DaemonSet"), False, False, False, True, id="daemonset"
        ),
        pytest.param(
            objects.pod("a", owner_kind="ReplicaSet"), False, False, False, False, id="replicaset"
        ),
    ],
)
def test_pod_flags(
    pod: dict[str, Any], critical: bool, static: bool, mirror: bool, daemonset: bool
) -> None:
    info = pods.pod_info(pod)
    assert (info.critical, info.static, info.mirror, info.daemonset) == (
        critical,
        static,
        mirror,
        daemonset,
    )


def test_pod_info_fields() -> None:
    info = pods.pod_info(
        objects.pod("a", uid="u", grace=45, labels={"x": "y"}, requests={"memory": "1Gi"})
    )
    assert (info.key, info.uid, info.termination_grace_period_seconds) == ("default/a", "u", 45)
    assert info.requests == {"memory": 1 << 30} and info.labels == {"x": "y"}
    assert pods.pod_info(objects.pod("b")).termination_grace_period_seconds == 30


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        pytest.param("", {}, True, id="empty"),
        pytest.param("a=b,c!=d", {"a": "b", "c": "e"}, True, id="and"),
        pytest.param("a=b,c!=d", {"a": "b", "c": "d"}, False, id="and-fails"),
        pytest.param("a in (x, y)", {"a": "y"}, True, id="in"),
        pytest.param("a notin (x)", {}, True, id="notin-absent"),
        pytest.param("!a", {"a": ""}, False, id="not-exists"),
        pytest.param("example.com/tier", {"example.com/tier": "1"}, True, id="prefixed-exists"),
    ],
)
def test_label_selectors(text: str, labels: dict[str, str], matches: bool) -> None:
    assert selectors.parse_label_selector(text).matches(labels) is matches


@pytest.mark.parametrize("bad", ["a b", "a in x", "=b", "a=(b)"])
def test_bad_label_selectors_are_rejected(bad: str) -> None:
    with pytest.raises(selectors.SelectorError):
        selectors.parse_label_selector(bad)


def test_field_selector_escapes_and_missing_fields() -> None:
    obj = {"metadata": {"name": "a,b"}, "spec": {}}
    assert selectors.parse_field_selector(r"metadata.name=a\,b").matches(obj)
    assert selectors.parse_field_selector("spec.nodeName=").matches(obj)
    assert selectors.parse_field_selector("spec.nodeName!=x").matches(obj)


def test_strategic_merge_directives() -> None:
    node: dict[str, Any] = {
        "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
        "status": {"conditions": [{"type": "A", "status": "True", "reason": "r"}]},
    }
    patched = merge.strategic_merge_patch(
        "nodes",
        node,
        {
            "metadata": {"labels": {"a": None}, "finalizers": ["y"]},
            "status": {
                "conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "True"}]
            },
        },
    )
    assert patched["metadata"] == {"labels": {"b": "2"}, "finalizers": ["x", "y"]}
    assert patched["status"]["conditions"] == [
        {"type": "A", "status": "False", "reason": "r"},
        {"type": "B", "status": "True"},
    ]
    replaced = merge.strategic_merge_patch(
        "nodes",
        patched,
        {
            "status": {"conditions": [{"$patch": "replace"}, {"type": "C", "status": "True"}]},
            "metadata": {"$retainKeys": ["labels"], "labels": {"c": "3"}},
        },
    )
    assert [c["type"] for c in replaced["status"]["conditions"]] == ["C"]
    assert replaced["metadata"] == {"labels": {"b": "2", "c": "3"}}
    assert node["metadata"]["labels"] == {"a": "1", "b": "2"}, "input untouched"
    with pytest.raises(merge.PatchError):
        merge.strategic_merge_patch("nodes", node, {"status": {"conditions": [{"status": "x"}]}})


@given(
    attempt=st.integers(min_value=1, max_value=30),
    draw=st.floats(min_value=0, max_value=0.999),
    hint=st.one_of(st.none(), st.floats(min_value=0, max_value=1000)),
)
def test_retry_wait_is_bounded_and_honours_retry_after(
    attempt: int, draw: float, hint: float | None
) -> None:
    policy = retry.RetryPolicy(initial_delay=0.2, max_delay=10.0, max_retry_after=60.0)
    error = kube_errors.RateLimited("x", retry_after=hint)
    wait = policy.wait_seconds(attempt, error, draw)
    bound = min(10.0, 0.2 * 2 ** (attempt - 1))
    assert 0 <= wait <= max(bound, 60.0)
    if hint is not None:
        assert wait >= min(hint, 60.0)
    else:
        assert wait <= bound


def test_only_faults_are_retried() -> None:
    calls: list[int] = []

    def answer() -> None:
        calls.append(1)
        raise kube_errors.EvictionBlocked("pdb", status=429)

    with pytest.raises(kube_errors.EvictionBlocked):
        retry.call(answer, retry.RetryPolicy(attempts=5), sleep=lambda s: None)
    assert len(calls) == 1

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise kube_errors.Unavailable("down", status=503)
        return "ok"

    assert retry.call(flaky, retry.RetryPolicy(attempts=5), sleep=lambda s: None) == "ok"


@given(failures=st.integers(min_value=0, max_value=6), attempts=st.integers(1, 5))
def test_retries_count_the_first_attempt_and_wait_by_attempt_number(
    failures: int, attempts: int
) -> None:
    """The first attempt runs before tenacity is built; a fault there is tenacity's
    attempt 1: as many calls, retries and waits as if tenacity had made it."""
    policy = retry.RetryPolicy(attempts=attempts, initial_delay=0.2, max_delay=10.0)
    calls: list[int] = []
    retried: list[tuple[str, float]] = []
    slept: list[float] = []

    def answer() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise kube_errors.Unavailable(f"down {len(calls)}", status=503)
        return "ok"

    def call() -> str:
        return retry.call(
            answer,
            policy,
            sleep=slept.append,
            on_retry=lambda error, delay: retried.append((str(error), delay)),
            draw=lambda: 0.5,
        )

    if failures < attempts:
        assert call() == "ok"
    else:
        with pytest.raises(kube_errors.Unavailable, match=f"down {attempts}$"):
            call()
    assert len(calls) == min(failures + 1, attempts)
    expected = [0.5 * min(10.0, 0.2 * 2 ** (n - 1)) for n in range(1, len(calls))]
    assert slept == pytest.approx(expected)
    assert [delay for _, delay in retried] == pytest.approx(expected)
    assert [message for message, _ in retried] == [f"down {n}" for n in range(1, len(calls))]


@pytest.mark.parametrize(
    ("status", "eviction", "expected"),
    [
        pytest.param(404, False, errors.NotFound, id="404"),
        pytest.param(409, False, errors.Conflict, id="409"),
        pytest.param(410, False, kube_errors.Gone, id="410"),
        pytest.param(422, False, kube_errors.Invalid, id="422"),
        pytest.param(403, False, kube_errors.Forbidden, id="403"),
        pytest.param(429, True, kube_errors.EvictionBlocked, id="429-eviction-pdb"),
        pytest.param(429, False, kube_errors.RateLimited, id="429-throttled"),
        pytest.param(503, False, errors.ServerError, id="503"),
    ],
)
def test_status_translation(status: int, eviction: bool, expected: type[Exception]) -> None:
    body = json.dumps({"kind": "Status", "message": kube_errors.PDB_REFUSAL_MESSAGE})
    assert isinstance(kube_errors.from_status(status, body, what="x", eviction=eviction), expected)


def test_token_bucket_allows_burst_then_paces() -> None:
    clock = FakeClock()
    bucket = ratelimit.TokenBucket(10.0, 3, clock=clock)
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.acquire() == pytest.approx(0.1)
    clock.advance(1.0)
    assert bucket.acquire() == 0.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("90", 90.0), ("1m30s", 90.0), ("5m", 300.0), ("500ms", 0.5), ("2h", 7200.0), (12, 12.0)],
)
def test_duration_fields(value: object, seconds: float) -> None:
    config = load_config(overrides={"condition_heartbeat_period": value}, environ={})
    assert config.condition_heartbeat_period == seconds


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("condition_heartbeat_period", "5 parsecs"),
        ("protected_labels", "a b"),
        ("max_evictions_per_interval", "0"),
        ("kube_api_qps", "-1"),
    ],
)
def test_bad_settings_name_the_field(field: str, value: str) -> None:
    with pytest.raises(errors.ConfigError) as bad:
        load_config(overrides={field: value}, environ={})
    camel = field.split("_", maxsplit=1)[0] + "".join(p.capitalize() for p in field.split("_")[1:])
    assert camel in str(bad.value)


def test_list_settings_from_environment() -> None:
    config = load_config(
        environ={
            "NODEAGENT_PROTECTED_NAMESPACES": "kube-system,monitoring",
            "NODEAGENT_PROTECTED_LABELS": "tier in (db,cache),team;app=critical",
        }
    )
    assert config.protected_namespaces == ["kube-system", "monitoring"]
    assert config.protected_labels == ["tier in (db,cache),team", "app=critical"]


def _reads(raw: bytes, sizes: list[int]) -> Callable[[int], bytes]:
    """``read(n)`` over ``raw``, each call giving the next of ``sizes`` bytes at most (a
    socket delivering the stream in those pieces), then b"" (the peer closed)."""
    pieces = iter(sizes)
    at = 0

    def read(limit: int) -> bytes:
        nonlocal at
        take = min(limit, next(pieces, limit))
        out, at = raw[at : at + take], at + take
        return out

    return read


CHUNKED = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n1\r\n\n\r\n0\r\nTrailer: x\r\n\r\n"


@pytest.mark.parametrize(
    "sizes",
    [
        pytest.param([len(CHUNKED)], id="one-read"),
        pytest.param([1] * len(CHUNKED), id="a-byte-a-read"),
        pytest.param([3, 9, 2, 20, 100], id="split-inside-sizes-and-data"),
    ],
)
def test_unchunked_gives_the_body_whatever_the_reads(sizes: list[int]) -> None:
    blocks = list(http.unchunked(_reads(CHUNKED, sizes)))
    assert b"".join(blocks) == b"hello, world\n"
    assert all(blocks)  # no empty block: an empty block would read as the end


def test_unchunked_gives_every_whole_chunk_of_a_read_at_once() -> None:
    assert list(http.unchunked(_reads(CHUNKED, [len(CHUNKED)]))) == [b"hello, world\n"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(b"5\r\nhel", "ended inside", id="cut-in-data"),
        pytest.param(b"5\r\nhello\r\n", "ended inside", id="no-last-chunk"),
        pytest.param(b"zz\r\nhello\r\n0\r\n\r\n", "invalid literal", id="bad-size"),
    ],
)
def test_unchunked_refuses_a_broken_stream(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        list(http.unchunked(_reads(raw, [len(raw)])))


@given(
    st.lists(st.binary(min_size=1, max_size=40), max_size=12),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50),
)
def test_unchunked_undoes_any_chunking(chunks: list[bytes], sizes: list[int]) -> None:
    raw = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    assert b"".join(http.unchunked(_reads(raw, sizes))) == b"".join(chunks)
