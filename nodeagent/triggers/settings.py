"""Configuration fields of the event-driven triggers."""

from __future__ import annotations

from pydantic import BaseModel


class TriggerSettings(BaseModel):
    """Kernel notifications that wake the loop early."""
