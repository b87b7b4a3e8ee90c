"""Worker heartbeats in wa_outbox.workers (monitoring alerts when a worker's heartbeat goes stale), and the worker's
metrics, written with each heartbeat to wa_outbox.worker_metrics for the web process's /metrics."""

from __future__ import annotations

import json
import os
import socket

import sqlalchemy as sa

from .. import queries
from ..metrics import WorkerMetrics, series_key


def beat(engine: sa.Engine, worker_id: str, state: str, info: dict) -> None:
    queries.heartbeat(engine, worker_id=worker_id, hostname=socket.gethostname(), pid=os.getpid(), state=state,
                      info=json.dumps(info))


def gone(engine: sa.Engine, worker_id: str) -> None:
    queries.worker_gone(engine, worker_id=worker_id)


class MetricsFlusher:
    """Writes a worker's cumulative metrics in one statement per heartbeat (record_worker_metrics.sql).

    The rule that keeps /metrics' sums from going backwards: a worker only ever raises its own rows; when it stops
    cleanly it folds them into the 'retired' rows (`retire`), and rows nobody wrote for a day (a killed worker's) are
    folded by whichever worker retires next. Should a worker's rows be folded while it still runs (it could not write
    for a day), the statement says so and the worker counts from the folded value on (`_baseline`): nothing is
    counted twice."""

    def __init__(self, engine: sa.Engine, worker_id: str, metrics: WorkerMetrics):
        self.engine = engine
        self.worker_id = worker_id
        self.metrics = metrics
        self._written: dict[tuple[str, str], float] = {}   # series → the value last written (net of the baseline)
        self._baseline: dict[tuple[str, str], float] = {}  # series → what was retired while this worker ran

    def flush(self) -> None:
        snapshot = self.metrics.snapshot()
        for _ in range(2):  # a second statement only when some rows were retired under this worker
            values = {key: value - self._baseline.get(key, 0.0) for key, value in snapshot.items()}
            entries = [{"metric": metric, "labels": json.loads(labels), "value": value,
                        "seen": (metric, labels) in self._written} for (metric, labels), value in values.items()]
            lost = queries.record_worker_metrics(self.engine, worker_id=self.worker_id, metrics=json.dumps(entries))
            lost_keys = {series_key(row.metric, row.labels) for row in lost}
            for key in lost_keys:  # retired at the value last written: count on from there, as a new row
                self._baseline[key] = self._baseline.get(key, 0.0) + self._written.pop(key)
            self._written.update({key: value for key, value in values.items() if key not in lost_keys})
            if not lost_keys:
                return

    def retire(self, *, stopping: bool) -> None:
        """Fold the rows of workers silent for a day into the 'retired' rows; with `stopping`, this worker's too
        (call `flush` first: its final totals)."""
        queries.retire_worker_metrics(self.engine, stopping_worker_id=self.worker_id if stopping else None)
