"""The node's container images, made here: no registry is reachable, so the kubelet runs
them with ``imagePullPolicy: Never`` after :meth:`tests.node.node.Node.start` imports them.

One static program, ``workload.c`` (built with ``gcc -static`` into a cache keyed by its
source), is the whole of every image: the sandbox image runs ``workload pause``, the
workload image any of its modes (a memory ramp, a disk writer, a page-cache reader). The
tarballs are written by :func:`tests.cri.images.oci_archive`, the one image writer of the
tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.cri.images import oci_archive

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


def padded_image(directory: Path, cache: Path, name: str, padding: int) -> Path:
    """An image no pod uses, ``padding`` bytes large: what image garbage collection and
    the agent's reclaim may remove."""
    program = build_workload(cache).read_bytes()
    return oci_archive(
        directory / (name.replace("/", "_").replace(":", "_") + ".tar"),
        name,
        program,
        entrypoint=ENTRYPOINT,
        args=["pause"],
        padding=padding,
    )


def node_images(directory: Path, cache: Path) -> list[Path]:
    """The sandbox (pause) image and the workload image, as tarballs in ``directory``."""
    program = build_workload(cache).read_bytes()
    return [
        oci_archive(directory / "pause.tar", PAUSE, program, entrypoint=ENTRYPOINT, args=["pause"]),
        oci_archive(
            directory / "workload.tar", WORKLOAD, program, entrypoint=ENTRYPOINT, args=["pause"]
        ),
    ]
