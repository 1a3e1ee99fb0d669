"""Where a server listens and how it protects itself.

Every program's HTTP server (the agent's metrics and probes, the scheduler's, the
extender's) listens on a :class:`ListenAddress` and is protected by the
``--metrics-auth``, ``--tls-cert-file``, ``--tls-private-key-file`` and
``--client-ca-file`` options shared by ``nodeagent run``
(also the configuration keys ``metricsAuth``, ``tlsCertFile``, ``tlsPrivateKeyFile``,
``clientCAFile``), ``nodeagent scheduler`` and ``nodeagent extender``.

One value, :class:`ServingSecurity`, carries them to :mod:`nodeagent.serving.tls` and
:mod:`nodeagent.serving.auth`; :func:`resolve` checks that they go together and names
the option (as its user spells it) when they do not.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

from nodeagent.base.errors import ConfigError

DEFAULT_METRICS_PORT = 9813
"""The port of ``/metrics``, ``/healthz`` and ``/readyz``.

One small HTTP server serves ``/metrics``, ``/healthz`` and ``/readyz`` on
``metricsAddress``; the probes share it so a DaemonSet needs one port and one
Service port, and so a wedged server fails the liveness probe too.

The default port, 9813, was chosen to stay clear of what already listens on a
Kubernetes node. Prometheus' registry of exporter ports (9100-9999) is fully
allocated, so no free number exists there; 9813 belongs to an ocserv VPN exporter that
has no business on a Kubernetes node. The brief's first idea, 9808, is the default
``/healthz`` port of the kubernetes-csi ``livenessprobe`` sidecar, which runs in the
node plugin of nearly every CSI driver, often with ``hostNetwork``; node_exporter
(9100), kubelet (10248/10250/10255), kube-proxy (10249/10256), Calico (9091/9099),
Cilium (9962-9965), NVIDIA DCGM (9400) and node-problem-detector (20256/20257) keep
theirs.
"""

DEFAULT_METRICS_ADDRESS = f"0.0.0.0:{DEFAULT_METRICS_PORT}"


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """A TCP address to listen on. ``host`` is an IP literal (brackets stripped) or a
    name; port 0 asks the kernel for a free port (tests)."""

    host: str
    port: int

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if self.is_ipv6 else f"{self.host}:{self.port}"


_ADDRESS_HELP = (
    "expected HOST:PORT with PORT in 0-65535, e.g. '0.0.0.0:9813', '127.0.0.1:9813', "
    "'[::]:9813' or ':9813' (all interfaces)"
)


def parse_listen_address(text: str) -> ListenAddress:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (all IPv4 interfaces).

    Raises ValueError saying what is allowed.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(_ADDRESS_HELP)
    port = int(port_text)
    if port > 65535:
        raise ValueError(_ADDRESS_HELP)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address; {_ADDRESS_HELP}") from None
    elif ":" in host:
        raise ValueError(f"an IPv6 host must be in brackets; {_ADDRESS_HELP}")
    return ListenAddress(host=host or "0.0.0.0", port=port)


class MetricsAuth(StrEnum):
    KUBERNETES = "kubernetes"
    """HTTPS; every path but the probes (and the extender's verbs) needs a caller the
    API server authenticates (TokenReview or a client certificate) and authorizes
    (SubjectAccessReview on the path, verb get), as kube-scheduler's secure port."""
    NONE = "none"
    """No authentication: plain HTTP (HTTPS when a certificate is given). For standalone
    runs, bare metal behind a firewall and local debugging."""


FLAG_NAMES: Mapping[str, str] = MappingProxyType(
    {
        "auth": "--metrics-auth",
        "cert": "--tls-cert-file",
        "key": "--tls-private-key-file",
        "client_ca": "--client-ca-file",
    }
)
"""How the command-line options are spelled in messages."""

CONFIG_NAMES: Mapping[str, str] = MappingProxyType(
    {
        "auth": "metricsAuth",
        "cert": "tlsCertFile",
        "key": "tlsPrivateKeyFile",
        "client_ca": "clientCAFile",
    }
)
"""How the agent's configuration keys are spelled in messages."""


@dataclass(frozen=True, slots=True)
class ServingSecurity:
    """What protects one server. ``cert``/``key`` both or neither; ``client_ca`` needs TLS
    (a certificate, or ``kubernetes``, which makes one)."""

    auth: MetricsAuth
    cert: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None
    config_keys: bool = field(default=False, compare=False)
    """Errors name the agent's configuration keys (``tlsCertFile``), not flags."""

    def name(self, option: str) -> str:
        """``option`` (auth, cert, key, client_ca) as its user spells it."""
        return (CONFIG_NAMES if self.config_keys else FLAG_NAMES)[option]

    def label(self, option: str) -> str:
        """The option as an error message names it."""
        name = self.name(option)
        return f"config field {name!r}" if self.config_keys else name

    @property
    def tls(self) -> bool:
        """HTTPS: always with ``kubernetes``; with ``none`` when a certificate is given."""
        return self.auth is MetricsAuth.KUBERNETES or self.cert is not None


def resolve(
    auth: MetricsAuth,
    cert: str | Path | None,
    key: str | Path | None,
    client_ca: str | Path | None,
    *,
    config_keys: bool = False,
) -> ServingSecurity:
    """The options, checked together. Raises ConfigError (exit 2) naming the option."""
    cert_path = Path(cert) if cert else None
    key_path = Path(key) if key else None
    ca_path = Path(client_ca) if client_ca else None
    security = ServingSecurity(auth, cert_path, key_path, ca_path, config_keys)
    if (cert_path is None) != (key_path is None):
        given, missing = ("cert", "key") if cert_path is not None else ("key", "cert")
        raise ConfigError(
            f"{security.label(given)} (value {str(cert_path or key_path)!r}): needs"
            f" {security.name(missing)} too; set both, or neither for a self-signed"
            " certificate",
            field=security.name(given),
        )
    if ca_path is not None and not security.tls:
        raise ConfigError(
            f"{security.label('client_ca')} (value {str(ca_path)!r}): client certificates"
            f" need HTTPS; set {security.name('cert')} and {security.name('key')}, or"
            f" {security.name('auth')} kubernetes",
            field=security.name("client_ca"),
        )
    return security


def add_flags(parser: argparse.ArgumentParser, *, what: str) -> None:
    """The four options, for ``scheduler`` and ``extender`` (``run`` has them as
    configuration fields). ``what`` names the served paths in the help."""
    group = parser.add_argument_group("serving security (docs/security.md)")
    group.add_argument(
        "--metrics-auth",
        type=MetricsAuth,
        choices=list(MetricsAuth),
        default=MetricsAuth.KUBERNETES,
        help=f"kubernetes (default): HTTPS, and {what} need a token or client certificate"
        " the API server authenticates and authorizes (TokenReview, SubjectAccessReview);"
        " /healthz, /readyz and /livez stay open. none: no authentication, plain HTTP"
        " unless a certificate is given",
    )
    group.add_argument(
        "--tls-cert-file",
        type=Path,
        metavar="FILE",
        help="serving certificate (PEM, chain allowed); default with kubernetes: a"
        " self-signed one made at start, its SHA-256 fingerprint logged",
    )
    group.add_argument("--tls-private-key-file", type=Path, metavar="FILE")
    group.add_argument(
        "--client-ca-file",
        type=Path,
        metavar="FILE",
        help="CA bundle (PEM) verifying client certificates (user = CN, groups = O)",
    )


def from_flags(args: argparse.Namespace) -> ServingSecurity:
    return resolve(
        MetricsAuth(args.metrics_auth),
        args.tls_cert_file,
        args.tls_private_key_file,
        args.client_ca_file,
    )
