"""Makes a self-signed serving certificate: ``python -m nodeagent.serving.selfsigned
[HOST...]`` writes the certificate and its key, PEM, to stdout.

Run as a child process by :func:`nodeagent.serving.tls.self_signed_pem`, so that the
``cryptography`` library stays out of the long-running servers. The certificate is
what kube-scheduler makes for itself without ``--tls-cert-file``: ECDSA P-256, for
``localhost``, the host name, the loopback addresses and ``HOST...`` (IP addresses or
names; wildcards left out), valid a year, usable only to serve.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import sys
from collections.abc import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


def generate(hosts: Iterable[str] = ()) -> bytes:
    """A new self-signed serving certificate and its key, PEM, one after the other."""
    key = ec.generate_private_key(ec.SECP256R1())
    hostname = socket.gethostname()
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    addresses = {"127.0.0.1", "::1"}
    for host in (hostname, *hosts):
        try:
            addresses.add(str(ipaddress.ip_address(host)))
        except ValueError:
            if host and x509.DNSName(host) not in names:
                names.append(x509.DNSName(host))
    addresses -= {"0.0.0.0", "::"}
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(addresses)]
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"{hostname}@{int(now.timestamp())}")]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


if __name__ == "__main__":
    sys.stdout.buffer.write(generate(sys.argv[1:]))
