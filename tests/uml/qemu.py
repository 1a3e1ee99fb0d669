"""Debian's own kernel under qemu: what :mod:`tests.uml.machine` needs to boot it.

Debian's ``linux-image-amd64`` (``/boot/vmlinuz-<release>``) builds virtio, 9p and ext4
as modules, so the guest starts from an initramfs made here for each boot: busybox-static
as its shell, the modules those need, taken from ``/lib/modules/<release>`` in
``modules.dep`` order, and an ``/init`` that loads them, mounts the host's ``/``
read-only at ``/newroot`` and ``switch_root``\\ s into it. The checkout's Python then
runs at the same paths as on the host.

The host's files reach the guest over 9p (``-virtfs``/``-fsdev``, built into qemu)
rather than virtiofs, which needs a ``virtiofsd`` daemon per share, a shared-memory
backend the size of the guest's RAM and one more process to supervise; the guest only
reads the checkout and writes a few results, which 9p does well enough. The root share
is mounted ``cache=loose`` (the host's files do not change under a test run, and Python's
imports then come from the guest's page cache); the work share ``cache=none``, so what
either side writes there is seen by the other at once.

Accelerators: ``kvm`` where ``/dev/kvm`` can run it (:func:`kvm_problem`), otherwise
``tcg``, qemu's own emulation: slower, but it boots the same kernel on any machine.
"""

from __future__ import annotations

import fcntl
import gzip
import lzma
import os
import re
import shlex
import shutil
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

QEMU = "qemu-system-x86_64"
BUSYBOX = Path("/bin/busybox")
BOOT = Path("/boot")
MODULES = Path("/lib/modules")
NEEDED_MODULES = (
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "virtio_blk",
    # ext4 asks the crypto API for crc32c; with no modprobe in the initramfs the
    # implementation must be there already.
    "crc32c_generic",
    "ext4",
)
NEWROOT = "/newroot"
ROOT_TAG = "host"
WORK_TAG = "work"
MSIZE = 512000
"""9p's largest message over virtio (its maximum): fewer round trips than the default 128 KiB."""

KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_API_VERSION = 12


@dataclass(frozen=True)
class DebianKernel:
    release: str
    image: Path
    modules: Path


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release))


def debian_kernel() -> DebianKernel | str:
    """The newest ``/boot/vmlinuz-<release>`` with its modules, or why there is none."""
    images = sorted(
        BOOT.glob("vmlinuz-*"), key=lambda p: _version_key(p.name.removeprefix("vmlinuz-"))
    )
    if not images:
        return f"no {BOOT}/vmlinuz-* (apt-get install linux-image-amd64)"
    image = images[-1]
    release = image.name.removeprefix("vmlinuz-")
    modules = MODULES / release
    if not (modules / "modules.dep").is_file():
        return f"{image} has no {modules}/modules.dep"
    if not os.access(image, os.R_OK):
        return f"cannot read {image} (Debian installs it readable by root only)"
    return DebianKernel(release=release, image=image, modules=modules)


def missing() -> str | None:
    """Why qemu cannot boot Debian's kernel here at all, or ``None``."""
    if shutil.which(QEMU) is None:
        return f"no {QEMU} (apt-get install qemu-system-x86)"
    kernel = debian_kernel()
    if isinstance(kernel, str):
        return kernel
    if not BUSYBOX.is_file():
        return f"no {BUSYBOX} (apt-get install busybox-static)"
    if not _is_static(BUSYBOX):
        return f"{BUSYBOX} is dynamically linked (apt-get install busybox-static)"
    return None


def _is_static(path: Path) -> bool:
    """No ``PT_INTERP`` program header: the initramfs has no dynamic loader."""
    with path.open("rb") as file:
        header = file.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            return False
        (phoff,) = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        file.seek(phoff)
        table = file.read(phentsize * phnum)
    pt_interp = 3
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != pt_interp for i in range(phnum))


