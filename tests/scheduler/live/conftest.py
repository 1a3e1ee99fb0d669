from pathlib import Path

import pytest

from tests.fakeapi.fixtures import fake_api

__all__ = ["bind_process_kubeconfig", "fake_api"]


@pytest.fixture(params=["in-process", "binding-process"])
def bind_process_kubeconfig(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    """Both ways the scheduler sends its bindings: from its own threads (None), or from
    a binding process connected by a kubeconfig written at this path."""
    return tmp_path / "kubeconfig" if request.param == "binding-process" else None
