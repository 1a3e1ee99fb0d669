"""When the loop's periodic reads are due.

Two polls run at their own intervals: the node poll (memory, PIDs, PSI: the safety net
under the kernel triggers) and the filesystem poll (statvfs, the only detector for disk
space). The loop asks :meth:`PollSchedule.timeout` how long it may wait for a trigger,
reads what :meth:`PollSchedule.due` names, and records it with
:meth:`PollSchedule.ran`; a read caused by a trigger is recorded the same way, so the
next poll counts from the freshest data. Pure: ``now`` is always passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from nodeagent.triggers.settings import TriggerSettings


class Poll(StrEnum):
    NODE = "node"
    """Memory, PIDs and PSI, per second by default."""
    FILESYSTEMS = "filesystems"
    """statvfs of nodefs, imagefs and containerfs."""


@dataclass(frozen=True, slots=True)
class PollSchedule:
    intervals: Mapping[Poll, float]
    last_run: Mapping[Poll, float] = field(default_factory=lambda: MappingProxyType({}))
    """When each poll last ran; a poll that never ran is due at once."""

    @classmethod
    def from_settings(cls, settings: TriggerSettings) -> PollSchedule:
        return cls(
            MappingProxyType(
                {
                    Poll.NODE: settings.poll_interval,
                    Poll.FILESYSTEMS: settings.filesystem_poll_interval,
                }
            )
        )

    def next_due(self, poll: Poll) -> float:
        last = self.last_run.get(poll)
        return float("-inf") if last is None else last + self.intervals[poll]

    def due(self, now: float) -> frozenset[Poll]:
        return frozenset(poll for poll in self.intervals if self.next_due(poll) <= now)

    def timeout(self, now: float) -> float:
        """Seconds until the next poll is due (0 when one already is)."""
        return max(0.0, min(self.next_due(poll) for poll in self.intervals) - now)

    def ran(self, polls: Iterable[Poll], now: float) -> PollSchedule:
        last = dict(self.last_run)
        last.update(dict.fromkeys(polls, now))
        return replace(self, last_run=MappingProxyType(last))