def kvm_problem() -> str | None:
    """Why ``-accel kvm`` cannot run Debian's kernel here, or ``None``.

    Beyond opening ``/dev/kvm`` and creating a VM through it: some machines serve
    ``/dev/kvm`` with PVM (``kvm_pvm``, KVM without hardware virtualization), which runs
    only kernels built as PVM guests at speed. It took Debian's 6.1 kernel 94 s to print
    its first line there, and minutes more for each second of its boot; not worth a try.
    """
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as error:
        return f"cannot open /dev/kvm: {error.strerror}"
    try:
        version = fcntl.ioctl(fd, KVM_GET_API_VERSION)
        if version != KVM_API_VERSION:
            return f"/dev/kvm speaks KVM API {version}, not {KVM_API_VERSION}"
        os.close(fcntl.ioctl(fd, KVM_CREATE_VM, 0))
    except OSError as error:
        return f"/dev/kvm cannot create a VM: {error.strerror}"
    finally:
        os.close(fd)
    loaded = {
        name for name in ("kvm_intel", "kvm_amd", "kvm_pvm") if Path("/sys/module", name).is_dir()
    }
    if loaded == {"kvm_pvm"}:
        return (
            "/dev/kvm is PVM's (kvm_pvm, no kvm_intel or kvm_amd: no hardware "
            "virtualization): it runs Debian's kernel, not built as a PVM guest, about a "
            "thousand times slower than KVM"
        )
    return None


