"""Where the API server is and how to trust it, as plain values.

A client Configuration holds the same (and much more), but it neither pickles nor
comes without importing the whole ``kubernetes`` package (a fifth of a second). The
scheduler's binding process starts fresh, gets an :class:`Address` and the current
credentials from the scheduler, and imports neither. Both of the project's
hand-rolled HTTP clients (:class:`~nodeagent.kube.http.KeepAlive`,
:mod:`~nodeagent.kube.pipeline`) build their TLS context here, from one reading of the
Configuration (:func:`nodeagent.kube.http.address`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int
    https: bool
    prefix: str = ""
    """The path the server's URL carries (a proxy's subpath, usually empty)."""
    ca_file: str | None = None
    ca_data: str | None = None
    """PEM (or DER as base64) of the CA certificates, when not in ``ca_file``."""
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    """False: the server's certificate is not checked at all (insecure-skip-tls-verify)."""
    check_hostname: bool = True
    server_hostname: str | None = None
    """The name the certificate must carry, when not ``host`` (tls-server-name)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Sent with every request (User-Agent, the client's default headers)."""

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    def tls(self) -> ssl.SSLContext | None:
        """The TLS context (CA, client certificate, verification), None over plain HTTP."""
        if not self.https:
            return None
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif not self.check_hostname:
            context.check_hostname = False
        return context
