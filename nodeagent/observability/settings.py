"""Configuration fields of metrics and health endpoints."""

from __future__ import annotations

from pydantic import BaseModel


class ObservabilitySettings(BaseModel):
    """Metrics and health endpoints."""
