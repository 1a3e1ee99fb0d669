"""The kernel file parsers: exact formats, malformed input, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.signals import parse
from tests.doubles.host import V1_UNLIMITED, Psi

V1_STAT = b"cache 16777216\nrss 209920000\ninactive_file 1\ntotal_inactive_file 16777216\n"
V2_STAT = b"anon 100\nfile 200\nfile_mapped 7\ninactive_file 150\nactive_file 50\n"


@pytest.mark.parametrize(
    ("data", "key", "expected"),
    [
        pytest.param(V1_STAT, b"cache ", 16777216, id="first-line"),
        pytest.param(V1_STAT, b"total_inactive_file ", 16777216, id="last-line"),
        pytest.param(V1_STAT, b"inactive_file ", 1, id="not-the-total"),
        pytest.param(V2_STAT, b"file ", 200, id="not-file_mapped"),
        pytest.param(V2_STAT, b"swap ", None, id="absent"),
        pytest.param(b"anon 5", b"anon ", 5, id="no-trailing-newline"),
    ],
)
def test_stat_value_finds_whole_keys(data: bytes, key: bytes, expected: int | None) -> None:
    assert parse.stat_value(data, key) == expected


def test_stat_value_rejects_a_non_number() -> None:
    with pytest.raises(ValueError):
        parse.stat_value(b"anon lots\n", b"anon ")


@given(
    st.dictionaries(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20),
        st.integers(min_value=0, max_value=2**63),
        min_size=1,
    )
)
def test_stat_value_reads_back_every_key(values: dict[str, int]) -> None:
    data = "".join(f"{key} {value}\n" for key, value in values.items()).encode()
    for key, value in values.items():
        assert parse.stat_value(data, f"{key} ".encode()) == value


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"max\n", None, id="v2-max"),
        pytest.param(f"{V1_UNLIMITED}\n".encode(), None, id="v1-unlimited"),
        pytest.param(b"268435456\n", 268435456, id="bytes"),
        pytest.param(str(1 << 62).encode(), 1 << 62, id="at-2^62-is-a-limit"),
    ],
)
def test_parse_limit(data: bytes, expected: int | None) -> None:
    assert parse.parse_limit(data) == expected


MEMINFO = b"""MemTotal:       24683656 kB
MemFree:        24359632 kB
Buffers:             100 kB
Cached:           117608 kB
SwapTotal:             0 kB
HugePages_Total:       0
"""


def test_parse_meminfo_converts_kib_and_skips_unwanted_keys() -> None:
    values = parse.parse_meminfo(MEMINFO, ("MemTotal", "Cached", "HugePages_Total", "Absent"))
    assert values == {
        "MemTotal": 24683656 * 1024,
        "Cached": 117608 * 1024,
        "HugePages_Total": 0,
    }


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"0.03 0.07 0.02 2/99 7056\n", 99, id="real"),
        pytest.param(b"1.00 1.00 1.00 12/123456 1\n", 123456, id="above-65535"),
    ],
)
def test_loadavg_tasks(data: bytes, expected: int) -> None:
    assert parse.parse_loadavg_tasks(data) == expected


@pytest.mark.parametrize("data", [b"", b"0.1 0.2 0.3\n", b"0.1 0.2 0.3 99 7\n"])
def test_loadavg_rejects_malformed(data: bytes) -> None:
    with pytest.raises(ValueError, match="running/total"):
        parse.parse_loadavg_tasks(data)


def test_parse_psi_some_and_full() -> None:
    stats = parse.parse_psi(
        b"some avg10=3.15 avg60=1.05 avg300=0.36 total=2754164\n"
        b"full avg10=0.00 avg60=0.50 avg300=0.10 total=12\n"
    )
    assert (stats.some.avg10, stats.some.avg60, stats.some.avg300) == (3.15, 1.05, 0.36)
    assert stats.some.total == 2754164
    assert stats.full is not None
    assert stats.full.total == 12


def test_parse_psi_without_full_line() -> None:
    stats = parse.parse_psi(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert stats.full is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"full avg10=0 avg60=0 avg300=0 total=0\n", id="no-some"),
        pytest.param(b"some avg10=0 avg60=0 total=0\n", id="missing-avg300"),
    ],
)
def test_parse_psi_rejects_malformed(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse.parse_psi(data)


percent = st.floats(min_value=0, max_value=100, allow_nan=False).map(lambda x: round(x, 2))
psi_line = st.tuples(percent, percent, percent, st.integers(min_value=0, max_value=2**63))


@given(psi_line, st.one_of(st.none(), psi_line))
def test_parse_psi_round_trips_the_kernel_format(
    some: tuple[float, float, float, int], full: tuple[float, float, float, int] | None
) -> None:
    stats = parse.parse_psi(Psi(some=some, full=full).render().encode())
    assert (stats.some.avg10, stats.some.avg60, stats.some.avg300, stats.some.total) == some
    if full is None:
        assert stats.full is None
    else:
        assert stats.full is not None
        assert (stats.full.avg10, stats.full.avg60, stats.full.avg300, stats.full.total) == full


CONTAINER_MOUNTINFO = (
    "1500 1400 0:310 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/"
    "containerd/snapshots/1/fs:/var/lib/containerd/snapshots/2/fs,upperdir=/var/lib/containerd/"
    "io.containerd.snapshotter.v1.overlayfs/snapshots/9/fs,workdir=/var/lib/containerd/"
    "io.containerd.snapshotter.v1.overlayfs/snapshots/9/work\n"
    "1501 1500 0:312 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "1502 1500 0:313 / /tmp/x rw - overlay overlay rw,upperdir=/not/the/root\n"
)


@pytest.mark.parametrize(
    ("mountinfo", "expected"),
    [
        pytest.param(
            CONTAINER_MOUNTINFO,
            "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/9/fs",
            id="containerd",
        ),
        pytest.param(
            "22 1 0:21 / / rw - overlay overlay rw,lowerdir=/l,upperdir=/var/lib/my\\040layer,"
            "workdir=/w\n",
            "/var/lib/my layer",
            id="escaped-space",
        ),
        pytest.param("22 27 0:21 / / rw,relatime - ext4 /dev/vda rw\n", None, id="host-root"),
        pytest.param("", None, id="empty"),
        pytest.param("garbage without separator\n", None, id="garbage"),
    ],
)
def test_overlay_upperdir(mountinfo: str, expected: str | None) -> None:
    assert parse.overlay_upperdir(mountinfo) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "default_web-0_0b6e0e0a-1c1f-4d5e-9a0b-1234567890ab",
            "0b6e0e0a-1c1f-4d5e-9a0b-1234567890ab",
            id="pod",
        ),
        pytest.param("kube-system_etcd-node1_7c2b5e1a9f", "7c2b5e1a9f", id="static-pod"),
        pytest.param("lost+found", None, id="not-a-pod"),
        pytest.param("a_b", None, id="two-parts"),
        pytest.param("a__c", None, id="empty-name"),
    ],
)
def test_pod_uid_from_log_dir(name: str, expected: str | None) -> None:
    assert parse.pod_uid_from_log_dir(name) == expected
