"""Configuration fields of the eviction engine."""

from __future__ import annotations

from pydantic import BaseModel


class EvictionSettings(BaseModel):
    """Eviction thresholds and policy, with the kubelet's field names."""
