"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's
``tools/leaderelection``: one active scheduler, the others standing by.

The decision is pure (:func:`decide`): given the Lease as last read, when its record
last *changed* by this replica's own monotonic clock, the identity and ``now``, it says
whether to take the lease, renew it, or wait. Expiry is judged on the local observation
time, never on the timestamps in the object, so clock skew between replicas cannot
make two of them leaders. The :class:`LeaderElector` runs it every ``retryPeriod``:

* a standby takes the lease once the holder has not changed it for ``leaseDuration``
  (a killed leader is replaced within ``leaseDuration + retryPeriod``);
* the leader renews every ``retryPeriod``; a write that fails with 409 means another
  replica won; if no renewal succeeded for ``renewDeadline`` the leader has lost, even
  without knowing who won, and must stop at once (:meth:`LeaderElector.is_leader` turns
  False before any other replica can take over, since renewDeadline < leaseDuration);
* on a clean stop the leader releases the lease (empty holder, 1 s duration), so a
  standby takes over at its next attempt.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from nodeagent.base import errors
from nodeagent.kube import client

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaderElectionSettings:
    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_name: str = "nodeagent-scheduler"
    resource_namespace: str = "kube-system"


def default_identity() -> str:
    """Host name plus a random suffix, so two processes on one host never share it."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str = ""
    lease_duration: float = 0.0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: client.KubeObject) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            str(spec.get("holderIdentity") or ""),
            float(spec.get("leaseDurationSeconds") or 0),
            spec.get("acquireTime"),
            spec.get("renewTime"),
            int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


class Action(StrEnum):
    TAKE = "take"
    RENEW = "renew"
    WAIT = "wait"


def decide(
    record: LeaseRecord | None,
    observed_at: float,
    identity: str,
    now: float,
    lease_duration: float,
) -> Action:
    """What to do with the Lease ``record`` (None: there is none), last seen changing at
    ``observed_at`` (monotonic seconds)."""
    if record is None or not record.holder:
        return Action.TAKE
    if record.holder == identity:
        return Action.RENEW
    # the holder's own duration governs, as client-go reads it from the record
    duration = record.lease_duration or lease_duration
    return Action.TAKE if observed_at + duration < now else Action.WAIT


def micro_time(wall: float) -> str:
    """A ``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: client.ClusterClient,
        settings: LeaderElectionSettings,
        *,
        identity: str,
        now: Callable[[], float],
        wall: Callable[[], float],
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
    ) -> None:
        self._kube = kube
        self.settings = settings
        self.identity = identity
        self._now = now
        self._wall = wall
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._lock = threading.Lock()
        self._observed: LeaseRecord | None = None
        self._observed_rv = ""
        self._observed_at = 0.0
        self._leading = False
        self._renewed_at = 0.0
        self._lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error = ""

    # --- state --------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """True only while leading *and* within renewDeadline of the last renewal: a
        leader cut off from the API stops trusting itself before anyone can take over."""
        with self._lock:
            return self._leading and self._now() - self._renewed_at < self.settings.renew_deadline

    @property
    def lost(self) -> bool:
        """It led and lost the lease (the process should exit)."""
        with self._lock:
            return self._lost

    @property
    def healthy(self) -> bool:
        """A standby that reaches the API, or a leader within its renew deadline."""
        with self._lock:
            return not self._lost and not self.last_error

    @property
    def holder(self) -> str:
        with self._lock:
            return self._observed.holder if self._observed is not None else ""

    # --- one attempt --------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One round against the API; True if this replica holds the lease after it."""
        s = self.settings
        now = self._now()
        try:
            lease: client.KubeObject | None = self._kube.get_lease(
                s.resource_namespace, s.resource_name
            )
        except errors.NotFound:
            lease = None
        except errors.KubeAPIError as exc:
            self.last_error = str(exc)
            return False
        record = None if lease is None else LeaseRecord.from_lease(lease)
        rv = "" if lease is None else str((lease.get("metadata") or {}).get("resourceVersion"))
        with self._lock:
            if rv != self._observed_rv or self._observed_at == 0.0:
                # any write (a renewal too) gives a new resourceVersion: the holder lives
                self._observed, self._observed_rv, self._observed_at = record, rv, now
            observed_at = self._observed_at
        action = decide(record, observed_at, self.identity, now, s.lease_duration)
        if action is Action.WAIT:
            self.last_error = ""
            return False
        stamp = micro_time(self._wall())
        if action is Action.TAKE or record is None:
            transitions = 0 if record is None else record.transitions + 1
            new = LeaseRecord(self.identity, s.lease_duration, stamp, stamp, transitions)
        else:
            new = dataclasses.replace(record, renew_time=stamp, lease_duration=s.lease_duration)
        metadata: dict[str, Any] = {"name": s.resource_name, "namespace": s.resource_namespace}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": new.to_spec(),
        }
        try:
            if lease is None:
                written = self._kube.create_lease(s.resource_namespace, body)
            else:
                metadata["resourceVersion"] = rv
                written = self._kube.replace_lease(s.resource_namespace, s.resource_name, body)
        except errors.Conflict:
            self.last_error = ""
            return False  # someone else wrote first: they lead
        except errors.KubeAPIError as exc:
            self.last_error = str(exc)
            return False
        self.last_error = ""
        with self._lock:
            self._observed = LeaseRecord.from_lease(written)
            self._observed_rv = str((written.get("metadata") or {}).get("resourceVersion"))
            self._observed_at = now
            self._renewed_at = now
        return True

    # --- the loop -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def run(self) -> None:
        while not self._stop.is_set():
            wait = self.step()
            if wait is None:
                return  # lost: the process exits
            self._stop.wait(wait)

    def step(self) -> float | None:
        """One round of the loop: try to acquire or renew, start or stop leading. Returns
        the seconds to wait before the next round, or None once leadership was lost (the
        loop ends). :meth:`run` calls it; the simulation calls it on its own clock."""
        s = self.settings
        held = self.try_acquire_or_renew()
        with self._lock:
            was_leading = self._leading
            if held and not was_leading:
                self._leading = True
        if held and not was_leading:
            log.info("became leader (lease %s/%s)", s.resource_namespace, s.resource_name)
            self._on_started()
        if was_leading and not self.is_leader():
            # renewals kept failing (or someone else holds it): stop at once
            with self._lock:
                self._leading = False
                self._lost = True
            log.error("leader election lost (%s)", self.last_error or "lease taken")
            self._on_stopped()
            return None
        if was_leading and not held:
            return min(s.retry_period, 1.0) / 2  # retry quickly within the renew deadline
        return s.retry_period

    def stop(self, *, release: bool = True) -> None:
        """Stop the loop; with ``release`` and while leading, give the lease up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.settings.retry_period + 5)
        leading = self.is_leader()
        with self._lock:
            self._leading = False
        if release and leading:
            self._release()

    def _release(self) -> None:
        s = self.settings
        try:
            lease = self._kube.get_lease(s.resource_namespace, s.resource_name)
            record = LeaseRecord.from_lease(lease)
            if record.holder != self.identity:
                return
            released = dataclasses.replace(record, holder="", lease_duration=1.0)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": s.resource_name,
                    "namespace": s.resource_namespace,
                    "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion"),
                },
                "spec": released.to_spec(),
            }
            self._kube.replace_lease(s.resource_namespace, s.resource_name, body)
            log.info("released lease %s/%s", s.resource_namespace, s.resource_name)
        except errors.KubeAPIError as exc:
            log.warning("could not release the lease: %s", exc)
