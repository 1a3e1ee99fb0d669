"""The container runtime, through its CRI socket (gRPC): the containers and images the
agent's node-level reclaim removes and the image filesystem's usage. Part of the agent;
may import :mod:`nodeagent.base` only. The fake runtime for tests is in ``tests/doubles``.
"""
