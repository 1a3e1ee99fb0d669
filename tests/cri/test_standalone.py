"""``nodeagent run --standalone --no-dry-run`` frees a real containerd's disk.

Without a cluster the agent cannot evict pods, but node-level reclaim needs no API: with
``--no-dry-run`` it removes dead containers and unused images for real, and says once
that evictions are only logged.
"""

from __future__ import annotations

import time

import pytest

from tests.cri.containerd import (
    PINNED,
    Containerd,
    MiB,
    available,
    free_bytes,
    run_app_three_times,
)
from tests.e2e import harness

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.timeout(90),
    pytest.mark.skipif(available() is not None, reason=str(available())),
]


def test_standalone_no_dry_run_reclaims_through_the_runtime(containerd: Containerd) -> None:
    containerd.build_and_import("nodeagent.test/app:1")
    run_app_three_times(containerd, "nodeagent.test/app:1")
    for n in range(3):
        containerd.build_and_import(f"nodeagent.test/unused-{n}:1", padding=4 * MiB)
    threshold = free_bytes(containerd.imagefs) + 2 * MiB
    disk = str(containerd.imagefs)
    args = [
        "--standalone",
        "--no-dry-run",
        "--metrics-address",
        "127.0.0.1:0",
        "--container-runtime-endpoint",
        containerd.endpoint,
        "--pinned-images",
        ",".join(PINNED),
        "--nodefs-path",
        disk,
        "--imagefs-path",
        disk,
        "--eviction-hard",
        f"nodefs.available<{threshold // 1024}Ki",
        "--eviction-minimum-reclaim",
        "nodefs.available=1Mi",
    ]
    with harness.agent_process(args) as agent:
        started = agent.wait_line("nodeagent running")
        assert started["mode"] == "standalone" and started["dryRun"] is False
        warning = agent.wait_line(
            "standalone without dry run: node-level reclaim removes dead containers and "
            "unused images for real; pods cannot be evicted without the Kubernetes API, "
            "so evictions are only logged"
        )
        assert warning["level"] == "warning"
        deadline = time.monotonic() + 20
        decision: dict[str, object] = {}
        while "nodeReclaimResult" not in decision:
            assert time.monotonic() < deadline, agent.seen[-5:]
            decision = agent.lines.get(timeout=20)
            agent.seen.append(decision)
        result = decision["nodeReclaimResult"]
        assert isinstance(result, dict)
        assert result["enough"] is True and result["evictionSkipped"] is True
        assert (result["containersRemoved"], result["imagesRemoved"]) == (2, 1)
        assert result["dryRun"] is False
        assert agent.terminate() < 5
    assert containerd.runtime is not None
    assert len(containerd.runtime.list_containers()) == 1
    tags = {t for i in containerd.runtime.list_images() for t in i.repo_tags}
    unused = {f"nodeagent.test/unused-{n}:1" for n in range(3)}
    assert len(unused - tags) == 1  # one of them was enough
    assert free_bytes(containerd.imagefs) >= threshold + MiB
    assert sum("standalone without dry run" in str(r.get("message")) for r in agent.seen) == 1
