"""The service's own Prometheus metrics (request metrics come from prometheus-flask-exporter)."""

from prometheus_client import Counter

webhook_events = Counter("wa_outbox_webhook_events_total",
                         "Inbound webhook updates received, by whether they were new or a duplicate", ["result"])
webhook_rejected = Counter("wa_outbox_webhook_rejected_total",
                           "Webhook POSTs refused before storing anything, by reason", ["reason"])
