"""Delegated authentication and authorization of a server's callers: kube-scheduler's
secure port (``DelegatingAuthenticationOptions``/``DelegatingAuthorizationOptions``) and
controller-runtime's ``WithAuthenticationAndAuthorization`` metrics filter, as a WSGI
middleware in front of every nodeagent server.

Per request, by path (the same ``PATH_INFO`` the application routes on, so the gate and
the router can never disagree about which page is asked for):

1. ``/healthz``, ``/readyz``, ``/livez``: open to anyone (kubelet probes carry no
   credentials; kube's ``--authorization-always-allow-paths``).
2. Certificate paths (the extender's ``/filter`` and ``/prioritize``): with a client CA,
   a client certificate that CA signed is required (401 without); without one they are
   open, since kube-scheduler's extender client sends no credentials but its
   ``tlsConfig`` client certificate.
3. Everything else, with ``metricsAuth kubernetes``:

   * **authentication**, in kube's order: a verified client certificate (user = its CN,
     groups = its O values, as kube's x509 authenticator), else ``Authorization: Bearer``
     checked with a TokenReview. Neither, or a token the API server rejects: **401**.
   * **authorization**: a SubjectAccessReview with the user, groups, uid and extra and
     ``nonResourceAttributes {path, verb}`` (the verb is the lowercased HTTP method:
     ``get`` for a scrape). Not allowed: **403**.
   * **fail closed**: a review the API server does not answer (after the review client's
     short retries) is 401 (token review) or 403 (access review), never the page.

Both reviews are cached for :data:`REVIEW_TTL` seconds (kube's delegating defaults: 10 s
for tokens, allowed and denied decisions alike), keyed by a SHA-256 of the token and by
the whole review request; concurrent misses for one key wait on a single review
(kube's cached token authenticator does the same), so a scrape storm costs one review
per distinct caller per 10 s. Failures to reach the API are not cached: the next
request asks again. The caches are bounded (:data:`MAX_CACHED_REVIEWS`, least recently
used out first), since tokens are chosen by callers.

The reviews go through :class:`nodeagent.kube.http.HTTPKubeClient` like every other API
call (one retry loop, one error vocabulary), on a connection of their own
(:func:`review_client`): callers choose how many reviews a server asks for, and they must
not spend the budget the agent needs for its evictions and taints.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

import kubernetes.client
import prometheus_client

from nodeagent.base import errors
from nodeagent.kube import client, http, retry
from nodeagent.serving.wsgi import StartResponse, WSGIApp, respond

log = logging.getLogger("nodeagent.serving")

ALWAYS_ALLOWED_PATHS = frozenset({"/healthz", "/readyz", "/livez"})
"""Answered without credentials (kube's ``--authorization-always-allow-paths``)."""

REVIEW_TTL = 10.0
"""Seconds a review's answer is reused (kube's ``--authentication-token-webhook-cache-ttl``
and ``--authorization-webhook-cache-{authorized,unauthorized}-ttl`` for delegation)."""

MAX_CACHED_REVIEWS = 4096
"""Answers kept per cache; the least recently used goes first."""

REVIEW_RETRY = retry.RetryPolicy(attempts=2, initial_delay=0.1, max_delay=0.5)
"""One retry: a review holds up a scrape, whose own timeout is 10 s by default."""

REVIEW_TIMEOUT = (1.0, 3.0)
"""(connect, read) seconds per review attempt: at most about 8.5 s with the retry."""

REVIEW_QPS, REVIEW_BURST = 200.0, 400
"""The review connection's own budget (kube's delegating clients use the same)."""

PEER_CERTIFICATE = "nodeagent.peer_certificate"
"""The WSGI environ key under which the server puts the verified client certificate
(:meth:`ssl.SSLSocket.getpeercert`'s dict), absent without one."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def review_client(
    configuration: kubernetes.client.Configuration,
    *,
    observer: client.ApiCallObserver | None = None,
) -> http.HTTPKubeClient:
    """The API connection the reviews go through (see the module docstring)."""
    return http.HTTPKubeClient.connect(
        configuration,
        qps=REVIEW_QPS,
        burst=REVIEW_BURST,
        retry_policy=REVIEW_RETRY,
        observer=observer,
        timeout=REVIEW_TIMEOUT,
        pool_size=8,
    )


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated caller, as kube's ``user.Info``."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Sorted (key, values) pairs: hashable, so a user is part of a cache key."""

    @classmethod
    def from_review(cls, user: Mapping[str, Any]) -> User:
        extra = user.get("extra") or {}
        return cls(
            name=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(
                sorted((str(k), tuple(str(v) for v in values or ())) for k, values in extra.items())
            ),
        )

    @classmethod
    def from_certificate(cls, certificate: Mapping[str, Any]) -> User | None:
        """CN and O values of a verified certificate's subject (kube's
        ``CommonNameUserConversion``); None without a CN."""
        subject: Iterable[Iterable[tuple[str, str]]] = certificate.get("subject") or ()
        attributes = [pair for rdn in subject for pair in rdn]
        names = [value for key, value in attributes if key == "commonName"]
        if not names or not names[0]:
            return None
        groups = tuple(value for key, value in attributes if key == "organizationName")
        return cls(name=names[0], groups=groups)


class Outcome(Enum):
    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    reason: str
    user: User | None = None


class ReviewCache(Generic[K, V]):
    """Answers by key for ``ttl`` seconds, bounded, with one review in flight per key
    (later callers wait for it). A review that raises is not cached: every waiter gets
    the error, and the next call reviews again."""

    def __init__(
        self,
        ttl: float = REVIEW_TTL,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_CACHED_REVIEWS,
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._max = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._pending: dict[K, Future[V]] = {}
        self._lock = threading.Lock()
        self.reviews = 0
        """Reviews actually made (misses), for tests and the docs' figures."""

    def get(self, key: K, review: Callable[[], V]) -> V:
        with self._lock:
            now = self._clock()
            entry = self._entries.get(key)
            if entry is not None and entry[0] > now:
                self._entries.move_to_end(key)
                return entry[1]
            pending = self._pending.get(key)
            owner = pending is None
            if pending is None:
                pending = self._pending[key] = Future()
                self.reviews += 1
        if not owner:
            return pending.result()
        try:
            value = review()
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            self._entries[key] = (self._clock() + self._ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
            del self._pending[key]
        pending.set_result(value)
        return value


class DelegatedAuth:
    """Authentication and authorization of one request, delegated to the API server."""

    def __init__(
        self,
        reviews: client.AccessReviewClient,
        *,
        ttl: float = REVIEW_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reviews = reviews
        self.tokens: ReviewCache[str, User | None] = ReviewCache(ttl, clock=clock)
        self.decisions: ReviewCache[tuple[User, str, str], tuple[bool, str]] = ReviewCache(
            ttl, clock=clock
        )

    def verdict(self, environ: Mapping[str, Any]) -> Verdict:
        path = str(environ.get("PATH_INFO") or "/")
        verb = str(environ.get("REQUEST_METHOD") or "GET").lower()
        user = self._authenticate(environ)
        if isinstance(user, Verdict):
            return user
        try:
            allowed, reason = self.decisions.get(
                (user, path, verb), lambda: self._review_access(user, path, verb)
            )
        except errors.KubeAPIError as exc:
            log.warning("access review failed, request refused: %s", exc)
            return Verdict(Outcome.FORBIDDEN, "authorization review failed", user)
        if not allowed:
            detail = f": {reason}" if reason else ""
            return Verdict(
                Outcome.FORBIDDEN,
                f'user "{user.name}" cannot {verb} path "{path}"{detail}',
                user,
            )
        return Verdict(Outcome.ALLOWED, reason, user)

    def _authenticate(self, environ: Mapping[str, Any]) -> User | Verdict:
        certificate = environ.get(PEER_CERTIFICATE)
        if certificate:
            user = User.from_certificate(certificate)
            if user is not None:
                return user
        scheme, _, token = str(environ.get("HTTP_AUTHORIZATION") or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Verdict(
                Outcome.UNAUTHENTICATED,
                "no credentials: a bearer token or a client certificate is required",
            )
        key = hashlib.sha256(token.encode()).hexdigest()
        try:
            found = self.tokens.get(key, lambda: self._review_token(token))
        except errors.KubeAPIError as exc:
            log.warning("token review failed, request refused: %s", exc)
            return Verdict(Outcome.UNAUTHENTICATED, "token review failed")
        if found is None:
            return Verdict(Outcome.UNAUTHENTICATED, "invalid bearer token")
        return found

    def _review_token(self, token: str) -> User | None:
        status = self._reviews.create_token_review(token).get("status") or {}
        if not status.get("authenticated"):
            return None
        return User.from_review(status.get("user") or {})

    def _review_access(self, user: User, path: str, verb: str) -> tuple[bool, str]:
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {key: list(values) for key, values in user.extra}
        status = self._reviews.create_subject_access_review(spec).get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        return allowed, str(status.get("reason") or status.get("evaluationError") or "")


DENIED_METRIC = "nodeagent_http_requests_denied"
"""Requests the gate refused, by ``code`` (401, 403): a rising count is a scraper that
lost its grant or someone trying the port."""


class Gate:
    """The WSGI middleware: which paths need what (see the module docstring). With a
    ``registry``, refusals are counted there (:data:`DENIED_METRIC`)."""

    def __init__(
        self,
        app: WSGIApp,
        *,
        delegated: DelegatedAuth | None,
        certificate_paths: Iterable[str] = (),
        require_client_certificate: bool = False,
        registry: prometheus_client.CollectorRegistry | None = None,
    ) -> None:
        self._app = app
        self._delegated = delegated
        self._certificate_paths = frozenset(certificate_paths)
        self._require_certificate = require_client_certificate
        self._denied = (
            prometheus_client.Counter(
                DENIED_METRIC,
                "Requests refused by the serving gate: 401 (no valid credentials), 403 (not"
                " authorized, or the API server could not be asked).",
                ["code"],
                registry=registry,
            )
            if registry is not None
            else None
        )
        if self._denied is not None:
            for outcome in (Outcome.UNAUTHENTICATED, Outcome.FORBIDDEN):
                self._denied.labels(str(outcome.value))

    def verdict(self, environ: Mapping[str, Any]) -> Verdict:
        path = str(environ.get("PATH_INFO") or "/")
        if path in ALWAYS_ALLOWED_PATHS:
            return Verdict(Outcome.ALLOWED, "always allowed")
        if path in self._certificate_paths:
            if not self._require_certificate:
                return Verdict(Outcome.ALLOWED, "open: no client CA configured")
            certificate = environ.get(PEER_CERTIFICATE)
            user = User.from_certificate(certificate) if certificate else None
            if user is None:
                return Verdict(
                    Outcome.UNAUTHENTICATED,
                    "a client certificate signed by the client CA is required",
                )
            return Verdict(Outcome.ALLOWED, "client certificate", user)
        if self._delegated is None:
            return Verdict(Outcome.ALLOWED, "open: metricsAuth none")
        return self._delegated.verdict(environ)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        verdict = self.verdict(environ)
        if verdict.outcome is Outcome.ALLOWED:
            return self._app(environ, start_response)
        if self._denied is not None:
            self._denied.labels(str(verdict.outcome.value)).inc()
        log.debug(
            "refused %s %s from %s: %s",
            environ.get("REQUEST_METHOD"),
            environ.get("PATH_INFO"),
            environ.get("REMOTE_ADDR"),
            verdict.reason,
        )
        if verdict.outcome is Outcome.UNAUTHENTICATED:
            return respond(start_response, "401 Unauthorized", f"Unauthorized: {verdict.reason}")
        return respond(start_response, "403 Forbidden", f"Forbidden: {verdict.reason}")
