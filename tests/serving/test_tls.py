"""The serving certificate: a self-signed one made at start (names, validity, the
fingerprint the log gives is the one served, nothing written to disk), and a given one
reloaded when its files change, keeping the last good pair when the new one is broken."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509

from nodeagent.serving import selfsigned
from nodeagent.serving import tls as serving_tls
from nodeagent.serving.settings import MetricsAuth, resolve
from tests.extenders import tls


def served_certificate(context: ssl.SSLContext) -> bytes:
    """The DER certificate a client receives from a server using ``context``."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        client = ssl.create_default_context()
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", port)) as raw:
            accepted, _ = listener.accept()
            server = threading.Thread(
                target=lambda: context.wrap_socket(accepted, server_side=True).close()
            )
            server.start()
            with client.wrap_socket(raw) as secure:
                der = secure.getpeercert(binary_form=True)
            server.join(5)
            accepted.close()
    assert der is not None
    return der


def colon_hex(der: bytes) -> str:
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, 64, 2))


def test_a_self_signed_certificate_names_this_host_and_is_the_one_logged() -> None:
    security = resolve(MetricsAuth.KUBERNETES, None, None, None)
    certificate = serving_tls.ServingCertificate(security, hosts=("10.1.2.3", "0.0.0.0"))
    assert certificate.self_signed
    der = served_certificate(certificate.context())
    assert colon_hex(der) == certificate.fingerprint
    parsed = x509.load_der_x509_certificate(der)
    names = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", socket.gethostname()} <= set(names.get_values_for_type(x509.DNSName))
    addresses = set(names.get_values_for_type(x509.IPAddress))
    assert {ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.1.2.3")} <= addresses
    assert ipaddress.ip_address("0.0.0.0") not in addresses
    lifetime = parsed.not_valid_after_utc - parsed.not_valid_before_utc
    assert lifetime >= selfsigned.VALIDITY
    # a second server gets a certificate of its own
    assert serving_tls.ServingCertificate(security).fingerprint != certificate.fingerprint


def test_the_self_signed_key_never_touches_the_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))  # the child's
    monkeypatch.chdir(scratch)
    certificate = serving_tls.ServingCertificate(resolve(MetricsAuth.KUBERNETES, None, None, None))
    assert certificate.fingerprint
    assert list(scratch.iterdir()) == []


def test_the_server_never_loads_the_cryptography_library() -> None:
    """It is made in a child: the long-running process keeps 8 MiB less."""
    probe = (
        "import sys\n"
        "from nodeagent.serving import settings, tls\n"
        "security = settings.resolve(settings.MetricsAuth.KUBERNETES, None, None, None)\n"
        "assert tls.ServingCertificate(security).self_signed\n"
        "print('cryptography' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"


@contextmanager
def given(tmp_path: Path) -> Iterator[tuple[serving_tls.ServingCertificate, Path, Path]]:
    pki = tls.make_pki(tmp_path / "one")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    yield serving_tls.ServingCertificate(resolve(MetricsAuth.NONE, cert, key, None)), cert, key


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    with given(tmp_path) as (certificate, cert, key):
        first = certificate.fingerprint
        assert colon_hex(served_certificate(certificate.context())) == first
        renewed = tls.make_pki(tmp_path / "two")
        # as a Secret update does: new files swapped in
        shutil.copy(renewed.server_cert, tmp_path / "new.crt")
        shutil.copy(renewed.server_key, tmp_path / "new.key")
        os.replace(tmp_path / "new.key", key)
        os.replace(tmp_path / "new.crt", cert)
        served = colon_hex(served_certificate(certificate.context()))
        assert served == certificate.fingerprint != first


def test_a_broken_renewal_keeps_the_last_good_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with given(tmp_path) as (certificate, cert, _):
        first = certificate.fingerprint
        cert.write_text("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
        assert colon_hex(served_certificate(certificate.context())) == first
        assert "serving certificate not reloaded" in caplog.text


def test_the_fingerprint_is_the_leafs_when_the_file_holds_a_chain(tmp_path: Path) -> None:
    pki = tls.make_pki(tmp_path / "pki")
    chain = tmp_path / "chain.crt"
    chain.write_bytes(pki.server_cert.read_bytes() + pki.ca.read_bytes())
    certificate = serving_tls.ServingCertificate(
        resolve(MetricsAuth.NONE, chain, pki.server_key, None)
    )
    leaf = ssl.PEM_cert_to_DER_cert(pki.server_cert.read_text())
    assert certificate.fingerprint == colon_hex(leaf)