def module_files(kernel: DebianKernel, wanted: Sequence[str] = NEEDED_MODULES) -> list[Path]:
    """The module files to load for ``wanted``, each after those it depends on; none
    for a module built into the kernel."""
    depends: dict[str, tuple[str, list[str]]] = {}
    for line in (kernel.modules / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        depends[_module_name(path)] = (path, [_module_name(n) for n in needs.split()])
    builtin = {
        _module_name(line) for line in (kernel.modules / "modules.builtin").read_text().splitlines()
    }
    order: list[str] = []

    def add(name: str) -> None:
        if name in order or name in builtin:
            return
        if name not in depends:
            raise RuntimeError(f"Linux {kernel.release} has no module {name}")
        for needed in depends[name][1]:
            add(needed)
        order.append(name)

    for name in wanted:
        add(name.replace("-", "_"))
    return [kernel.modules / depends[name][0] for name in order]


def _module_name(path: str) -> str:
    name = Path(path).name
    return name[: name.index(".ko")].replace("-", "_")


def module_bytes(path: Path) -> bytes:
    """A module file, decompressed: busybox's ``insmod`` takes plain ELF."""
    data = path.read_bytes()
    if path.name.endswith(".ko.xz"):
        return lzma.decompress(data)
    if path.name.endswith(".ko.gz"):
        return gzip.decompress(data)
    if not path.name.endswith(".ko"):
        raise RuntimeError(f"cannot decompress {path} for the initramfs")
    return data


class Cpio:
    """An archive in the kernel's initramfs format (``newc``), written in memory."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.inode = 0

    def add(
        self, name: str, mode: int, content: bytes = b"", device: tuple[int, int] = (0, 0)
    ) -> None:
        self.inode += 1
        fields = (self.inode, mode, 0, 0, 1, 0, len(content), 0, 0, *device, len(name) + 1, 0)
        self._append(
            b"070701" + b"".join(b"%08X" % field for field in fields) + name.encode() + b"\0"
        )
        self._append(content)

    def _append(self, chunk: bytes) -> None:
        self.data += chunk
        self.data += b"\0" * (-len(self.data) % 4)

    def finish(self) -> bytes:
        self.add("TRAILER!!!", 0)
        return bytes(self.data)


def initramfs(kernel: DebianKernel, init: str) -> bytes:
    """busybox, the modules and ``init`` (a busybox shell script) as ``/init``."""
    archive = Cpio()
    for directory in ("bin", "dev", "proc", "sys", "modules", NEWROOT.strip("/")):
        archive.add(directory, stat.S_IFDIR | 0o755)
    archive.add("dev/console", stat.S_IFCHR | 0o600, device=(5, 1))
    archive.add("bin/busybox", stat.S_IFREG | 0o755, BUSYBOX.read_bytes())
    for index, module in enumerate(module_files(kernel)):
        archive.add(
            f"modules/{index:02d}-{module.name.split('.ko')[0]}.ko",
            stat.S_IFREG | 0o644,
            module_bytes(module),
        )
    archive.add("init", stat.S_IFREG | 0o755, init.encode())
    return archive.finish()


def init_script(
    work: Path,
    *,
    disk: bool,
    then: Sequence[str],
    tmpfs: Sequence[str] = ("/tmp", "/var/tmp", "/run"),
    keep: Sequence[Path] = (),
) -> str:
    """The initramfs's ``/init``: load the modules, mount the host read-only with a
    guest's own ``/proc``, ``/sys``, cgroup2, ``/dev`` and a tmpfs on each of ``tmpfs``
    where programs write, the work share read-write at its host path, the disk
    (``/dev/vda``, ext4) at ``work/disk``; then become ``then`` on the new root. Each of
    ``keep`` (a host directory under one of ``tmpfs``, such as a checkout under ``/tmp``)
    stays the host's, read-only: bound aside before the tmpfs hides it, moved back
    after. Any failure says what failed on the console and ends init, which the kernel
    turns into a panic and qemu (``-no-reboot``) into its exit."""
    root = NEWROOT
    mounts = [
        f"-t proc proc {root}/proc",
        f"-t sysfs sysfs {root}/sys",
        f"-t cgroup2 cgroup2 {root}/sys/fs/cgroup",
        f"-t devtmpfs devtmpfs {root}/dev",
        *(f"-t tmpfs -o mode=1777 tmpfs {root}{where}" for where in tmpfs),
    ]
    aside = [(shlex.quote(f"{root}{path}"), f"/kept/{index}") for index, path in enumerate(keep)]
    work_path = shlex.quote(f"{root}{work}")
    lines = [
        "#!/bin/busybox sh",
        "B=/bin/busybox",
        'fail() { echo "initramfs: $*"; exit 1; }',
        "$B mount -t devtmpfs devtmpfs /dev || fail 'mount devtmpfs'",
        'for module in /modules/*.ko; do $B insmod "$module" || fail "insmod $module"; done',
        f"$B mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize={MSIZE},cache=loose "
        f"{ROOT_TAG} {root} || fail 'mount the host read-only'",
        *(
            f"$B mkdir -p {spare} && $B mount -o bind {path} {spare} || fail 'keep {path}'"
            for path, spare in aside
        ),
        *(f"$B mount {m} || fail 'mount {m}'" for m in mounts),
        *(
            f"$B mkdir -p {path} && $B mount -o move {spare} {path} || fail 'restore {path}'"
            for path, spare in aside
        ),
        f"$B mkdir -p {root}/dev/shm && $B mount -t tmpfs -o mode=1777 tmpfs {root}/dev/shm",
        # The work directory is usually under /tmp, now a tmpfs: its mount point is made there.
        f"$B mkdir -p {work_path} 2>/dev/null",
        f"$B mount -t 9p -o trans=virtio,version=9p2000.L,msize={MSIZE},cache=none "
        f"{WORK_TAG} {work_path} || fail 'mount the work share'",
    ]
    if disk:
        lines.append(f"$B mount -t ext4 /dev/vda {work_path}/disk || fail 'mount the disk'")
    lines.append(f"exec $B switch_root {root} {shlex.join(then)}")
    return "\n".join(lines) + "\n"


def argv(
    *,
    accelerator: str,
    kernel: DebianKernel,
    initramfs_path: Path,
    work: Path,
    mem_mib: int,
    control: Path,
    disk: Path | None,
) -> list[str]:
    """The qemu command line: no devices but the ones named, the console on the first
    serial line (qemu's stdout), the control line on the second (a unix socket the
    host listens on), both shares, the disk."""
    cpus = min(2, os.cpu_count() or 1)
    args = [
        QEMU,
        "-nodefaults",
        "-no-user-config",
        "-display", "none",
        "-no-reboot",
        "-accel", "kvm" if accelerator == "kvm" else "tcg,thread=multi",
        # The host's CPU under KVM; under TCG every feature qemu emulates (its default
        # model lacks SSE4.2, which numpy's wheels require).
        "-cpu", "host" if accelerator == "kvm" else "max",
        "-smp", str(cpus),
        "-m", f"{mem_mib}M",
        "-kernel", str(kernel.image),
        "-initrd", str(initramfs_path),
        "-append", "console=ttyS0 panic=-1 quiet",
        "-serial", "stdio",
        "-chardev", f"socket,id=control,path={control}",
        "-serial", "chardev:control",
        "-fsdev", f"local,id={ROOT_TAG},path=/,readonly=on,security_model=none,multidevs=remap",
        "-device", f"virtio-9p-pci,fsdev={ROOT_TAG},mount_tag={ROOT_TAG}",
        "-fsdev", f"local,id={WORK_TAG},path={work},security_model=none",
        "-device", f"virtio-9p-pci,fsdev={WORK_TAG},mount_tag={WORK_TAG}",
    ]  # fmt: skip
    if disk is not None:
        args += ["-drive", f"file={disk},if=virtio,format=raw"]
    return args
