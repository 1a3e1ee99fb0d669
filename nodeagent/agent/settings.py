"""Configuration fields of the agent loop."""

from __future__ import annotations

from pydantic import BaseModel


class AgentSettings(BaseModel):
    """The agent loop: node identity, cluster access, intervals, logging."""
