"""Calling one extender over HTTP, as kube-scheduler's ``HTTPExtender`` does.

``POST <urlPrefix without trailing "/">/<verb>`` with ``Content-Type: application/json``;
any status but 200 is an error (``failed filter with extender at URL ..., code 500``), as
is a transport failure or the ``httpTimeout`` (default 5 s) running out; the answer is
decoded as JSON. Connections are pooled and kept alive (urllib3, already the Kubernetes
client's transport), so a busy scheduler does not pay a TCP and TLS handshake per call.

TLS follows kube-scheduler's ``makeTransport``: ``tlsConfig`` (CA, client certificate,
``serverName``, ``insecure``) from files or base64 ``*Data`` fields; ``enableHTTPS``
without a CA means *insecure* (no server verification), as upstream does.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import urllib3

from nodeagent.scheduler.extenders import wire
from nodeagent.scheduler.extenders.settings import ExtenderConfig, TLSConfig

log = logging.getLogger(__name__)


class ExtenderError(Exception):
    """A call failed: transport, timeout, status, undecodable or invalid answer, or the
    extender's own ``Error``. The message is what kube-scheduler would log."""


@contextmanager
def _pem_files(tls: TLSConfig) -> Iterator[tuple[str, str]]:
    """Paths of the client certificate and key; ``*Data`` fields go through a private
    temporary directory, removed as soon as the context has loaded them."""
    if tls.cert_file:
        yield tls.cert_file, tls.key_file
        return
    with tempfile.TemporaryDirectory(prefix="nodeagent-extender-") as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        for path, name in ((cert, "cert_data"), (key, "key_data")):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(tls.pem(name))
        yield str(cert), str(key)


def ssl_context(config: ExtenderConfig) -> ssl.SSLContext:
    """The client TLS context for ``config`` (used only for https:// URLs)."""
    tls = config.tls_config or TLSConfig()
    has_ca = bool(tls.ca_file or tls.ca_data)
    context = ssl.create_default_context(
        cafile=tls.ca_file or None,
        cadata=tls.pem("ca_data").decode() if tls.ca_data else None,
    )
    if tls.insecure or (config.enable_https and not has_ca):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        # Said once here rather than by urllib3 on every call.
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        log.warning(
            "extender %s: HTTPS without verifying the server (%s)",
            config.url_prefix,
            "tlsConfig.insecure" if tls.insecure else "enableHTTPS without a CA",
        )
    if tls.cert_file or tls.cert_data:
        with _pem_files(tls) as (cert, key):
            context.load_cert_chain(cert, key)
    return context


class HTTPExtender:
    """One configured extender: which verbs it offers, and the calls."""

    def __init__(self, config: ExtenderConfig) -> None:
        self.config = config
        self.name = config.url_prefix
        self._base = config.url_prefix.rstrip("/")
        pool: dict[str, Any] = {"maxsize": 4, "retries": False}
        if self._base.startswith("https://"):
            try:
                pool["ssl_context"] = ssl_context(config)
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise ExtenderError(f"extender {self.name}: TLS configuration: {exc}") from exc
            if config.tls_config is not None and config.tls_config.server_name:
                pool["server_hostname"] = config.tls_config.server_name
                pool["assert_hostname"] = config.tls_config.server_name
        self._http = urllib3.PoolManager(**pool)
        self._timeout = urllib3.Timeout(total=config.timeout)
        self.managed = config.managed_resource_names

    @property
    def is_filter(self) -> bool:
        return bool(self.config.filter_verb)

    @property
    def is_prioritizer(self) -> bool:
        return bool(self.config.prioritize_verb)

    @property
    def is_binder(self) -> bool:
        return bool(self.config.bind_verb)

    @property
    def supports_preemption(self) -> bool:
        return bool(self.config.preempt_verb)

    @property
    def ignorable(self) -> bool:
        return self.config.ignorable

    @property
    def weight(self) -> int:
        return self.config.weight

    @property
    def node_cache_capable(self) -> bool:
        return self.config.node_cache_capable

    def send(self, verb: str, message: Any) -> Any:
        """POST ``message`` to ``verb`` and return the decoded answer."""
        url = f"{self._base}/{verb}"
        body = wire.encode(message)
        try:
            response = self._http.request(
                "POST",
                url,
                body=body,
                headers={"Content-Type": "application/json"},
                timeout=self._timeout,
                redirect=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ExtenderError(f"{verb} with extender at URL {url}: {_cause(exc)}") from exc
        if response.status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {url}, code {response.status}")
        try:
            return wire.decode(response.data, f"{verb} answer from {url}")
        except wire.ProtocolError as exc:
            raise ExtenderError(str(exc)) from exc

    def close(self) -> None:
        self._http.clear()


def _cause(exc: urllib3.exceptions.HTTPError) -> str:
    """The useful part of a urllib3 error (a timeout, a refused connection, a TLS failure)."""
    reason = getattr(exc, "reason", None)
    if isinstance(exc, urllib3.exceptions.TimeoutError) or isinstance(
        reason, urllib3.exceptions.TimeoutError
    ):
        return "timeout"
    return str(reason or exc)
