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

from benchmarks import sim_scheduler
from tests.sim.agent_sim import (
    AgentSimulation,
    agent_config,
    load_agent_config,
    run_agent_seed,
)
from tests.sim.scheduler_sim import Violation

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


class TestLongRun:
    """``python -m benchmarks.sim_scheduler --agent``: what a failing seed prints."""

    @staticmethod
    def failing_at(bad: int) -> object:
        def run(seed: int, steps: int = 150) -> None:
            if seed == bad:
                raise Violation(
                    f"agent invariant A5 violated at step 7 (t=103.50) [agent seed {seed}]: "
                    "the condition turned True at 103.50 without pressure\n  last steps:\n"
                    "     7 t=  103.50 pressure ends"
                )

        return run

    def test_a_failing_seed_is_printed_with_its_invariant_message_and_replay_command(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setattr(sim_scheduler, "run_agent_seed", self.failing_at(13))
        status = sim_scheduler.main(["--agent", "--seeds", "30", "--start", "5", "--jobs", "1"])
        out = capsys.readouterr().out
        assert status == 1
        assert (
            "FAILED seed 13: agent invariant A5 violated at step 7 (t=103.50) [agent seed 13]: "
            "the condition turned True at 103.50 without pressure\n"
            "  reproduce: python -m benchmarks.sim_scheduler --agent --replay 13\n"
        ) in out
        assert "simulated 30 seeds (5..34)" in out
        assert out.rstrip().endswith("1 failing: 13")

    def test_the_replay_prints_the_violation_with_its_steps(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setattr(sim_scheduler, "run_agent_seed", self.failing_at(13))
        assert sim_scheduler.main(["--agent", "--replay", "13"]) == 1
        assert "7 t=  103.50 pressure ends" in capsys.readouterr().out
        assert sim_scheduler.main(["--agent", "--replay", "14"]) == 0
        assert capsys.readouterr().out == "agent seed 14: every invariant held\n"
