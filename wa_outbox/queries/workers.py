"""Workers: heartbeats and metrics."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import sqlalchemy as sa

from .. import db
from ._run import _rows

# --- workers: heartbeats and metrics ---------------------------------------------------------------------------------

def heartbeat(engine: sa.Engine, *, worker_id: str, hostname: str, pid: int, state: str, info: str) -> None:
    """`info`: JSON text."""
    db.execute(engine, "heartbeat", {"worker_id": worker_id, "hostname": hostname, "pid": pid, "state": state,
                                     "info": info})


def worker_gone(engine: sa.Engine, *, worker_id: str) -> None:
    db.execute(engine, "worker_gone", {"worker_id": worker_id})


@dataclass(frozen=True, slots=True)
class MetricSeries:
    metric: str
    labels: dict[str, str]


def record_worker_metrics(engine: sa.Engine, *, worker_id: str, metrics: str) -> list[MetricSeries]:
    """Write a worker's metrics (`metrics`: JSON text); the series retired under it meanwhile."""
    return _rows(engine, "record_worker_metrics", MetricSeries, {"worker_id": worker_id, "metrics": metrics})


def retire_worker_metrics(engine: sa.Engine, *, stopping_worker_id: str | None) -> None:
    db.execute(engine, "retire_worker_metrics", {"stopping_worker_id": stopping_worker_id})


@dataclass(frozen=True, slots=True)
class MetricTotal:
    metric: str
    labels: dict[str, str]
    value: float


def worker_metrics_totals(engine: sa.Engine) -> list[MetricTotal]:
    return _rows(engine, "worker_metrics_totals", MetricTotal)


@dataclass(frozen=True, slots=True)
class QueueCount:
    queue: str
    status: str
    rows: int
    age: Decimal  # seconds the oldest row has waited (0: none waits; workers: since the last heartbeat, -1: never)


def queue_metrics(engine: sa.Engine) -> list[QueueCount]:
    return _rows(engine, "queue_metrics", QueueCount)
