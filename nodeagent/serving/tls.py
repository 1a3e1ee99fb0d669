"""The serving certificate and the client CA, as kube-scheduler's secure port has them.

* ``--tls-cert-file``/``--tls-private-key-file`` given: loaded at start (an error names
  the option, exit 2) and reloaded when the files change, as kube-scheduler's dynamic
  serving certificate: a certificate renewed by cert-manager or a Secret update takes
  effect on the next connection, without a restart. A renewal that does not load (a
  key written before its certificate) keeps the last good pair and is logged.
* Not given, with ``metricsAuth kubernetes``: a self-signed ECDSA P-256 certificate is made
  at start (``localhost``, the host name, the loopback addresses and the listen address;
  a year), held in memory only (a ``memfd``; the root filesystem is read-only in the
  pods), and its SHA-256 fingerprint is logged so a scraper can pin it.
* ``--client-ca-file``: client certificates are asked for and, when sent, verified
  against the bundle during the handshake (OpenSSL checks the chain, the validity
  period and the ``clientAuth`` purpose); one that fails ends the handshake. Not
  sending one is allowed here: bearer tokens and open paths need none
  (:mod:`nodeagent.serving.auth` decides per path).

The ``cryptography`` package makes the self-signed certificate, in a child process
(:mod:`nodeagent.serving.selfsigned`); the standard library's ``ssl`` does all the
serving.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.base.errors import ConfigError
from nodeagent.base.logs import FIELDS
from nodeagent.serving.settings import ServingSecurity

log = logging.getLogger("nodeagent.serving")


def fingerprint(der: bytes) -> str:
    """SHA-256 of a DER certificate, as ``openssl x509 -fingerprint -sha256`` prints it."""
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What changes when a file is rewritten (a Secret update swaps a symlink)."""

    identity: tuple[tuple[int, int, int], ...]

    @classmethod
    def of(cls, paths: Iterable[Path]) -> _Stamp:
        stamps = []
        for path in paths:
            try:
                info = path.stat()
            except OSError:
                stamps.append((0, 0, 0))
                continue
            stamps.append((info.st_ino, info.st_mtime_ns, info.st_size))
        return cls(tuple(stamps))


class ServingCertificate:
    """The server's current :class:`ssl.SSLContext` (:meth:`context`), reloaded from the
    files when they change; ``fingerprint`` and ``self_signed`` for the start log."""

    def __init__(self, security: ServingSecurity, *, hosts: Iterable[str] = ()) -> None:
        self._security = security
        self._lock = threading.Lock()
        self._files = [
            p for p in (security.cert, security.key, security.client_ca) if p is not None
        ]
        self.self_signed = security.cert is None
        self._pem: bytes | None = None
        if self.self_signed:
            self._pem = self_signed_pem(hosts)
        self._stamp = _Stamp.of(self._files)
        self._context, self.fingerprint = self._load()

    def context(self) -> ssl.SSLContext:
        """The context for the next connection: rebuilt if a file changed since."""
        if not self._files:
            return self._context
        stamp = _Stamp.of(self._files)
        if stamp == self._stamp:
            return self._context
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context, self.fingerprint = self._load()
                    log.info(
                        "serving certificate reloaded",
                        extra={FIELDS: {"sha256Fingerprint": self.fingerprint}},
                    )
                except ConfigError as exc:
                    log.warning("serving certificate not reloaded, kept the last one: %s", exc)
        return self._context

    def _load(self) -> tuple[ssl.SSLContext, str]:
        security = self._security
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self._pem is not None:
            der = _load_from_memory(context, self._pem)
        else:
            assert security.cert is not None and security.key is not None
            try:
                context.load_cert_chain(security.cert, security.key)
                der = _leaf_der(security.cert.read_text(encoding="ascii"))
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise ConfigError(
                    f"{security.label('cert')} (value {str(security.cert)!r}) and"
                    f" {security.name('key')} (value {str(security.key)!r}): cannot load the"
                    " certificate and key:"
                    f" {exc}; expected PEM files, the key matching the certificate",
                    field=security.name("cert"),
                ) from exc
        if security.client_ca is not None:
            try:
                context.load_verify_locations(cafile=security.client_ca)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"{security.label('client_ca')} (value {str(security.client_ca)!r}):"
                    f" cannot load the CA bundle: {exc}; expected PEM certificates",
                    field=security.name("client_ca"),
                ) from exc
            context.verify_mode = ssl.CERT_OPTIONAL
        return context, fingerprint(der)


def self_signed_pem(hosts: Iterable[str] = ()) -> bytes:
    """A new self-signed serving certificate and its key, PEM, one after the other.

    Made by a short-lived child interpreter (:mod:`nodeagent.serving.selfsigned`) and
    read from its pipe: the ``cryptography`` library it needs would otherwise stay
    mapped in the server for its lifetime (8 MiB of RSS in every agent, measured by
    importing it), for one use at start. The key goes through a pipe and a memfd
    (:func:`_load_from_memory`), never a file."""
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.serving.selfsigned", *hosts],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0 or b"-----BEGIN CERTIFICATE-----" not in done.stdout:
        raise ConfigError(
            "cannot make a self-signed serving certificate:"
            f" {done.stderr.decode(errors='replace').strip()[-500:]}; give tlsCertFile and"
            " tlsPrivateKeyFile (--tls-cert-file, --tls-private-key-file)",
            field="tlsCertFile",
        )
    return done.stdout


def _load_from_memory(context: ssl.SSLContext, pem: bytes) -> bytes:
    """Load a certificate and key that exist only in memory (``ssl`` reads files only):
    through a memfd (Linux), or a private (0600) temporary file, removed at once, where
    there is none. Returns the certificate's DER."""
    try:
        fd = os.memfd_create("nodeagent-serving-certificate", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        with tempfile.NamedTemporaryFile(prefix="nodeagent-serving-") as file:
            file.write(pem)
            file.flush()
            context.load_cert_chain(file.name)
    else:
        with contextlib.closing(os.fdopen(fd, "wb")) as file:
            file.write(pem)
            file.flush()
            context.load_cert_chain(f"/proc/self/fd/{fd}")
    return _leaf_der(pem.decode("ascii"))


_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", flags=re.DOTALL
)


def _leaf_der(pem: str) -> bytes:
    """The DER of the first certificate in ``pem`` (the server's own, before its chain)."""
    match = _PEM_CERTIFICATE.search(pem)
    if match is None:
        raise ValueError("no PEM certificate found")
    return ssl.PEM_cert_to_DER_cert(match.group(0))
