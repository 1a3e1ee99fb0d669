"""A real Kubernetes control plane on loopback for tests and benchmarks: etcd, kube-apiserver
and kube-controller-manager built by ``build.sh`` from the pinned k8s.io/kubernetes release,
started as child processes with certificates generated for the session, stopped by PID.

The apiserver is configured as a kubeadm-built cluster's is where it matters to this
project: Node and RBAC authorization, NodeRestriction on top of the default admission
plugins (ValidatingAdmissionPolicy among them), service-account tokens issued by the
TokenRequest API, privileged pods allowed (the agent's DaemonSet is one). The
controller-manager runs only the controllers a cluster without kubelets can keep honest:
service accounts (pods need their namespace's ``default``), namespaces, the garbage
collector, disruption budgets, the PV controller (it completes the bindings the
schedulers' VolumeBinding starts) and the resourceclaim controller (it makes pods' claims
from their ResourceClaimTemplates). Never the node lifecycle controller: nodes here are
objects without kubelets, and it would taint every one of them unreachable.

Tests reach it three ways: :class:`Rest` (plain JSON requests as any user),
kubeconfig files (admin, per component, per service account or node), and ``kubectl``
for applying manifests as an operator does.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml

from tests.controlplane import pki

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

CONTROLLERS = (
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "disruption-controller",
    "persistentvolume-binder-controller",
    "resourceclaim-controller",
)
"""kube-controller-manager's controllers started here (see the module docstring)."""

ADMISSION_PLUGINS = ("NodeRestriction",)
"""Enabled on top of kube-apiserver's defaults, as kubeadm does."""

SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
STARTUP_TIMEOUT = 120.0


