"""Logs: JSON for machines, one object per line, or one readable line per event for people (`LOG_FORMAT=json|console`;
unset: console when the stream is a terminal, JSON otherwise — the production default, where stdout is a pipe).
Each line carries the correlation id of the work it is about.

`wa_outbox.events` is the per-event narrative (one line per request, each message's life: queued → sending → sent →
delivered → read, retries with the reason). It logs at DEBUG, so production JSON at LOG_LEVEL=INFO stays quiet (the
timeline in Postgres has it all); the console format shows it at INFO.

Secrets never reach a log line: settings hide them from repr(), and nothing logs request headers or bodies.
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
import uuid
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

correlation_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("correlation_id", default=None)

_USABLE_CORRELATION_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def one_line(exc: BaseException) -> str:
    """An exception as one log line: its type and the first line of its message (a driver's message can span
    several). Not scrubbed: a caller with a DATABASE_URL in reach passes it through config.scrub()."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def correlation_id_of(given: str) -> str:
    """A request's correlation id: the caller's X-Correlation-Id when it is usable, else a new one."""
    return given if _USABLE_CORRELATION_ID.fullmatch(given) else uuid.uuid4().hex

events = logging.getLogger("wa_outbox.events")  # the per-event narrative (see the module's docstring)

# Loggers that speak only when something fails (their INFO is start-up chatter: initdb, "Running upgrade …").
QUIET_LOGGERS = ("urllib3", "alembic", "alembic.runtime.migration", "pgserver")

# Extras the console leaves out: its message already says them (the JSON format keeps every one).
_SAID_IN_THE_MESSAGE = {"notification_id", "attempt", "detail"}
# Attributes every LogRecord has: anything else on a record came in `extra=` and is shown by the console format.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "correlation_id",
                                                                         "taskName"}


class _CorrelationFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "correlation_id"):
            record.correlation_id = correlation_id.get()
        return True


def choose_format(requested: str | None, stream: TextIO) -> str:
    """`json` or `console`: as requested (LOG_FORMAT), else console for a terminal and JSON for anything else."""
    if requested in ("json", "console"):
        return requested
    try:
        return "console" if stream.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


class ConsoleFormatter(logging.Formatter):
    """`12:00:01 message 17 sent  attempt=1 ms=80.2` — time, the message, then the extras that matter; warnings and
    errors marked (in colour on a terminal)."""

    _MARKS = {logging.WARNING: ("WARN ", "\033[33m"), logging.ERROR: ("ERROR ", "\033[31m"),
              logging.CRITICAL: ("CRIT ", "\033[1;31m")}

    def __init__(self, colour: bool = False) -> None:
        super().__init__()
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        when = self.formatTime(record, "%H:%M:%S")
        mark, colour = self._MARKS.get(record.levelno, ("", ""))
        extras = " ".join(f"{k}={_short(v)}" for k, v in vars(record).items()
                          if k not in _STANDARD and k not in _SAID_IN_THE_MESSAGE and v is not None
                          and not k.startswith("_"))
        text = f"{mark}{record.getMessage()}"
        if self.colour and colour:
            text = f"{colour}{text}\033[0m"
        line = f"{when} {text}" + (f"  \033[2m{extras}\033[0m" if self.colour and extras else
                                    f"  {extras}" if extras else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 120 else text[:117] + "..."


def json_formatter() -> JsonFormatter:
    return JsonFormatter("{asctime}{levelname}{name}{message}{correlation_id}", style="{",
                         rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"})


def formatter_for(fmt: str, stream: TextIO) -> logging.Formatter:
    if fmt == "console":
        try:
            colour = stream.isatty()
        except (AttributeError, ValueError):
            colour = False
        return ConsoleFormatter(colour=colour)
    return json_formatter()


def configure(level: str = "INFO", fmt: str | None = None, stream: TextIO | None = None) -> str:
    """Log to `stream` (stdout: the services; the CLI passes stderr, keeping stdout for results) in format `fmt`
    (None: chosen as `choose_format` says). Returns the format chosen."""
    stream = stream or sys.stdout
    chosen = choose_format(fmt, stream)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter_for(chosen, stream))
    handler.addFilter(_CorrelationFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    # The console shows the per-event narrative at INFO; JSON only at DEBUG.
    events.setLevel(logging.DEBUG if chosen == "console" and root.level <= logging.INFO else logging.NOTSET)
    return chosen
