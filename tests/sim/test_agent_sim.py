"""The agent's actuation under deterministic simulation (:mod:`tests.sim.agent_sim`):
seeded runs, and hypothesis drawing every choice. Replay one seed with
``python -m benchmarks.sim_scheduler --agent --replay SEED``."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from tests.sim.agent_sim import (
    AgentSimulation,
    agent_config,
    load_agent_config,
    run_agent_seed,
)

FAST_SEEDS = 100
CHUNK = 25


class TestAgentConfig:
    def test_the_shared_configuration_is_the_validated_one_for_each_host_root(
        self, tmp_path: Path
    ) -> None:
        assert agent_config(tmp_path) == load_agent_config(tmp_path)
        assert agent_config(tmp_path / "other").host_root == tmp_path / "other"


class TestAgentSeeds:
    @pytest.mark.parametrize("first", range(0, FAST_SEEDS, CHUNK))
    def test_every_agent_invariant_holds_for_the_fast_seeds(self, first: int) -> None:
        for seed in range(first, first + CHUNK):
            run_agent_seed(seed)

    @settings(
        max_examples=15,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.randoms(use_true_random=False))
    def test_every_agent_invariant_holds_for_drawn_choices(
        self, tmp_path: Path, rng: random.Random
    ) -> None:
        root = Path(tempfile.mkdtemp(dir=tmp_path))  # one host tree per example
        AgentSimulation(rng, root, label="[hypothesis]").run(100)
