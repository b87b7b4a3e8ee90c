"""JSON logs on stdout, one object per line, each carrying the correlation id of the work it is about.

Secrets never reach a log line: settings hide them from repr(), and nothing logs request headers or bodies.
"""

from __future__ import annotations

import contextvars
import logging
import sys

from pythonjsonlogger.json import JsonFormatter

correlation_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("correlation_id", default=None)


class _CorrelationFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "correlation_id"):
            record.correlation_id = correlation_id.get()
        return True


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(
        "{asctime}{levelname}{name}{message}{correlation_id}", style="{",
        rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
    ))
    handler.addFilter(_CorrelationFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("urllib3", "alembic.runtime.migration"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
