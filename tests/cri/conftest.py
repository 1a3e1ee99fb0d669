"""A real containerd per test (see :mod:`tests.cri.containerd`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cri.containerd import Containerd, start, stop


@pytest.fixture
def containerd() -> Iterator[Containerd]:
    runtime = start()
    yield runtime
    stop(runtime)
