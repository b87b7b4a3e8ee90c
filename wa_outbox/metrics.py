"""The service's own Prometheus metrics (request metrics come from prometheus-flask-exporter).

Three kinds:
- counted in the web process (`webhook_events`, `webhook_rejected`): prometheus_client counters, aggregated over
  gunicorn's worker processes by its multiprocess mode;
- read from Postgres at scrape time (queue depths and ages, heartbeats, paused senders, `wa_outbox_database_up`);
- counted by the workers (sends, latency, claims, pauses, inbound results, dead letters): each worker keeps them in
  memory (`WorkerMetrics`) and writes its cumulative totals to `wa_outbox.worker_metrics` with every heartbeat, and
  `/metrics` sums them over all workers, running and gone — a worker dyno cannot be scraped on Heroku.

The last two are built fresh for each scrape by the process answering it (`scrape_families`), so under gunicorn they
appear once, never once per worker process.
"""

from __future__ import annotations

import bisect
import enum
import http
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from .number_health import QUALITY_VALUES
from .states import DeliveryStatus, EndpointState, MessageStatus, WebhookEventKind

if TYPE_CHECKING:
    from .queries import MetricTotal, NumberHealthMetric, QueueCount


# --- label words: each label's values in one place, so every known series can be shown at 0 before first use ---------
class WebhookResult(enum.StrEnum):
    """`result` of wa_outbox_webhook_events_total."""
    NEW = "new"
    DUPLICATE = "duplicate"


class Rejection(enum.StrEnum):
    """`reason` of wa_outbox_webhook_rejected_total."""
    SIGNATURE = "signature"    # missing or wrong X-Hub-Signature-256 (the WaOutboxBadWebhookSignatures alert)
    PAYLOAD = "payload"        # signed, but not a webhook body
    TOO_LARGE = "too_large"    # past WA_OUTBOX_WEBHOOK_MAX_BYTES (413), by Content-Length or chunked
    WRONG_APP = "wrong_app"    # verified by one app, for a business account or number of another (403)


class Unregistered(enum.StrEnum):
    """`kind` of wa_outbox_webhook_unregistered_total (webhook_routing.py)."""
    NUMBER = "number"          # a change for a phone number id that is not registered
    WABA = "waba"              # a change without a number (template, account updates) for an unregistered WABA


class SendOutcome(enum.StrEnum):
    """`outcome` of wa_outbox_sends_total."""
    SENT = "sent"              # Meta accepted it: by its answer, or later by a status webhook (states.SENT_EVENTS)
    RETRY = "retry"            # an attempt spent, another scheduled
    THROTTLED = "throttled"    # not the message's fault (sender or pair paused): the attempt given back
    UNKNOWN = "unknown"        # may have reached Meta: settled by status webhooks
    DEAD = "dead"


def send_outcome(status: str, refund: bool) -> SendOutcome:
    """A send's record_outcomes entry (its new status, whether the attempt was given back) as its outcome label."""
    known: dict[str, SendOutcome] = {MessageStatus.SENT: SendOutcome.SENT, MessageStatus.DEAD: SendOutcome.DEAD,
                                     MessageStatus.UNKNOWN: SendOutcome.UNKNOWN}
    return known.get(status, SendOutcome.THROTTLED if refund else SendOutcome.RETRY)


class InboundResult(enum.StrEnum):
    """`result` of wa_outbox_inbound_events_total."""
    DONE = "done"
    RETRY = "retry"            # failed, queued for another attempt
    WAITING = "waiting"        # queued again without spending an attempt
    DEAD = "dead"
    LEASE_LOST = "lease_lost"  # another worker holds it now


class DeliveryOutcome(enum.StrEnum):
    """`outcome` of wa_outbox_deliveries_total: one attempt to push an event to an endpoint."""
    DELIVERED = "delivered"
    RETRY = "retry"            # failed; another attempt scheduled
    FAILED = "failed"          # failed, and the schedule ran out: replayable
    GONE = "gone"              # 410: the endpoint is disabled


class MediaFetchOutcome(enum.StrEnum):
    """`outcome` of wa_outbox_media_fetches_total: one fetch of an inbound media (lookup, download, store)."""
    STORED = "stored"
    RETRY = "retry"            # failed; another attempt scheduled
    TOKEN = "token"            # the sender's token was refused: the sender is paused, the media waits
    FAILED = "failed"          # final: Meta no longer knows the id, or the bytes never matched
    EXPIRED = "expired"        # the id is past its life
    TOO_LARGE = "too_large"    # over the size cap: recorded, not kept


