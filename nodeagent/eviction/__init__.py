"""The eviction engine: thresholds, pressure, conditions, taints and which pods to evict.

``policy.EvictionPolicy.from_settings(config)`` resolves the configuration once;
``engine.evaluate(policy, state, observations, pods, now)`` is the pure decision;
``replay`` drives it over recorded traces (``nodeagent simulate``). See docs/eviction.md.

Part of the agent, and pure: may import :mod:`nodeagent.base`, :mod:`nodeagent.k8s` and
:mod:`nodeagent.model`.
"""
