"""Container images the tests build themselves, as docker-archive tarballs that
``ctr images import`` takes: no registry, no download.

Each image is one layer holding a program written here byte by byte: a static x86-64
ELF of a few instructions (``pause()`` forever for the sandbox image, ``exit(0)`` for
the containers that must exit), plus an optional padding file that gives the image the
size a test wants. Every image gets distinct content (its tag is written into the
layer), so every tag is a distinct image with its own id.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
from pathlib import Path


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


def _tar(files: list[tuple[str, bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build_image(path: Path, tag: str, *, program: bytes, padding: int = 0) -> Path:
    """Write a docker-archive tarball of one image tagged ``tag`` whose entrypoint is
    ``program``, with ``padding`` bytes of filler; returns ``path``."""
    layer = _tar(
        [
            ("entrypoint", program, 0o755),
            ("tag", tag.encode(), 0o644),
            *([("padding", bytes(padding), 0o644)] if padding else []),
        ]
    )
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/entrypoint"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]}]
    ).encode()
    path.write_bytes(
        _tar(
            [
                ("manifest.json", manifest, 0o644),
                (config_name, config, 0o644),
                (f"{diff_id}/layer.tar", layer, 0o644),
            ]
        )
    )
    return path


def image_id(tarball: Path) -> str:
    """The id containerd gives the image in ``tarball``: its config's digest."""
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        [entry] = json.loads(member.read())
    return "sha256:" + str(entry["Config"]).removesuffix(".json")