class EndpointDisabledReason(enum.StrEnum):
    """`reason` of wa_outbox_endpoints_disabled_total (delivery_policy.DisabledReason)."""
    GONE = "gone"
    FAILING = "failing"


webhook_events = Counter("wa_outbox_webhook_events_total",
                         "Inbound webhook updates received, by whether they were new or a duplicate", ["result"])
webhook_rejected = Counter("wa_outbox_webhook_rejected_total",
                           "Webhook POSTs refused before storing anything, by reason", ["reason"])
webhook_unregistered = Counter("wa_outbox_webhook_unregistered_total",
                               "Webhook updates received (stored, acknowledged, attributed to no sender) for a number "
                               "(kind=number) or, without one, a business account (kind=waba) that is not registered",
                               ["kind"])


def initialise_web_counters() -> None:
    """Every known series of the web process's counters at 0, so /metrics shows them before the first webhook
    (rate() and the dashboard have a series from the deploy on). In multiprocess mode this writes them to the
    process's file, where the scrape finds them."""
    for result in WebhookResult:
        webhook_events.labels(result=result)
    for reason in Rejection:
        webhook_rejected.labels(reason=reason)
    for kind in Unregistered:
        webhook_unregistered.labels(kind=kind)


class RequestLabels:
    """The request metrics' labels bounded by what the app defines, so no request can add a series: a method the
    app routes (else "other"), a route rule (else "unmatched": no route, or a method it does not allow), a status
    code of the HTTP registry (else its class, "5xx")."""

    OTHER_METHOD = "other"
    UNMATCHED = "unmatched"

    def __init__(self, methods: Iterable[str], rules: Iterable[str]) -> None:
        self.methods = frozenset(methods)
        self.rules = frozenset(rules)

    def __call__(self, labels: dict) -> dict:
        bounded = dict(labels)
        if "method" in bounded and bounded["method"] not in self.methods:
            bounded["method"] = self.OTHER_METHOD
        if "url_rule" in bounded and str(bounded["url_rule"]) not in self.rules:
            bounded["url_rule"] = self.UNMATCHED
        if "status" in bounded:
            bounded["status"] = _status_label(bounded["status"])
        return bounded


_KNOWN_STATUSES = frozenset(int(s) for s in http.HTTPStatus)


def _status_label(status: object) -> str:
    try:
        code = int(str(status))
    except ValueError:
        return "other"
    if code in _KNOWN_STATUSES:
        return str(code)
    return f"{code // 100}xx" if 100 <= code <= 599 else "other"

_QUEUE_STATUSES = {"notifications": ("queued", "sending", "unknown", "dead", "failed"),
                   "webhook_events": ("queued", "processing", "dead"),
                   # not yet delivered (queued: its age is the oldest undelivered's), and failed (replayable)
                   "deliveries": (DeliveryStatus.QUEUED, DeliveryStatus.DELIVERING, DeliveryStatus.FAILED)}

