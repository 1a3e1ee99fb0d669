"""Structured logs: one record, two renderings (``--log-format text|json``).

Every line the agent writes is a stdlib :mod:`logging` record; the few that carry data
(a decision, an eviction, a degraded source) attach it as ``extra={"fields": {...}}``.
:class:`JsonFormatter` writes one JSON object per line with those fields at the top level
(what a log pipeline indexes, and what the benchmarks parse); :class:`TextFormatter`
writes the message and then ``key=value`` pairs for people. Both stamp the wall clock
in UTC with milliseconds; decision records also carry ``monotonic``, the agent's clock,
which compares with other processes' CLOCK_MONOTONIC readings on the same host.

:func:`configure` is called once by ``nodeagent run``; nothing here runs at import.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TextIO


class LogFormat(StrEnum):
    TEXT = "text"
    """``2026-05-01T10:00:00.123Z INFO decision memory.available=80Mi<100Mi ...``: for people."""
    JSON = "json"
    """One JSON object per line with the same fields: for log pipelines (and benchmarks)."""


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


FIELDS = "fields"
"""The ``extra`` key under which a record carries its structured fields."""

_LEVELS = {
    LogLevel.DEBUG: logging.DEBUG,
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
}


def fields_of(record: logging.LogRecord) -> Mapping[str, Any]:
    value = getattr(record, FIELDS, None)
    return value if isinstance(value, Mapping) else {}


def _timestamp(record: logging.LogRecord) -> str:
    stamp = datetime.fromtimestamp(record.created, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """``{"time": ..., "level": ..., "logger": ..., "message": ..., <fields>}``."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        document.update(fields_of(record))
        if record.exc_info:
            document["error"] = self.formatException(record.exc_info)
        return json.dumps(document, separators=(",", ":"), default=str)


def _text_value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and not any(c in value for c in ' "=') else json.dumps(value)
    return json.dumps(value, separators=(",", ":"), default=str)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message> key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            _timestamp(record),
            f"{record.levelname:<7}",
            f"{record.name}:",
            record.getMessage(),
        ]
        parts.extend(f"{key}={_text_value(value)}" for key, value in fields_of(record).items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(
    log_format: LogFormat, level: LogLevel, *, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record to ``stream`` (stderr) in ``log_format``.

    The agent's own loggers (``nodeagent.*``) log at ``level``; libraries (urllib3,
    kubernetes) only from WARNING, so a DEBUG run stays about the agent. Replaces any
    handler already on the root logger."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format is LogFormat.JSON else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("nodeagent").setLevel(_LEVELS[level])
    # The actuators' own INFO lines ("dry-run: would patch ...") repeat what the
    # actuation lines say with structured fields; they stay available at DEBUG.
    actuators = logging.DEBUG if level is LogLevel.DEBUG else logging.WARNING
    logging.getLogger("nodeagent.actuators").setLevel(actuators)
    return handler
