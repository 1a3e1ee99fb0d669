"""What loading the configuration costs: the eviction settings alone, with the policy built
from them, and the whole ``load_config`` with the policy.

The eviction settings hold their thresholds parsed (a threshold statement is parsed once,
when the configuration is validated; the policy only combines the values). Run it against
two checkouts to compare them, one after the other and more than once, since absolute
times on a shared machine drift::

    python -m benchmarks.bench_config
    git worktree add /tmp/before <commit>        # another commit's nodeagent, then:
    cd /tmp && PYTHONPATH=/tmp/before python3 "$OLDPWD/benchmarks/bench_config.py"

Prints the best of ``--repeat`` rounds of ``--number`` calls, in microseconds per call.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from pathlib import Path

import nodeagent
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.settings import EvictionSettings

try:
    from nodeagent.agent.config import load_config
except ImportError:  # a checkout from before the configuration moved in with the agent
    from nodeagent.config import load_config  # type: ignore[import-not-found,no-redef]

SETTINGS = {
    "eviction_hard": "memory.available<500Mi,nodefs.available<10%,nodefs.inodesFree<5%,"
    "imagefs.available<15%,pid.available<1000,memory.pressure.some.avg10>40",
    "eviction_soft": "memory.available<1Gi,nodefs.available<15%,memory.pressure.some.avg10>20",
    "eviction_soft_grace_period": "memory.available=1m30s,nodefs.available=2m,"
    "memory.pressure.some.avg10=10s",
    "eviction_minimum_reclaim": "memory.available=100Mi,nodefs.available=500Mi,"
    "memory.pressure.some.avg10=5",
    "eviction_pressure_transition_period": "1m",
}
"""A configuration with every kind of threshold field set, as a node's might be."""


def cases() -> dict[str, Callable[[], object]]:
    return {
        "eviction settings": lambda: EvictionSettings.model_validate(SETTINGS),
        "settings + policy": lambda: EvictionPolicy.from_settings(
            EvictionSettings.model_validate(SETTINGS)
        ),
        "load_config + policy": lambda: EvictionPolicy.from_settings(
            load_config(environ={}, overrides=SETTINGS)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=100, help="calls per round")
    parser.add_argument("--repeat", type=int, default=40, help="rounds; the best is printed")
    args = parser.parse_args()
    tree = Path(nodeagent.__file__).resolve().parents[1]
    print(f"tree {tree}")
    for name, call in cases().items():
        best = min(timeit.repeat(call, number=args.number, repeat=args.repeat)) / args.number
        print(f"{name:22} {best * 1e6:8.1f} µs")


if __name__ == "__main__":
    main()
