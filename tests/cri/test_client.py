"""The CRI client's contract without a runtime: endpoints, errors, generated code."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.cri.client import CRIError, GrpcRuntime, grpc_target

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("endpoint", "target"),
    [
        ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("/var/run/crio/crio.sock", "unix:///var/run/crio/crio.sock"),
        ("tcp://127.0.0.1:3735", "127.0.0.1:3735"),
    ],
)
def test_endpoints(endpoint: str, target: str) -> None:
    assert grpc_target(endpoint) == target


def test_a_bad_endpoint_names_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"unix:///path/to/socket or tcp://host:port"):
        grpc_target("npipe:////./pipe/containerd")


def test_a_runtime_that_is_not_there_fails_fast_with_the_call_named(tmp_path: Path) -> None:
    runtime = GrpcRuntime(f"unix://{tmp_path}/missing.sock", timeout=5.0)
    start = time.monotonic()
    with pytest.raises(CRIError, match=r"CRI ListImages: UNAVAILABLE: .*missing\.sock") as raised:
        runtime.list_images()
    assert raised.value.call == "ListImages"
    assert time.monotonic() - start < 2.0  # no waiting for the deadline
    runtime.close()


@pytest.mark.parametrize(
    "proto", ["nodeagent/cri/api.proto", "tests/cri/lifecycle.proto"], ids=lambda p: p
)
def test_the_checked_in_generated_code_matches_its_proto(proto: str, tmp_path: Path) -> None:
    """The command in each .proto's header regenerates exactly what is checked in."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(ROOT / proto),
        ],
        check=True,
    )
    for suffix in ("_pb2.py", "_pb2.pyi"):
        generated = tmp_path / proto.replace(".proto", suffix)
        checked_in = ROOT / proto.replace(".proto", suffix)
        assert generated.read_text() == checked_in.read_text(), f"regenerate {checked_in}"
