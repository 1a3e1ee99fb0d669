"""What the qemu guests are made of, without booting one: the modules an initramfs loads
and in which order, the archive's format, the console lines that tell why a boot
failed."""

from __future__ import annotations

import lzma
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.uml import machine, qemu


def fake_kernel(tmp_path: Path, dep: str, builtin: str = "") -> qemu.DebianKernel:
    modules = tmp_path / "lib/modules/6.1.0-99-amd64"
    modules.mkdir(parents=True)
    (modules / "modules.dep").write_text(dep)
    (modules / "modules.builtin").write_text(builtin)
    return qemu.DebianKernel("6.1.0-99-amd64", tmp_path / "vmlinuz", modules)


DEP = """\
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/crypto/crc32c_generic.ko.xz:
"""


def test_each_module_comes_after_those_it_needs_and_only_once(tmp_path: Path) -> None:
    kernel = fake_kernel(tmp_path, DEP)
    files = qemu.module_files(kernel, ["9p", "9pnet_virtio"])
    names = [path.name for path in files]
    assert names == [
        "9pnet.ko",
        "netfs.ko",
        "fscache.ko",
        "9p.ko",
        "virtio_ring.ko",
        "9pnet_virtio.ko",
    ]
    assert all(path.is_relative_to(kernel.modules) for path in files)


def test_a_built_in_module_is_not_loaded_and_an_unknown_one_is_an_error(tmp_path: Path) -> None:
    kernel = fake_kernel(tmp_path, DEP, builtin="kernel/drivers/virtio/virtio_ring.ko\n")
    assert [p.name for p in qemu.module_files(kernel, ["9pnet_virtio"])] == [
        "9pnet.ko",
        "9pnet_virtio.ko",
    ]
    with pytest.raises(RuntimeError, match=r"Linux 6\.1\.0-99-amd64 has no module ext4"):
        qemu.module_files(kernel, ["ext4"])


def test_a_compressed_module_is_unpacked_for_busybox_insmod(tmp_path: Path) -> None:
    module = tmp_path / "crc32c_generic.ko.xz"
    module.write_bytes(lzma.compress(b"\x7fELF module"))
    assert qemu.module_bytes(module) == b"\x7fELF module"
    zstd = tmp_path / "crc32c_generic.ko.zst"
    zstd.write_bytes(b"")
    with pytest.raises(RuntimeError, match="cannot decompress"):
        qemu.module_bytes(zstd)


@pytest.mark.skipif(shutil.which("cpio") is None, reason="no cpio to read the archive back")
def test_the_archive_reads_back_with_cpio(tmp_path: Path) -> None:
    archive = qemu.Cpio()
    archive.add("bin", stat.S_IFDIR | 0o755)
    archive.add("bin/init", stat.S_IFREG | 0o755, b"#!/bin/sh\necho odd-sized\n")
    archive.add("dev/console", stat.S_IFCHR | 0o600, device=(5, 1))
    listing = subprocess.run(
        ["cpio", "-t", "-v"], input=archive.finish(), capture_output=True, check=True
    ).stdout.decode()
    lines = listing.splitlines()
    assert [line.split()[-1] for line in lines] == ["bin", "bin/init", "dev/console"]
    assert lines[1].startswith("-rwxr-xr-x") and lines[2].startswith("crw-------")
    assert "5,   1" in lines[2] or "5, 1" in lines[2]


def test_busybox_must_be_static() -> None:
    assert qemu._is_static(qemu.BUSYBOX) if qemu.BUSYBOX.is_file() else True
    assert not qemu._is_static(Path("/bin/sh").resolve())


@pytest.mark.parametrize(
    ("console", "words"),
    [
        (
            "Checking that ptrace can change system call numbers...OK\n"
            "ptrace set fp regs failed, errno = 14\n"
            "Kernel panic - not syncing: get_fp_registers failed\n"
            "CPU: 0 PID: 1 Comm: swapper\nCall Trace:\n dump_stack+0x1\n",
            "ptrace set fp regs failed, errno = 14; "
            "Kernel panic - not syncing: get_fp_registers failed",
        ),
        (
            "qemu-system-x86_64: warning: host doesn't support requested feature\n"
            "qemu-system-x86_64: -accel kvm: Could not access KVM kernel module: No such file\n"
            "qemu-system-x86_64: -accel kvm: failed to initialize kvm: No such file\n",
            "qemu-system-x86_64: -accel kvm: Could not access KVM kernel module: No such file; "
            "qemu-system-x86_64: -accel kvm: failed to initialize kvm: No such file",
        ),
        (
            "[ 1.2] Run /init as init process\ninitramfs: insmod /modules/05-9p.ko\n"
            "[ 1.3] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n",
            "initramfs: insmod /modules/05-9p.ko; "
            "[ 1.3] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100",
        ),
        (
            "[ 0.1] one\n[ 0.2] two\n[ 0.3] three\n[ 0.4] four\n",
            "[ 0.2] two; [ 0.3] three; [ 0.4] four",
        ),
        ("", "no console output"),
    ],
    ids=["uml-on-amx", "kvm-refused", "initramfs", "no-telling-line", "silent"],
)
def test_a_failed_boot_is_told_in_the_kernels_own_words(console: str, words: str) -> None:
    assert machine.telling(console) == words