def pinned_version() -> str:
    """The k8s.io/kubernetes release go.mod pins (``v1.36.3``)."""
    for line in (HERE / "go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "k8s.io/kubernetes":
            return words[1]
    raise AssertionError("go.mod requires no k8s.io/kubernetes")


def binaries_directory() -> Path:
    """Where build.sh puts the binaries (the same rule as the script's)."""
    override = os.environ.get("NODEAGENT_CONTROLPLANE_DIR")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "nodeagent" / "controlplane" / pinned_version()


def unavailable() -> str | None:
    """Why the real control plane cannot run here, in one line; None when it can."""
    directory = binaries_directory()
    missing = [name for name in BINARIES if not os.access(directory / name, os.X_OK)]
    if not missing:
        return None
    if shutil.which("go") is None:
        return "no Go toolchain: the real control plane cannot be built (tests/controlplane)"
    return (
        f"control plane not built in {directory}: run {BUILD_SCRIPT.relative_to(HERE.parents[1])}"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


class Rest:
    """JSON requests to the apiserver as one user (a client certificate or a bearer
    token): what the tests need to create, read and change objects, with the status
    code kept (a 403 or a 429 is often the point)."""

    def __init__(
        self,
        url: str,
        ca: Path,
        *,
        client: pki.KeyPair | None = None,
        token: str | None = None,
    ) -> None:
        self.url = url
        self._headers = {"Accept": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._pool = urllib3.PoolManager(
            cert_reqs="CERT_REQUIRED",
            ca_certs=str(ca),
            cert_file=str(client.certificate) if client else None,
            key_file=str(client.key) if client else None,
            maxsize=8,
            timeout=urllib3.Timeout(connect=5.0, read=60.0),
            retries=False,
        )

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        response = self._pool.request(method, url, body=data, headers=headers)
        text = response.data.decode() if response.data else ""
        try:
            parsed: Any = json.loads(text) if text else None
        except json.JSONDecodeError:
            parsed = text
        return response.status, parsed

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """:meth:`request`, raising :class:`ApiError` on anything but 2xx."""
        status, parsed = self.request(method, path, body, **kwargs)
        if not 200 <= status < 300:
            raise ApiError(status, parsed)
        return parsed

    def get(self, path: str, **query: str) -> Any:
        return self.call("GET", path, query=query or None)

    def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.call("POST", path, body)

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Any:
        return self.call("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        return self.call("DELETE", path, body)

    def close(self) -> None:
        self._pool.clear()


@dataclass
class _Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class StartupTimes:
    etcd: float = 0.0
    apiserver: float = 0.0
    controller_manager: float = 0.0

    @property
    def total(self) -> float:
        return self.etcd + self.apiserver + self.controller_manager

    def __str__(self) -> str:
        return (
            f"{self.total:.1f} s (etcd {self.etcd:.1f} s, kube-apiserver {self.apiserver:.1f} s,"
            f" kube-controller-manager {self.controller_manager:.1f} s)"
        )


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager under ``root`` (certificates,
    kubeconfigs, data and logs). :meth:`start`, then :meth:`stop` (also on failure)."""

    root: Path
    binaries: Path = field(default_factory=binaries_directory)
    controllers: Sequence[str] = CONTROLLERS
    apiserver_flags: Sequence[str] = ()
    controller_manager_flags: Sequence[str] = ()
    times: StartupTimes = field(default_factory=StartupTimes)
    _components: list[_Component] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pki_dir = self.root / "pki"
        self.logs = self.root / "logs"
        self.kubeconfigs = self.root / "kubeconfigs"
        for directory in (self.pki_dir, self.logs, self.kubeconfigs):
            directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.ca = pki.CertificateAuthority(self.pki_dir)
        self.serving = self.ca.issue(
            "apiserver",
            "kube-apiserver",
            hosts=(
                "127.0.0.1",
                "localhost",
                pki.SERVICE_IP,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        self.service_account_key = pki.service_account_keys(self.pki_dir)
        self.admin_credentials = self.ca.issue("admin", "admin", organizations=("system:masters",))
        self.admin_kubeconfig = self.write_kubeconfig("admin", client=self.admin_credentials)
        self.controller_manager_kubeconfig = self.write_kubeconfig(
            "kube-controller-manager",
            client=self.ca.issue("kube-controller-manager", "system:kube-controller-manager"),
        )
        self.scheduler_kubeconfig = self.write_kubeconfig(
            "kube-scheduler", client=self.ca.issue("kube-scheduler", "system:kube-scheduler")
        )
        self.admin = Rest(self.url, self.ca.certificate, client=self.admin_credentials)
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, argv: Sequence[str]) -> _Component:
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        component = _Component(name, process, log)
        self._components.append(component)
        return component

    def _wait(self, component: _Component, ready: Any, timeout: float = STARTUP_TIMEOUT) -> float:
        started = time.monotonic()
        deadline = started + timeout
        while not ready():
            if component.process.poll() is not None:
                raise RuntimeError(
                    f"{component.name} exited with {component.process.returncode}:\n"
                    + component.tail()
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{component.name} not ready within {timeout:.0f} s:\n" + component.tail()
                )
            time.sleep(0.1)
        return time.monotonic() - started

    def _start_etcd(self) -> None:
        self.etcd_url = f"http://127.0.0.1:{free_port()}"
        started = time.monotonic()
        etcd = self._spawn(
            "etcd",
            [
                str(self.binaries / "etcd"),
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-url={self.etcd_url}",
                f"--listen-peer-url=http://127.0.0.1:{free_port()}",
                # a test cluster: its data need not survive a crash, and fsync on a shared
                # disk would make every write's latency the disk's
                "--unsafe-no-fsync",
            ],
        )

        def healthy() -> bool:
            with contextlib.suppress(urllib3.exceptions.HTTPError):
                return bool(
                    urllib3.request(
                        "GET", self.etcd_url + "/health", timeout=1.0, retries=False
                    ).status
                    == 200
                )
            return False

        self._wait(etcd, healthy)
        self.times.etcd = time.monotonic() - started

    def _start_apiserver(self) -> None:
        started = time.monotonic()
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(self.binaries / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.pki_dir}",
                f"--tls-cert-file={self.serving.certificate}",
                f"--tls-private-key-file={self.serving.key}",
                f"--client-ca-file={self.ca.certificate}",
                "--authorization-mode=Node,RBAC",
                f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={self.service_account_key.certificate}",
                f"--service-account-signing-key-file={self.service_account_key.key}",
                "--profiling=false",
                "--v=1",
                *self.apiserver_flags,
            ],
        )
        self._wait(apiserver, self.ready)
        self.times.apiserver = time.monotonic() - started

    def _start_controller_manager(self) -> None:
        started = time.monotonic()
        port = free_port()
        controller_manager = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries / "kube-controller-manager"),
                f"--kubeconfig={self.controller_manager_kubeconfig}",
                f"--authentication-kubeconfig={self.controller_manager_kubeconfig}",
                f"--authorization-kubeconfig={self.controller_manager_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.pki_dir / 'controller-manager'}",
                f"--controllers={','.join(self.controllers)}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.service_account_key.key}",
                f"--root-ca-file={self.ca.certificate}",
                "--leader-elect=false",
                "--v=1",
                *self.controller_manager_flags,
            ],
        )
        # ready when its controllers act: the service-account controller made ``default``
        self._wait(controller_manager, self._default_service_account_exists)
        self.times.controller_manager = time.monotonic() - started

    def _default_service_account_exists(self) -> bool:
        status, _ = self.admin.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200

    def ready(self) -> bool:
        with contextlib.suppress(urllib3.exceptions.HTTPError, ssl.SSLError, OSError):
            status, _ = self.admin.request("GET", "/readyz")
            return status == 200
        return False

    def stop(self) -> None:
        """SIGTERM each component by PID (newest first), SIGKILL what is left after 15 s."""
        for component in reversed(self._components):
            if component.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(component.process.pid, signal.SIGTERM)
                try:
                    component.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(component.process.pid, signal.SIGKILL)
                    component.process.wait(timeout=5)
        self._components.clear()
        if hasattr(self, "admin"):
            self.admin.close()

    def pid(self, name: str) -> int:
        [component] = [c for c in self._components if c.name == name]
        return component.process.pid

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    # -- credentials -----------------------------------------------------------------------

    def write_kubeconfig(
        self, name: str, *, client: pki.KeyPair | None = None, token: str | None = None
    ) -> Path:
        """A kubeconfig for user ``name`` (a client certificate or a bearer token) with
        its credentials embedded, so it can be copied anywhere."""
        user: dict[str, str] = {}
        if client is not None:
            cert, key = client.pem()
            user = {
                "client-certificate-data": _b64(cert),
                "client-key-data": _b64(key),
            }
        if token is not None:
            user["token"] = token
        path = self.kubeconfigs / f"{name}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "controlplane",
                            "cluster": {
                                "server": self.url,
                                "certificate-authority-data": _b64(
                                    self.ca.certificate.read_bytes()
                                ),
                            },
                        }
                    ],
                    "users": [{"name": name, "user": user}],
                    "contexts": [
                        {"name": name, "context": {"cluster": "controlplane", "user": name}}
                    ],
                    "current-context": name,
                }
            )
        )
        path.chmod(0o600)
        return path

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        seconds: int = 3600,
        create: bool = True,
        pod: str | None = None,
    ) -> str:
        """A token for ServiceAccount ``namespace/name`` from the TokenRequest API, as the
        kubelet mounts into a pod (the account is created first if ``create``). With
        ``pod`` (a pod of that account in ``namespace``), the token is bound to it as the
        kubelet's is, and the apiserver adds the pod's node to the caller's user info
        (extra ``authentication.kubernetes.io/node-name``)."""
        if create:
            status, body = self.admin.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"metadata": {"name": name, "namespace": namespace}},
            )
            if status not in (201, 409):
                raise ApiError(status, body)
        bound: dict[str, Any] = {}
        if pod is not None:
            uid = self.admin.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")["metadata"]["uid"]
            bound["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}
        issued = self.admin.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds, **bound},
            },
        )
        token: str = issued["status"]["token"]
        return token

    def service_account_kubeconfig(
        self, namespace: str, name: str, *, pod: str | None = None
    ) -> Path:
        token = self.service_account_token(namespace, name, pod=pod)
        return self.write_kubeconfig(f"sa-{namespace}-{name}", token=token)

    def service_account_rest(self, namespace: str, name: str) -> Rest:
        return Rest(
            self.url, self.ca.certificate, token=self.service_account_token(namespace, name)
        )

    def node_credentials(self, node: str) -> pki.KeyPair:
        """A kubelet's client certificate for ``node`` (``system:node:<node>`` in
        ``system:nodes``): what the Node authorizer and NodeRestriction confine."""
        return self.ca.issue(f"node-{node}", f"system:node:{node}", organizations=("system:nodes",))

    def node_kubeconfig(self, node: str) -> Path:
        return self.write_kubeconfig(f"node-{node}", client=self.node_credentials(node))

    # -- objects ---------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """``kubectl`` as admin; raises with kubectl's stderr when it fails."""
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise RuntimeError("kubectl is not installed")
        done = subprocess.run(
            [kubectl, f"--kubeconfig={self.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def apply(self, documents: Sequence[Mapping[str, Any]], *, dry_run: bool = False) -> str:
        """Server-side apply ``documents`` as an operator's ``kubectl apply`` would."""
        flags = ["apply", "--server-side", "--field-manager=nodeagent-tests", "-f", "-"]
        if dry_run:
            flags.append("--dry-run=server")
        return self.kubectl(*flags, stdin=yaml.safe_dump_all(list(documents)))

    def namespace(self, name: str) -> str:
        """Create namespace ``name`` and wait for its ``default`` ServiceAccount (pods are
        refused until the service-account controller made it)."""
        self.admin.create("/api/v1/namespaces", {"metadata": {"name": name}})
        deadline = time.monotonic() + 30
        path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        while self.admin.request("GET", path)[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespace {name}: no default ServiceAccount after 30 s")
            time.sleep(0.05)
        return name


class Nodes:
    """Creates node objects (no kubelet behind them) and deletes them all at teardown."""

    def __init__(self, plane: ControlPlane) -> None:
        self._plane = plane
        self.names: list[str] = []

    def create(self, node: dict[str, Any]) -> dict[str, Any]:
        """Create ``node`` (its status included, as a kubelet registers) and set its taints
        to exactly those given: the TaintNodesByCondition admission plugin adds
        ``node.kubernetes.io/not-ready:NoSchedule`` to every new node, which the node
        lifecycle controller (not run here: no kubelets) removes once the node is Ready."""
        created: dict[str, Any] = self._plane.admin.create("/api/v1/nodes", node)
        name = created["metadata"]["name"]
        self.names.append(name)
        taints = (node.get("spec") or {}).get("taints") or []
        if (created.get("spec") or {}).get("taints") != taints:
            created = self._plane.admin.merge_patch(
                f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}}
            )
        return created

    def delete_all(self) -> None:
        for name in self.names:
            self._plane.admin.request("DELETE", f"/api/v1/nodes/{name}")
        self.names.clear()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@contextlib.contextmanager
def running(root: Path, **kwargs: Any) -> Iterator[ControlPlane]:
    plane = ControlPlane(root, **kwargs)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
