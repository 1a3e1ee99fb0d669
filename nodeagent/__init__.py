"""nodeagent: a node pressure and eviction agent for Kubernetes, and a pressure-aware scheduler.

The agent reads the node's signals (cgroup memory, filesystems, PIDs, PSI), evaluates
the kubelet's eviction thresholds with its exact semantics, sets its own node conditions
and taints, and evicts pods through the Eviction API. See README.md.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