# --- what the workers count -----------------------------------------------------------------------------------------
# name → (help, label names, label values always shown even at 0: so alerts and dashboards find a series from the
# deploy on). Shown by `worker_families`, never written to the table (a worker writes only what it counted).
WORKER_COUNTERS: dict[str, tuple[str, tuple[str, ...], tuple[tuple[str, ...], ...]]] = {
    "wa_outbox_sends_total": (
        "Cloud API sends by outcome (sent, retry, throttled, unknown, dead) and Graph error code (none: no error); "
        "sent also counts an unknown send that a status webhook settled later (reconciled)",
        ("outcome", "code"), tuple((outcome.value, "none") for outcome in SendOutcome)),
    "wa_outbox_dead_letters_total": (
        "Messages (queue=notifications) and inbound webhook events (queue=webhook_events) that went dead",
        ("queue",), (("notifications",), ("webhook_events",))),
    "wa_outbox_throttle_pauses_total": (
        "Pauses applied after a send: sender_throttled (rate limit), sender_paused (needs a human), pair_limit",
        ("reason",), (("sender_throttled",), ("sender_paused",), ("pair_limit",))),
    "wa_outbox_claims_total": ("Messages claimed for sending", (), ((),)),
    "wa_outbox_sender_alerts_total": (
        "Senders paused until a human acts (token, permission, account), by phone_number_id", ("phone_number_id",),
        ()),
    "wa_outbox_inbound_events_total": (
        "Inbound webhook events processed, by kind (status, message, change) and result (done, retry, waiting, dead, "
        "lease_lost)", ("kind", "result"),
        tuple((kind.value, result.value) for kind in WebhookEventKind for result in InboundResult)),
    "wa_outbox_handler_failures_total": ("Inbound handler calls that raised", (), ((),)),
    "wa_outbox_deliveries_total": (
        "Delivery attempts to endpoints by outcome (delivered, retry, failed: the schedule ran out, gone: 410)",
        ("outcome",), tuple((outcome.value,) for outcome in DeliveryOutcome)),
    "wa_outbox_endpoints_disabled_total": (
        "Endpoints the workers disabled, by reason (gone: it answered 410, failing: it failed for N days)",
        ("reason",), tuple((reason.value,) for reason in EndpointDisabledReason)),
    # issue 22: sends whose slot slipped (a stalled machine) and went in a new slot instead of late (worker/_sender.py)
    "wa_outbox_sends_reslotted_total": ("Sends whose send slot had slipped just before the request: re-slotted, "
                                        "not sent late", (), ((),)),
    # outbound media (mediaout)
    "wa_outbox_media_uploads_total": (
        "Outbound files uploaded to Meta (POST /{phone-number-id}/media) by outcome: uploaded, or what a failed "
        "upload did to its message (retry, dead, throttle, pause_sender)", ("outcome",), (("uploaded",),)),
    # inbound media (worker/_media.py)
    "wa_outbox_media_fetches_total": (
        "Inbound media fetches by outcome (stored, retry, token: the sender's token was refused, failed, expired, "
        "too_large)", ("outcome",), tuple((outcome.value,) for outcome in MediaFetchOutcome)),
    # --- templates (issue 20): messages a template held, and those its disabling dead-lettered ---
    "wa_outbox_template_holds_total": (
        "Messages held by their template (reason: template_paused, template_not_approved): queued, no attempt spent",
        ("reason",), (("template_paused",), ("template_not_approved",))),
    "wa_outbox_template_dead_letters_total": (
        "Messages dead-lettered because their template was disabled (reason template_disabled; their campaigns are "
        "paused)", (), ((),)),
}
SEND_DURATION = "wa_outbox_send_duration_seconds"
SEND_DURATION_HELP = "Cloud API call latency, from request to answer (or timeout)"
SEND_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)


def series_key(metric: str, labels: dict[str, str]) -> tuple[str, str]:
    """A series' identity: its stored name and its labels as canonical JSON (the table's key is the jsonb)."""
    return metric, json.dumps(labels, sort_keys=True)


class WorkerMetrics:
    """One worker's counters and latency histogram, in memory; thread-safe, no I/O. `snapshot()` gives cumulative
    values since the worker started, written to Postgres with each heartbeat."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str], float] = {}
        self._buckets = [0] * (len(SEND_DURATION_BUCKETS) + 1)  # the last one: above every bound (+Inf only)
        self._duration_sum = 0.0

    def count(self, name: str, amount: float = 1, **labels: object) -> None:
        key = series_key(name, {k: str(v) for k, v in labels.items()})
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def observe_send(self, seconds: float) -> None:
        with self._lock:
            self._buckets[bisect.bisect_left(SEND_DURATION_BUCKETS, seconds)] += 1
            self._duration_sum += seconds

    def snapshot(self) -> dict[tuple[str, str], float]:
        """Every series, cumulative: counters, and the histogram as Prometheus stores it (`_bucket` per `le`,
        cumulative; `_sum`; `_count`)."""
        with self._lock:
            values = dict(self._values)
            buckets, total = list(self._buckets), self._duration_sum
        running = 0
        for bound, n in zip((*map(_le, SEND_DURATION_BUCKETS), "+Inf"), buckets, strict=True):
            running += n
            values[series_key(f"{SEND_DURATION}_bucket", {"le": bound})] = float(running)
        values[series_key(f"{SEND_DURATION}_sum", {})] = total
        values[series_key(f"{SEND_DURATION}_count", {})] = float(running)
        return values


def _le(bound: float) -> str:
    return repr(float(bound))


def worker_families(totals: Iterable[MetricTotal]) -> Iterator[Metric]:
    """The workers' metric families from rows (metric, labels (dict), value): the sums over all workers."""
    by_metric: dict[str, list[tuple[dict, float]]] = {}
    for row in totals:
        by_metric.setdefault(row.metric, []).append((row.labels, float(row.value)))
    for name, (help_text, label_names, shown) in WORKER_COUNTERS.items():
        family = CounterMetricFamily(name, help_text, labels=label_names)
        seen = set()
        for labels, value in by_metric.get(name, ()):
            values = tuple(str(labels.get(label, "")) for label in label_names)
            seen.add(values)
            family.add_metric(values, value)
        for values in shown:
            if values not in seen:
                family.add_metric(values, 0.0)
        yield family
    buckets = {labels.get("le"): value for labels, value in by_metric.get(f"{SEND_DURATION}_bucket", ())}
    bounds = (*map(_le, SEND_DURATION_BUCKETS), "+Inf")
    total = sum(v for _, v in by_metric.get(f"{SEND_DURATION}_sum", ()))
    histogram = HistogramMetricFamily(SEND_DURATION, SEND_DURATION_HELP)
    histogram.add_metric([], [(b, buckets.get(b, 0.0)) for b in bounds], total)
    yield histogram


