"""TokenReview and SubjectAccessReview for the fakes, as kube-apiserver answers them to
a server that delegates its authentication and authorization (kube-scheduler,
nodeagent's secure serving). One store per :class:`~tests.doubles.kube.FakeCluster`
(its ``reviews``), answering both the in-memory
:class:`~tests.doubles.kube.FakeKubeClient` and the fake API server over HTTP
(tests/fakeapi), so the two cannot disagree:

    POST /apis/authentication.k8s.io/v1/tokenreviews
    POST /apis/authorization.k8s.io/v1/subjectaccessreviews

Tokens are registered with :meth:`Reviews.add_token` (the identity a real server would
find behind them: a service account, a user); grants with :meth:`Reviews.grant`, in the
shape of an RBAC ClusterRole rule on ``nonResourceURLs`` bound to a user or a group
(``"/metrics"`` exactly, or a prefix ending in ``*``). The answers carry what the real
ones carry: ``201 Created``, the request's spec echoed, and a status; a request the
real server refuses (no token; neither user nor groups; not exactly one of
``resourceAttributes`` and ``nonResourceAttributes``) gets the same 400/422. Every review
is counted (:attr:`Reviews.token_reviews`, :attr:`Reviews.access_reviews`) so tests can
tell a cached decision from a fresh one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.kube.errors import failure_status as _status

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Identity:
    """Who a token belongs to (a TokenReview's ``status.user``)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def as_user_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {key: list(values) for key, values in self.extra.items()}
        return info


@dataclass(frozen=True)
class Grant:
    """``verbs`` on ``paths`` (RBAC ``nonResourceURLs``) for a user or a group."""

    user: str | None
    group: str | None
    paths: tuple[str, ...]
    verbs: tuple[str, ...]

    def allows(self, user: str, groups: list[str], path: str, verb: str) -> bool:
        subject = (self.user is not None and self.user == user) or (
            self.group is not None and self.group in groups
        )
        return (
            subject
            and any(v in ("*", verb) for v in self.verbs)
            and any(p == path or (p.endswith("*") and path.startswith(p[:-1])) for p in self.paths)
        )


class Reviews:
    def __init__(self) -> None:
        self._tokens: dict[str, Identity] = {}
        self._grants: list[Grant] = []
        self._lock = threading.Lock()
        self.token_reviews = 0
        self.access_reviews = 0
        self.access_specs: list[dict[str, Any]] = []
        """Each SubjectAccessReview spec received, in order."""

    def add_token(self, token: str, identity: Identity) -> None:
        with self._lock:
            self._tokens[token] = identity

    def revoke_token(self, token: str) -> None:
        with self._lock:
            self._tokens.pop(token, None)

    def grant(
        self,
        *,
        user: str | None = None,
        group: str | None = None,
        paths: tuple[str, ...] = ("/metrics",),
        verbs: tuple[str, ...] = ("get",),
    ) -> Grant:
        granted = Grant(user, group, paths, verbs)
        with self._lock:
            self._grants.append(granted)
        return granted

    def revoke(self, granted: Grant) -> None:
        with self._lock:
            self._grants.remove(granted)

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        """The reply to a review request, or None when ``path`` is not one."""
        if path not in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            return None
        if method != "POST":
            return 405, _status(405, "MethodNotAllowed", "only create is supported")
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict):
            return 400, _status(400, "BadRequest", "the request body must be a review object")
        if path == TOKEN_REVIEWS:
            return self._token_review(body, spec)
        return self._access_review(body, spec)

    def _token_review(self, body: dict[str, Any], spec: dict[str, Any]) -> tuple[int, Any]:
        token = spec.get("token")
        if not token:
            return 400, _status(
                400, "BadRequest", "token is required for TokenReview in authentication"
            )
        with self._lock:
            self.token_reviews += 1
            identity = self._tokens.get(str(token))
        status: dict[str, Any] = (
            {"authenticated": True, "user": identity.as_user_info()}
            if identity is not None
            else {"user": {}, "error": "invalid bearer token"}
        )
        return 201, _echo(body, spec, status)

    def _access_review(self, body: dict[str, Any], spec: dict[str, Any]) -> tuple[int, Any]:
        user = str(spec.get("user") or "")
        groups = [str(g) for g in spec.get("groups") or []]
        if not user and not groups:
            return 422, _invalid("spec.user", "at least one of user or group must be specified")
        attributes = spec.get("nonResourceAttributes")
        if (attributes is None) == (spec.get("resourceAttributes") is None):
            return 422, _invalid(
                "spec.resourceAttributes",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )
        with self._lock:
            self.access_reviews += 1
            self.access_specs.append(spec)
            grants = list(self._grants)
        if not isinstance(attributes, dict):  # resource attributes: nothing granted here
            return 201, _echo(body, spec, {"allowed": False})
        path, verb = str(attributes.get("path", "")), str(attributes.get("verb", ""))
        for granted in grants:
            if granted.allows(user, groups, path, verb):
                who = f'User "{user}"' if granted.user else f'Group "{granted.group}"'
                reason = f"RBAC: allowed by ClusterRoleBinding of ClusterRole to {who}"
                return 201, _echo(body, spec, {"allowed": True, "reason": reason})
        return 201, _echo(body, spec, {"allowed": False})


def _echo(body: dict[str, Any], spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": body.get("apiVersion", ""),
        "kind": body.get("kind", ""),
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def _invalid(field_path: str, message: str) -> dict[str, Any]:
    status = _status(422, "Invalid", f"{field_path}: Invalid value: {message}")
    status["details"] = {"causes": [{"field": field_path, "message": message}]}
    return status
