"""Reading a nodeagent server (``run``, ``scheduler``, ``extender``) as its callers do
under ``--metrics-auth kubernetes``: over HTTPS, the probes without credentials, every
other page with a bearer token the real apiserver reviews (TokenReview, then a
SubjectAccessReview under the RBAC the test applied).

The server's certificate is self-signed (or issued for a Service name, not for
127.0.0.1), so no CA check can pass; instead the certificate presented is pinned to the
SHA-256 fingerprint the process logged when it started serving, which is what an
operator is told to do with a self-signed certificate."""

from __future__ import annotations

import http.client
import logging
import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodeagent.base.logs import FIELDS
from nodeagent.serving.tls import fingerprint
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.processes import Process

METRICS_READER = "nodeagent-metrics-reader"
"""The shipped ClusterRole (manifests/components/monitoring/metrics-reader.yaml)."""

_LOGGED = re.compile(r'"sha256Fingerprint":\s*"([0-9A-F:]+)"')


class NotServing(OSError):
    """The process has not logged its certificate yet, or presented another one."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: str


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server on loopback and the certificate fingerprint it logged."""

    name: str
    port: int
    fingerprint: str


def endpoint(process: Process) -> Endpoint:
    """``process``'s server, with the fingerprint in its last "serving" log line."""
    found = _LOGGED.findall(process.log.read_text(errors="replace"))
    if not found:
        raise NotServing(f"{process.name} has not logged its certificate yet")
    return Endpoint(process.name, process.port, str(found[-1]))


def logged_fingerprint(records: Iterable[logging.LogRecord]) -> str:
    """The fingerprint in the last "serving" record of an in-process server."""
    found = [
        str(fields["sha256Fingerprint"])
        for record in records
        if record.getMessage() == "serving"
        and "sha256Fingerprint" in (fields := getattr(record, FIELDS, {}))
    ]
    if not found:
        raise NotServing("no server logged its certificate")
    return found[-1]


def get(target: Process | Endpoint, path: str, *, token: str | None = None) -> Answer:
    """GET ``path`` from ``target`` over HTTPS, its certificate pinned to the logged
    fingerprint; ``token`` as ``Authorization: Bearer``."""
    served = target if isinstance(target, Endpoint) else endpoint(target)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # pinned below instead
    connection = http.client.HTTPSConnection("127.0.0.1", served.port, context=context, timeout=5)
    try:
        connection.connect()
        assert isinstance(connection.sock, ssl.SSLSocket)
        presented = connection.sock.getpeercert(binary_form=True)
        if presented is None or fingerprint(presented) != served.fingerprint:
            raise NotServing(f"{served.name} presented a certificate it did not log")
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return Answer(response.status, response.read().decode(errors="replace"))
    finally:
        connection.close()


def metrics(target: Process | Endpoint, token: str) -> str:
    """``/metrics`` read with ``token``; anything but a 200 is an error that says why."""
    answer = get(target, "/metrics", token=token)
    if answer.status != 200:
        raise AssertionError(f"/metrics: {answer.status} {answer.body[:200]}")
    return answer.body


def ready(target: Process | Endpoint) -> bool:
    """``/readyz`` answers 200 (no credentials: the probes are open)."""
    try:
        return get(target, "/readyz").status == 200
    except OSError:
        return False


def metrics_reader_token(plane: ControlPlane, namespace: str, name: str) -> str:
    """A token of ServiceAccount ``namespace/name`` bound to the shipped metrics-reader
    ClusterRole, as the role's own comment tells an operator to bind Prometheus."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{METRICS_READER}-{namespace}-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]
    plane.apply(documents)
    return plane.service_account_token(namespace, name, create=False)