def database_families(queue_rows: list[QueueCount] | None,
                      worker_rows: list[MetricTotal] | None) -> Iterator[Metric]:
    """What /metrics reads from Postgres at scrape time. None for both: the database did not answer — then only
    `wa_outbox_database_up 0` (and the workers' families, empty), never stale numbers."""
    up = GaugeMetricFamily("wa_outbox_database_up", "1 when the web process's database answered this scrape, else 0")
    up.add_metric([], 0.0 if queue_rows is None else 1.0)
    yield up
    rows = GaugeMetricFamily("wa_outbox_queue_rows", "Rows by queue and status (dead = the dead-letter queue)",
                             labels=("queue", "status"))
    ages = GaugeMetricFamily("wa_outbox_queue_oldest_age_seconds", "Age of the oldest row by queue and status",
                             labels=("queue", "status"))
    alive = GaugeMetricFamily("wa_outbox_workers_alive", "Workers with a heartbeat in the last 30 s")
    heartbeat = GaugeMetricFamily("wa_outbox_worker_heartbeat_age_seconds",
                                  "Seconds since the most recent worker heartbeat (-1: no worker ever)")
    paused = GaugeMetricFamily("wa_outbox_senders_paused",
                               "Sender numbers paused by throttling or errors that need a human")
    endpoints = GaugeMetricFamily("wa_outbox_endpoints", "Endpoints by state (enabled, disabled)", labels=("state",))
    lag = GaugeMetricFamily("wa_outbox_deliveries_lag_seconds",
                            "How far the push engine is behind: the age of the oldest event an enabled endpoint has "
                            "not had dispatched, or how long the most overdue due delivery has waited for a worker")
    if queue_rows is not None:
        seen = {(r.queue, r.status): (r.rows, r.age) for r in queue_rows}
        for queue, statuses in _QUEUE_STATUSES.items():
            for status in statuses:
                n, age = seen.get((queue, status), (0, 0))
                rows.add_metric((queue, status), float(n))
                ages.add_metric((queue, status), float(age))
        alive.add_metric([], float(seen.get(("workers", "alive"), (0, 0))[0]))
        heartbeat.add_metric([], float(seen.get(("workers", "alive"), (0, -1))[1]))
        paused.add_metric([], float(seen.get(("senders", "paused"), (0, 0))[0]))
        for state in EndpointState:
            endpoints.add_metric((state.value,), float(seen.get(("endpoints", state.value), (0, 0))[0]))
        lag.add_metric([], float(seen.get(("deliveries", "lag"), (0, 0))[1]))
    yield from (rows, ages, alive, heartbeat, paused, endpoints, lag)
    if queue_rows is not None:
        yield from template_families(seen)
    yield from portfolio_families(queue_rows)
    yield from worker_families(worker_rows or ())


# --- number health (issue 20): what Meta last reported of each registered sender, read at scrape time ----------------

