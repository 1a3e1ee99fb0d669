"""FileReader: re-reads through kept descriptors, within a budget, and lets go."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from nodeagent.base.errors import SignalReadError
from nodeagent.signals.files import FileReader, default_fd_budget, read_checked


def test_rereads_see_new_contents(tmp_path: Path) -> None:
    path = tmp_path / "memory.current"
    path.write_text("1\n")
    reader = FileReader()
    assert reader.read_int(str(path)) == 1
    path.write_text("123456789\n")  # in place, as the kernel regenerates
    assert reader.read_int(str(path)) == 123456789
    assert reader.open_count == 1
    reader.close()
    assert reader.open_count == 0


def test_large_files_are_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "big"
    data = bytes(range(256)) * 100  # 25600 bytes, several chunks
    path.write_bytes(data)
    reader = FileReader()
    assert reader.read(str(path)) == data
    assert reader.read(str(path)) == data


def test_budget_bounds_open_descriptors(tmp_path: Path) -> None:
    paths = [tmp_path / f"f{n}" for n in range(5)]
    for n, path in enumerate(paths):
        path.write_text(str(n))
    reader = FileReader(max_open=2)
    for _ in range(2):
        assert [reader.read_int(str(path)) for path in paths] == [0, 1, 2, 3, 4]
    assert reader.open_count == 2
    reader.forget([str(paths[0]), str(tmp_path / "never-read")])
    assert reader.open_count == 1


def test_missing_file_raises_and_keeps_nothing(tmp_path: Path) -> None:
    reader = FileReader()
    with pytest.raises(FileNotFoundError):
        reader.read(str(tmp_path / "absent"))
    assert reader.open_count == 0
    with pytest.raises(SignalReadError, match="absent: No such file"):
        read_checked(reader, str(tmp_path / "absent"))


@pytest.mark.parametrize(
    ("soft_limit", "budget"),
    [
        pytest.param(1024, 448, id="default-ulimit"),
        pytest.param(1048576, 16384, id="capped"),
        pytest.param(resource.RLIM_INFINITY, 16384, id="unlimited"),
        pytest.param(100, 0, id="too-few-to-keep-any"),
    ],
)
def test_default_budget_leaves_half_the_descriptors_and_a_reserve(
    monkeypatch: pytest.MonkeyPatch, soft_limit: int, budget: int
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft_limit, resource.RLIM_INFINITY))
    assert default_fd_budget() == budget


def test_a_reader_without_budget_keeps_nothing_open(tmp_path: Path) -> None:
    path = tmp_path / "pids.current"
    path.write_text("3\n")
    reader = FileReader(max_open=0)
    assert [reader.read_int(str(path)) for _ in range(2)] == [3, 3]
    assert reader.open_count == 0
