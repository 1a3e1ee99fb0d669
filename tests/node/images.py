"""The node's container images, made here: no registry is reachable, so the kubelet runs
them with ``imagePullPolicy: Never`` after :meth:`tests.node.node.Node.start` imports them.

One static program, ``workload.c`` (built with ``gcc -static`` into a cache keyed by its
source), is the whole of every image: the sandbox image runs ``workload pause``, the
workload image any of its modes (a memory ramp, a disk writer, a page-cache reader). Each
image is an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) in a
tarball, which ``ctr images import`` takes, named by the ``io.containerd.image.name``
annotation.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "workload.c"
PAUSE = "nodeagent.test/pause:1"
WORKLOAD = "nodeagent.test/workload:1"
ENTRYPOINT = "/workload"


def compiler_missing() -> str | None:
    """Why the workload cannot be built here, or None."""
    if shutil.which("gcc") is None:
        return "no gcc: the node's images cannot be built (apt-get install gcc libc6-dev)"
    if not Path("/usr/lib/x86_64-linux-gnu/libc.a").exists():
        return "no static libc: the node's images cannot be built (apt-get install libc6-dev)"
    return None


def build_workload(cache: Path) -> Path:
    """``workload.c`` compiled statically, once per source (cached under ``cache``)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    binary = cache / f"workload-{digest}"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(f".{os.getpid()}")
        subprocess.run(
            ["gcc", "-static", "-O2", "-Wall", "-Werror", "-o", str(partial), str(SOURCE)],
            check=True,
            capture_output=True,
        )
        partial.rename(binary)
    return binary


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, **extra: object) -> dict[str, object]:
        return {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": len(self.data),
            **extra,
        }


def _tar(files: list[tuple[str, bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def oci_archive(
    path: Path, name: str, program: bytes, args: list[str], *, padding: int = 0
) -> Path:
    """Write an OCI image layout tarball of one image ``name`` (``repo:tag``): one layer
    holding ``program`` as :data:`ENTRYPOINT`, run with ``args``, and ``padding`` bytes of
    filler (distinct per name: no two images share it)."""
    files = [("workload", program, 0o755)]
    if padding:
        seed = hashlib.sha256(name.encode()).digest()
        files.append(("padding", (seed * (padding // len(seed) + 1))[:padding], 0o644))
    layer = Blob("application/vnd.oci.image.layer.v1.tar", _tar(files))
    config = Blob(
        "application/vnd.oci.image.config.v1+json",
        json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                # the name as a label: images of one program are distinct images
                "config": {
                    "Entrypoint": [ENTRYPOINT],
                    "Cmd": args,
                    "Labels": {"nodeagent.test/image": name},
                },
                "rootfs": {"type": "layers", "diff_ids": [layer.digest]},
            }
        ).encode(),
    )
    manifest = Blob(
        "application/vnd.oci.image.manifest.v1+json",
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config.descriptor(),
                "layers": [layer.descriptor()],
            }
        ).encode(),
    )
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            manifest.descriptor(
                annotations={
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                }
            )
        ],
    }
    path.write_bytes(
        _tar(
            [
                ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), 0o644),
                ("index.json", json.dumps(index).encode(), 0o644),
                *[
                    (f"blobs/sha256/{blob.digest.removeprefix('sha256:')}", blob.data, 0o644)
                    for blob in (layer, config, manifest)
                ],
            ]
        )
    )
    return path


def padded_image(directory: Path, cache: Path, name: str, padding: int) -> Path:
    """An image no pod uses, ``padding`` bytes large: what image garbage collection and
    the agent's reclaim may remove."""
    program = build_workload(cache).read_bytes()
    return oci_archive(
        directory / (name.replace("/", "_").replace(":", "_") + ".tar"),
        name,
        program,
        ["pause"],
        padding=padding,
    )


def node_images(directory: Path, cache: Path) -> list[Path]:
    """The sandbox (pause) image and the workload image, as tarballs in ``directory``."""
    program = build_workload(cache).read_bytes()
    return [
        oci_archive(directory / "pause.tar", PAUSE, program, ["pause"]),
        oci_archive(directory / "workload.tar", WORKLOAD, program, ["pause"]),
    ]
