"""Configuration fields of the actuators."""

from __future__ import annotations

from pydantic import BaseModel


class ActuationSettings(BaseModel):
    """How decisions are applied to the cluster: safety limits, names of conditions and taints."""
