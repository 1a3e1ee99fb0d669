"""The gate's invariants over any request (hypothesis), with the reviews answered by the
in-memory fake API (the same review store as the HTTP fake): without valid credentials
only the probes are ever let through; with a valid token, only what its grant names;
and for the certificate paths, only a verified certificate when a client CA is set."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nodeagent.serving.auth import (
    ALWAYS_ALLOWED_PATHS,
    PEER_CERTIFICATE,
    DelegatedAuth,
    Gate,
    Outcome,
)
from nodeagent.serving.wsgi import StartResponse
from tests.doubles import kube as fake
from tests.doubles.reviews import Identity

GRANTED = "/metrics"
VERBS = "/filter"


def app(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
    start_response("200 OK", [])
    return [b"page"]


def gate(*, client_ca: bool) -> Gate:
    cluster = fake.FakeCluster()
    cluster.reviews.add_token("valid", Identity("prometheus"))
    cluster.reviews.grant(user="prometheus", paths=(GRANTED,), verbs=("get",))
    return Gate(
        app,
        delegated=DelegatedAuth(fake.FakeKubeClient(cluster)),
        certificate_paths=(VERBS,),
        require_client_certificate=client_ca,
    )


PATHS = st.one_of(
    st.sampled_from([GRANTED, VERBS, "/", *ALWAYS_ALLOWED_PATHS, "/metrics/", "//metrics"]),
    st.text(min_size=1, max_size=20).map(lambda p: "/" + p),
)
METHODS = st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "get", "OPTIONS"])
FORGED = st.one_of(
    st.just(""),
    st.text(max_size=30),
    st.text(max_size=30).map(lambda t: "Bearer " + t),
    st.just("Basic dmFsaWQ6dmFsaWQ="),
    st.just("bearer  "),
).filter(lambda header: header.strip().split(" ")[-1].strip() != "valid")
"""Authorization headers that are not the valid token, however spelt."""
SUBJECTS = st.lists(
    st.tuples(st.sampled_from(["commonName", "organizationName", "countryName"]), st.text()),
    max_size=3,
)


def environ(path: str, method: str, authorization: str, **extra: Any) -> dict[str, Any]:
    values = {"PATH_INFO": path, "REQUEST_METHOD": method, "HTTP_AUTHORIZATION": authorization}
    return {**values, **extra}


@given(path=PATHS, method=METHODS, authorization=FORGED, client_ca=st.booleans())
def test_without_valid_credentials_only_probes_and_open_verbs_pass(
    path: str, method: str, authorization: str, client_ca: bool
) -> None:
    verdict = gate(client_ca=client_ca).verdict(environ(path, method, authorization))
    open_paths = ALWAYS_ALLOWED_PATHS | (set() if client_ca else {VERBS})
    assert (verdict.outcome is Outcome.ALLOWED) == (path in open_paths)
    if path not in open_paths:
        assert verdict.outcome is Outcome.UNAUTHENTICATED


@given(path=PATHS, method=METHODS)
def test_a_valid_token_opens_exactly_its_grant(path: str, method: str) -> None:
    verdict = gate(client_ca=True).verdict(environ(path, method, "Bearer valid"))
    allowed = path in ALWAYS_ALLOWED_PATHS or (path == GRANTED and method.lower() == "get")
    if path == VERBS:  # certificate paths take no tokens
        assert verdict.outcome is Outcome.UNAUTHENTICATED
    else:
        assert (verdict.outcome is Outcome.ALLOWED) == allowed
        assert verdict.outcome in (Outcome.ALLOWED, Outcome.FORBIDDEN)


@given(subject=SUBJECTS)
def test_verbs_with_a_client_ca_need_a_verified_certificate_naming_someone(
    subject: list[tuple[str, str]],
) -> None:
    certificate = {"subject": tuple((pair,) for pair in subject)}
    verdict = gate(client_ca=True).verdict(
        environ(VERBS, "POST", "", **{PEER_CERTIFICATE: certificate})
    )
    named = [value for key, value in subject if key == "commonName"]
    assert (verdict.outcome is Outcome.ALLOWED) == bool(named and named[0])
