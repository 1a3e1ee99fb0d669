"""Container images the tests build themselves, as OCI image layout tarballs that
``ctr images import`` takes (named by the ``io.containerd.image.name`` annotation): no
registry, no download.

Each image is one layer holding a program written here byte by byte: a static x86-64
ELF of a few instructions (``pause()`` forever for the sandbox image, ``exit(0)`` for
the containers that must exit), plus an optional padding file that gives the image the
size a test wants. Every image gets distinct content (its name is a label in its
config), so every tag is a distinct image with its own id. The node tests
(``tests.node.images``) write their images with the same writer.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _elf(code: bytes) -> bytes:
    """A minimal static x86-64 executable: ELF header, one loadable segment, code."""
    base, header_size, segment_size = 0x400000, 64, 56
    entry = base + header_size + segment_size
    total = header_size + segment_size + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, SysV
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,
        0x3E,
        1,
        entry,
        header_size,
        0,
        0,
        header_size,
        segment_size,
        1,
        0,
        0,
        0,
    )
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)  # PT_LOAD, R+X
    return header + segment + code


PAUSE_PROGRAM = _elf(bytes.fromhex("b8220000000f05ebf7"))
"""mov eax, 34 (pause); syscall; jmp back: sleeps until killed."""
EXIT_PROGRAM = _elf(bytes.fromhex("31ffb83c0000000f05"))
"""xor edi, edi; mov eax, 60 (exit); syscall: exits 0 at once."""


@dataclass(frozen=True)
class _Blob:
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
    path: Path,
    name: str,
    program: bytes,
    *,
    entrypoint: str = "/entrypoint",
    args: Sequence[str] = (),
    padding: int = 0,
) -> Path:
    """Write an OCI image layout tarball of one image ``name`` (``repo:tag``) to ``path``:
    one layer holding ``program`` at ``entrypoint``, run with ``args``, and ``padding``
    bytes of filler seeded by the name, so no two images share a layer or a config."""
    files = [(entrypoint.lstrip("/"), program, 0o755)]
    if padding:
        seed = hashlib.sha256(name.encode()).digest()
        files.append(("padding", (seed * (padding // len(seed) + 1))[:padding], 0o644))
    layer = _Blob("application/vnd.oci.image.layer.v1.tar", _tar(files))
    config = _Blob(
        "application/vnd.oci.image.config.v1+json",
        json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                # the name as a label: images of one program are distinct images
                "config": {
                    "Entrypoint": [entrypoint],
                    "Cmd": list(args),
                    "Labels": {"nodeagent.test/image": name},
                },
                "rootfs": {"type": "layers", "diff_ids": [layer.digest]},
            }
        ).encode(),
    )
    manifest = _Blob(
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


def build_image(path: Path, tag: str, *, program: bytes, padding: int = 0) -> Path:
    """An image tagged ``tag`` whose entrypoint is ``program``, with ``padding`` bytes of
    filler; returns ``path``."""
    return oci_archive(path, tag, program, padding=padding)


def image_id(tarball: Path) -> str:
    """The id containerd gives the image in ``tarball``: its config's digest."""
    with tarfile.open(tarball) as tar:

        def blob(name: str) -> Any:
            member = tar.extractfile(name)
            assert member is not None, name
            return json.loads(member.read())

        [manifest] = blob("index.json")["manifests"]
        config = blob("blobs/sha256/" + manifest["digest"].removeprefix("sha256:"))["config"]
    return str(config["digest"])
