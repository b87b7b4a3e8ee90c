"""The worker process: outbound sends, inbound webhook processing, and maintenance, all against Postgres.

Threads of one worker:
- main: the producer — claims due messages into free send slots (`_sender.py`);
- dispatcher: holds claimed rows until just before their send slot, then hands each to a send thread (`_sender.py`);
- send-N: the sends, through one pooled HTTP session (`_transport.py`), judged by `_classify.py`;
- recorder: writes outcomes back in batches (`_sender.py`);
- listener: LISTEN wa_outbox_notifications, so an enqueue wakes the producer at once (polling is the fallback, and
  all there is with WA_OUTBOX_LISTEN=false), and a sender paused by any worker stops here too before its reserved
  slots (without the listener, only the worker that was throttled stops at once);
- inbound: drains webhook_events (`_inbound.py`);
- deliveries: pushes events to endpoints (`_deliverer.py`: dispatch and claim; deliveries-recorder records), with
  deliver-N threads of its own (WA_OUTBOX_DELIVERY_CONCURRENCY), woken by LISTEN wa_outbox_events (events to
  dispatch) and wa_outbox_deliveries (deliveries dispatched, by any worker, to claim); all of them at
  WA_OUTBOX_DELIVERY_NICE (`_priority.py`): the worker's background work;
- signals: turns SIGTERM and SIGINT into stop() (`stop_signals.py`);
- maintenance: heartbeat, rescuer, reconciler, every few seconds.
Any number of workers may run on any number of machines: every claim is FOR UPDATE SKIP LOCKED and every recovery
is guarded, so no leader is needed.

Postgres may be away at start (`wait_until_ready` waits, with capped backoff, until it answers and is migrated) and
at any time later: every thread catches the failure, logs one line, waits, and goes on.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from wsgiref.simple_server import WSGIServer

import psycopg
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, start_http_server

from .. import db, queries
from ..config import Settings, redact_url, scrub
from ..logs import one_line
from ..metrics import WorkerMetrics, worker_families
from ..retry import backoff_seconds
from ._analyzer import analyze_if_needed
from ._deliverer import Deliverer
from ._heartbeat import MetricsFlusher, beat, gone
from ._inbound import Handler, InboundProcessor, load_handlers
from ._media import MediaFetcher
from ._reconciler import release_stalled_lines, settle_unknown
from ._rescuer import rescue
from ._sender import FAILURE_BACKOFF_CAP, Sender
from ._transport import DryRunTransport, GraphTransport, Transport

log = logging.getLogger("wa_outbox.worker")

NOTIFY_CHANNEL = "wa_outbox_notifications"
EVENTS_CHANNEL = "wa_outbox_events"   # NOTIFYed by every statement that writes events: dispatch them now
DELIVERIES_CHANNEL = "wa_outbox_deliveries"  # NOTIFYed by a dispatch that wrote deliveries: claim them now
REGISTRY_CHANNEL = "wa_outbox_registry"  # every registry change (a sender's token among them): drop cached tokens
MAINTENANCE_INTERVAL = 5.0
INBOUND_IDLE_WAIT = 0.5
READY_BACKOFF_BASE = 1.0   # seconds: first wait for a database that is away or not migrated at start
READY_BACKOFF_CAP = 30.0   # the longest wait between two tries
CONNECT_TIMEOUT = 5        # seconds: a try must not block SIGTERM for long


def database_not_ready(settings: Settings) -> str | None:
    """Why the worker cannot start yet (the database does not answer, or is not migrated to this version's head),
    or None when it can."""
    from .. import migrate  # noqa: PLC0415 - alembic takes a second to import: only `wa-outbox worker` checks this
    try:
        with db.connect(settings, connect_timeout=CONNECT_TIMEOUT, autocommit=True,
                        application_name="wa-outbox-worker") as conn:
            current = queries.schema_version(conn)
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return "the database is not migrated yet (is the release phase, `wa-outbox db upgrade`, still running?)"
    except psycopg.Error as exc:
        url = settings.required("database_url")
        return f"cannot reach the database at {redact_url(url)}: " + scrub(one_line(exc), url)
    needed, known = migrate.head(), migrate.revisions()
    if current is None or (current != needed and current in known):
        return (f"the database schema is at {current or 'no revision'}, this version needs {needed} "
                f"(is the release phase, `wa-outbox db upgrade`, still running?)")
    return None  # at head, or at a revision newer than this code (a deploy in progress): go on


def wait_until_ready(settings: Settings, stopping: threading.Event, prepare=None) -> bool:
    """Wait until the database answers and is migrated, then run `prepare()` (start-up writes); retry with capped
    exponential backoff, one log line per try, until it all succeeds (True) or `stopping` is set (False).

    A worker that exited here would be restarted by the platform with its own, longer back-off: waiting keeps one
    ready to work the moment the database is."""
    attempt = 0
    while not stopping.is_set():
        attempt += 1
        problem = database_not_ready(settings)
        if problem is None and prepare is not None:
            try:
                prepare()
            except psycopg.Error as exc:
                problem = "start-up write failed: " + scrub(one_line(exc), settings.database_url)
        if problem is None:
            if attempt > 1:
                log.info("database ready after %d tries", attempt)
            return True
        delay = backoff_seconds(attempt, base=READY_BACKOFF_BASE, cap=READY_BACKOFF_CAP)
        log.warning("waiting for the database (try %d): %s; next try in %.1f s", attempt, problem, delay)
        stopping.wait(delay)
    log.info("stopped while waiting for the database")
    return False


# The worker's pool: up to db.pool_limit(4) = 6 connections, all kept. Pools of 8 (up to 12) drained 15-25 % slower
# in bench/outbox.py's full drain (three A/B pairs, 2026-12-03): more of the send threads' statements at once on the
# same cores and the same sender's rows. (Before 2026-12-06 the 2 above 4 were closed on return and opened again,
# about 13 backends a second per worker at 300 messages/s: db.create_engine.)
WORKER_POOL_SIZE = 4


class Worker:
    def __init__(self, settings: Settings, *, engine: sa.Engine | None = None, transport: Transport | None = None,
                 handlers: list[Handler] | None = None, worker_id: str | None = None):
        self.settings = settings
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.engine = engine or db.create_engine(
            settings.required("database_url"), pool_size=WORKER_POOL_SIZE, application_name="wa-outbox-worker",
            isolation_level="AUTOCOMMIT", prepared_statements=settings.db_prepared_statements)
        self.transport = transport or (DryRunTransport() if settings.dry_run else GraphTransport(
            settings.api_base_url, settings.access_token or "", pool_size=settings.worker_concurrency,
            connect_timeout=settings.connect_timeout, read_timeout=settings.send_timeout))
        self.policy = settings.retry_policy()
        self.metrics = WorkerMetrics()
        self.metrics_flusher = MetricsFlusher(self.engine, self.worker_id, self.metrics)
        self.sender = Sender(self.engine, self.transport, settings, self.worker_id, self.policy, self.metrics)
        self.inbound = InboundProcessor(
            self.engine, self.worker_id, load_handlers(settings.inbound_handlers) if handlers is None else handlers,
            self.policy, settings.lease_seconds, metrics=self.metrics)
        # Deliveries yield while the sends are held back by their claims: a saturated worker sends first.
        self.deliverer = Deliverer(self.engine, settings, self.worker_id, self.metrics,
                                   yield_to=lambda: self.sender.claim_bound)
        # Inbound media: fetched on threads of their own, with the senders' tokens (the same cache the sends use)
        self.media = MediaFetcher(settings, self.worker_id, self.metrics, self.sender.tokens)
        self.inbound.on_media = self.media.wake.set
        self._metrics_server: WSGIServer | None = None
        self.stopping = threading.Event()
        self.listening = threading.Event()  # set while the LISTEN is registered: an enqueue from now on wakes us
        self._recorder_done = threading.Event()
        self._threads: list[threading.Thread] = []

    def require_credentials(self) -> None:
        """ConfigError unless the worker has something to send with: WHATSAPP_ACCESS_TOKEN (with
        WHATSAPP_PHONE_NUMBER_ID), or at least one registered sender."""
        self.settings.require_worker(senders_registered=queries.registry_version(self.engine).senders > 0)

    def run(self) -> None:
        """Work until stop() is called; then drain within the shutdown grace and return."""
        log.info("worker %s starting: concurrency %d, %s", self.worker_id, self.settings.worker_concurrency,
                 "dry run" if self.settings.dry_run else redact_url(self.settings.api_base_url))
        if self.settings.worker_metrics_port:
            self._serve_metrics(self.settings.worker_metrics_port)
        try:
            beat(self.engine, self.worker_id, "running", self._info())
            analyze_if_needed(self.engine)
        except Exception as exc:  # noqa: BLE001 - the database went away again: maintenance retries both
            log.warning("start-up heartbeat failed; maintenance will retry: %s", one_line(exc))
        # No listener with WA_OUTBOX_LISTEN=false: through PgBouncer in transaction mode a LISTEN stays on whichever
        # server connection ran it and its notifications reach other clients (docs/scaling.md); polling finds the work.
        for name, target in (("recorder", lambda: self.sender.record(self._recorder_done)),
                             *([("listener", self._listen)] if self.settings.listen else []),
                             ("inbound", self._inbound_loop), ("maintenance", self._maintenance_loop),
                             ("deliveries", lambda: self.deliverer.run(self.stopping)),
                             # a dry run calls no Meta: no media to fetch either
                             *([] if self.settings.dry_run else [("media", lambda: self.media.run(self.stopping))])):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        try:
            self.sender.produce(self.stopping)
        finally:
            self._shutdown()

    def stop(self) -> None:
        self.stopping.set()
        self.sender.nudge()
        self.deliverer.wake.set()
        self.media.wake.set()

    def _shutdown(self) -> None:
        log.info("worker %s stopping: %d sends in flight", self.worker_id, self.sender.in_flight)
        try:
            beat(self.engine, self.worker_id, "stopping", self._info())
        except Exception:  # noqa: BLE001 - best effort: stopping goes on without the database
            pass
        left = self.sender.drain(self.settings.shutdown_grace)
        if left:
            log.warning("%d sends still in flight at the end of the grace: their leases expire and they are "
                        "settled as unknown", left)
        self._recorder_done.set()
        for thread in self._threads:  # the deliveries' thread drains within the same grace, beside the sends
            thread.join(timeout=self.settings.shutdown_grace + 5 if thread.name == "deliveries" else 5)
        try:  # the final totals, then folded into the 'retired' rows: /metrics' sums never go backwards
            self.metrics_flusher.flush()
            self.metrics_flusher.retire(stopping=True)
        except Exception as exc:  # noqa: BLE001 - the rows stay; another worker folds them after a day
            log.warning("could not retire this worker's metrics: %s", one_line(exc))
        try:
            gone(self.engine, self.worker_id)
        except Exception:  # noqa: BLE001 - best effort: a stale heartbeat row is only shown as not alive
            pass
        self.transport.close()
        self.deliverer.close()
        self.media.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        # Its totals as fields of their own (JSON: numbers a log search can sum), never a dict in the message.
        log.info("worker %s stopped", self.worker_id, extra={"worker_id": self.worker_id, **self._info()})

    def _info(self) -> dict:
        return {"in_flight": self.sender.in_flight, **self.sender.stats, **{f"inbound_{k}": v for k, v in
                                                                           self.inbound.stats.items()},
                "deliveries_in_flight": self.deliverer.in_flight,
                **{f"deliveries_{k}": v for k, v in self.deliverer.stats.items()},
                "media_in_flight": self.media.in_flight, **{f"media_{k}": v for k, v in self.media.stats.items()}}

    # --- threads -------------------------------------------------------------------------------------------------

    def _failure_delay(self, failures: int) -> float:
        """Capped exponential backoff for a thread whose database work keeps failing: never a hot loop."""
        return backoff_seconds(failures, base=self.settings.poll_interval,
                               cap=max(self.settings.poll_interval, FAILURE_BACKOFF_CAP))

    def _listen(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                with db.connect(self.settings, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                application_name="wa-outbox-listener") as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                    conn.execute(f"LISTEN {REGISTRY_CHANNEL}")
                    conn.execute(f"LISTEN {DELIVERIES_CHANNEL}")
                    self.sender.tokens.invalidate()  # a token may have changed while we were not listening
                    self.listening.set()
                    failures = 0
                    self.sender.nudge()  # anything enqueued while we were not listening
                    self.deliverer.on_events()
                    while not self.stopping.is_set():
                        for notify in conn.notifies(timeout=1.0, stop_after=1):
                            if notify.channel == EVENTS_CHANNEL:
                                self.deliverer.on_events()
                                continue
                            if notify.channel == DELIVERIES_CHANNEL:
                                self.deliverer.on_deliveries(notify.payload)
                                continue
                            if notify.channel == REGISTRY_CHANNEL:
                                self.sender.tokens.invalidate()  # the next send reads its sender's token anew
                                continue
                            self.sender.on_notify(notify.payload)  # a sender's pause: halt it here too
                            self.sender.nudge()
            except psycopg.Error as exc:
                self.listening.clear()
                failures += 1
                delay = self._failure_delay(failures)
                log.warning("listener lost its connection (%d in a row); polling meanwhile, next try in %.1f s: %s",
                            failures, delay, scrub(one_line(exc), self.settings.database_url))
                self.stopping.wait(delay)

    def _inbound_loop(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                busy = self.inbound.process_batch()
                failures = 0
                if busy:
                    continue
            except (psycopg.Error, sa.exc.SQLAlchemyError) as exc:  # the database is away; the lease keeps the batch
                failures += 1
                delay = self._failure_delay(failures)
                log.warning("inbound batch failed (%d in a row), next try in %.1f s: %s", failures, delay,
                            scrub(one_line(exc), self.settings.database_url))
                self.stopping.wait(delay)
                continue
            except Exception:  # keep going; the lease returns the batch to the queue
                log.exception("inbound batch failed")
            self.stopping.wait(INBOUND_IDLE_WAIT)

    def _maintenance_loop(self) -> None:
        while not self.stopping.wait(MAINTENANCE_INTERVAL):
            self.maintain()

    def _settle_unknown(self) -> None:
        settled = settle_unknown(self.engine, self.settings.unknown_window_seconds, self.settings.unknown_policy,
                                 self.policy)
        if settled.get("dead"):
            self.metrics.count("wa_outbox_dead_letters_total", settled["dead"], queue="notifications")

    def _serve_metrics(self, port: int) -> None:
        """This worker's own metrics on http://0.0.0.0:<port>/metrics, where the platform lets it be scraped."""
        metrics = self.metrics

        class _Collector:
            def collect(self):
                rows = [queries.MetricTotal(metric=m, labels=json.loads(labels), value=v)
                        for (m, labels), v in metrics.snapshot().items()]
                return worker_families(rows)

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector())
        self._metrics_server, _ = start_http_server(port, registry=registry)
        log.info("worker metrics on :%d/metrics", port)

    def maintain(self) -> None:
        """One round of maintenance (also callable from tests)."""
        for step in (lambda: beat(self.engine, self.worker_id, "running", self._info()),
                     lambda: rescue(self.engine, self.worker_id, self.policy, metrics=self.metrics),
                     self.deliverer.rescue,
                     self.media.rescue,
                     self._settle_unknown,
                     lambda: release_stalled_lines(self.engine),
                     self.metrics_flusher.flush,  # with the heartbeat, the metrics: one statement, this round's too
                     lambda: self.metrics_flusher.retire(stopping=False),
                     lambda: analyze_if_needed(self.engine)):
            try:
                step()
            except (psycopg.Error, sa.exc.SQLAlchemyError) as exc:  # the database is away: the next round retries
                log.warning("maintenance step failed: %s", scrub(one_line(exc), self.settings.database_url))
            except Exception:  # one failing step must not stop the others
                log.exception("maintenance step failed")
