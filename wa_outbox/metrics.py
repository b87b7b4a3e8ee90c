"""The service's own Prometheus metrics (request metrics come from prometheus-flask-exporter)."""

from prometheus_client import Counter, Gauge

webhook_events = Counter("wa_outbox_webhook_events_total",
                         "Inbound webhook updates received, by whether they were new or a duplicate", ["result"])
webhook_rejected = Counter("wa_outbox_webhook_rejected_total",
                           "Webhook POSTs refused before storing anything, by reason", ["reason"])

# Queue state, read from Postgres when /metrics is scraped (so any web process reports the truth of every worker).
# "livemostrecent": in gunicorn's multiprocess mode the most recently scraped value wins.
queue_rows = Gauge("wa_outbox_queue_rows",
                   "Rows by queue and status (dead, and Meta-failed messages: the dead-letter queue)",
                   ["queue", "status"], multiprocess_mode="livemostrecent")
queue_oldest_age = Gauge("wa_outbox_queue_oldest_age_seconds", "Age of the oldest row by queue and status",
                         ["queue", "status"], multiprocess_mode="livemostrecent")
workers_alive = Gauge("wa_outbox_workers_alive", "Workers with a heartbeat in the last 30 s",
                      multiprocess_mode="livemostrecent")
worker_heartbeat_age = Gauge("wa_outbox_worker_heartbeat_age_seconds",
                             "Seconds since the most recent worker heartbeat (-1: no worker ever)",
                             multiprocess_mode="livemostrecent")
senders_paused = Gauge("wa_outbox_senders_paused", "Sender numbers paused by throttling or errors that need a human",
                       multiprocess_mode="livemostrecent")

_QUEUE_STATUSES = {"notifications": ("queued", "sending", "unknown", "dead", "failed"),
                   "webhook_events": ("queued", "processing", "dead")}


def refresh_queue_gauges(rows: list[dict]) -> None:
    """Set the queue gauges from queue_metrics.sql rows (queue, status, rows, age); absent statuses read 0."""
    seen = {(r["queue"], r["status"]): (r["rows"], r["age"]) for r in rows}
    for queue, statuses in _QUEUE_STATUSES.items():
        for status in statuses:
            n, age = seen.get((queue, status), (0, 0))
            queue_rows.labels(queue, status).set(n)
            queue_oldest_age.labels(queue, status).set(float(age))
    workers_alive.set(seen.get(("workers", "alive"), (0, 0))[0])
    worker_heartbeat_age.set(float(seen.get(("workers", "alive"), (0, -1))[1]))
    senders_paused.set(seen.get(("senders", "paused"), (0, 0))[0])