def number_health_families(rows: list[NumberHealthMetric] | None) -> Iterator[Metric]:
    """One series per sender Meta has reported on (number_health). None: the database did not answer (nothing
    shown, never stale numbers). The quality as a number (number_health.QUALITY_VALUES): 3 GREEN, 2 YELLOW, 1 RED,
    0 UNKNOWN; a sender with no rating reported has no quality series."""
    labels = ("phone_number_id",)
    quality = GaugeMetricFamily("wa_outbox_sender_quality", "The sender's quality rating as Meta last reported it: "
                                "3 GREEN (high), 2 YELLOW (medium), 1 RED (low), 0 UNKNOWN", labels=labels)
    flagged = GaugeMetricFamily("wa_outbox_sender_flagged", "1 while Meta has the sender flagged for low quality",
                                labels=labels)
    restricted = GaugeMetricFamily("wa_outbox_sender_restricted", "1 while the sender's business account is under a "
                                   "restriction Meta announced (account_update) that has not expired", labels=labels)
    banned = GaugeMetricFamily("wa_outbox_sender_banned", "1 while Meta has the sender's business account disabled "
                               "or scheduled for disabling", labels=labels)
    limit = GaugeMetricFamily("wa_outbox_sender_messaging_limit", "The customers in 24 hours the sender's messaging "
                              "limit tier names (absent: unlimited or not reported)", labels=labels)
    throughput = GaugeMetricFamily("wa_outbox_sender_throughput_mps", "The messages per second Meta's throughput "
                                   "level for the sender allows (80 standard, 1000 high)", labels=labels)
    # Counts over every sender, always shown (0 before any report): what the shipped alerts read; the per-sender
    # series above say which.
    counted = {"flagged": GaugeMetricFamily("wa_outbox_senders_flagged", "Senders Meta has flagged for low quality"),
               "restricted": GaugeMetricFamily("wa_outbox_senders_restricted",
                                               "Senders whose business account is under a restriction not expired"),
               "banned": GaugeMetricFamily("wa_outbox_senders_banned",
                                           "Senders whose business account Meta disabled or is about to disable"),
               "quality_dropped": GaugeMetricFamily("wa_outbox_senders_quality_dropped",
                                                    "Senders whose last quality rating change lowered it")}
    if rows is not None:
        for attribute, family in counted.items():
            family.add_metric([], float(sum(bool(getattr(r, attribute)) for r in rows)))
    for r in rows or ():
        key = (r.phone_number_id,)
        if r.quality_rating is not None:
            quality.add_metric(key, QUALITY_VALUES.get(r.quality_rating, 0.0))
        flagged.add_metric(key, float(r.flagged))
        restricted.add_metric(key, float(r.restricted))
        banned.add_metric(key, float(r.banned))
        if r.messaging_limit is not None:
            limit.add_metric(key, float(r.messaging_limit))
        if r.throughput_mps is not None:
            throughput.add_metric(key, float(r.throughput_mps))
    yield from (quality, flagged, restricted, banned, limit, throughput, *counted.values())


def template_families(seen: Mapping[tuple[str, str], tuple[Any, Any]]) -> Iterator[Metric]:
    """Issue 20's template gauges, from queue_metrics.sql's 'templates' rows."""
    held = GaugeMetricFamily("wa_outbox_template_held_messages",
                             "Messages held by their template (paused or not approved): queued, waiting for it")
    held.add_metric([], float(seen.get(("templates", "held"), (0, 0))[0]))
    states = GaugeMetricFamily("wa_outbox_templates", "Templates known to be paused or disabled, by status",
                               labels=("status",))
    for status in ("paused", "disabled"):
        states.add_metric((status,), float(seen.get(("templates", status), (0, 0))[0]))
    pending = GaugeMetricFamily("wa_outbox_template_category_changes_pending",
                                "Template category changes Meta announced (template_category_update with "
                                "correct_category) that have not taken effect yet")
    pending.add_metric([], float(seen.get(("templates", "category_change_pending"), (0, 0))[0]))
    soonest = GaugeMetricFamily("wa_outbox_template_category_change_seconds",
                                "Seconds until the soonest announced template category change takes effect (0: none)")
    soonest.add_metric([], float(seen.get(("templates", "category_change_pending"), (0, 0))[1]))
    yield from (held, states, pending, soonest)



def portfolio_families(queue_rows: list[QueueCount] | None) -> Iterator[Metric]:
    """The messaging limit of each business portfolio that has one (queue_metrics.sql's 'portfolios' rows: units
    left in `rows`, messages held by the limit in `age`): one series per such portfolio, bounded by the operator."""
    remaining = GaugeMetricFamily("wa_outbox_portfolio_budget_remaining",
                                  "Units of the business portfolio's messaging limit left now (unique customers it "
                                  "may still reach outside a service window in the moving 24 hours)",
                                  labels=("portfolio_id",))
    held = GaugeMetricFamily("wa_outbox_portfolio_messages_held",
                             "Messages waiting because the business portfolio's messaging limit is used up",
                             labels=("portfolio_id",))
    for r in queue_rows or ():
        if r.queue == "portfolios":
            remaining.add_metric((r.status,), float(r.rows))
            held.add_metric((r.status,), float(r.age))
    yield from (remaining, held)
