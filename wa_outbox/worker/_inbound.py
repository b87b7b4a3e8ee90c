"""The inbound pipeline: drain stored webhook events in batches.

- statuses update their messages (apply_statuses.sql: by wamid or by the echoed outbox id, forward only);
- inbound messages open the 24-hour window (contacts) and go to the application's handlers;
- other changes (template, account, calls …) go to the handlers.

One bad event never holds back another. Each event's fields are parsed by pure functions that reject or clamp garbage
(`status_entry`, `contact_of`), so a field cannot fail a statement; the statements stay set-based (one per batch),
and should one fail anyway, the batch is bisected until only the events that fail are left (`_isolated`). A failing
event — a handler that raises, a row the database refuses — is retried with the retry policy's backoff and ends
`dead` with its error. Handlers are called at least once per event (a worker killed mid-batch means the batch runs
again): make them idempotent on event["id"]. Each handler gets the stored event's fields and, under "event", the
feed's envelope of it (`{"id", "type", "timestamp", "data"}`, as GET /v1/events and endpoints have it). While slow
handlers run, the batch's lease is renewed (`_LeaseKeeper`), so no other worker takes the batch over and runs a
handler a second time at once.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy as sa

from .. import logs, number_health, queries, template_store, templates
from ..config import ConfigError
from ..events import envelope
from ..media_policy import ID_LIFETIME_SECONDS, media_of
from ..metrics import InboundResult, SendOutcome, WorkerMetrics
from ..queries import StatusApplied, WebhookEvent
from ..retry import RetryPolicy
from ..states import TimelineEvent, WebhookEventStatus
from ._capabilities import apply_capability_updates

log = logging.getLogger("wa_outbox.inbound")

Handler = Callable[[dict[str, Any]], Any]
STATUS_RETRY_SECONDS = 2.0  # a status for a message whose send is still being recorded: look again shortly

# The status words the outbox acts on: those wa_outbox.status_rank() ranks above 0 (wa_outbox/sql/schema.sql).
KNOWN_STATUS_WORDS = frozenset({TimelineEvent.SENT.value, TimelineEvent.DELIVERED.value, TimelineEvent.READ.value,
                                TimelineEvent.PLAYED.value, TimelineEvent.FAILED.value})
# Unix timestamps outside these bounds are garbage, not dates (Postgres' to_timestamp would overflow on some).
EARLIEST_TIMESTAMP = 946_684_800    # 2000-01-01
LATEST_TIMESTAMP = 4_102_444_800    # 2100-01-01
MAX_WORD_CHARS = 64                 # a status word kept on the timeline and in logs
MAX_ERROR_CHARS = 1000
MAX_NAME_CHARS = 256                # a customer's profile name
MAX_WA_ID_CHARS = 32
# The outbox id echoed in biz_opaque_callback_data: "<id>" or "<id>:<the app's own value>". 18 digits always fit a
# bigint. Same rule as wa_outbox.callback_outbox_id() in SQL (wa_outbox/sql/schema.sql).
_CALLBACK_OUTBOX_ID = re.compile(r"([0-9]{1,18})(?::|\Z)")
# SQLSTATE classes that say the database or the connection is in trouble, not the statement's input: the batch is
# left to its lease instead of charging each event an attempt.
_INFRASTRUCTURE_SQLSTATES = ("08", "53", "57P", "58", "XX")
# A handler that runs past this many leases is taken for hung: its batch's lease is no longer renewed.
HANDLER_HOLD_LEASES = 10
# Unrecognized status words are logged once per word per process; past this many words, no longer.
_MAX_LOGGED_WORDS = 1000
_logged_words: set[str] = set()
_logged_words_lock = threading.Lock()


# --- pure parsing: each event's fields, never raising ----------------------------------------------------------------

def parse_timestamp(value: Any) -> int | None:
    """A Unix timestamp in seconds as Meta sends it (a string of digits; an int is accepted), or None when it is
    missing, not a whole number, or outside 2000–2100."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value.isascii() or not value.isdigit() or len(value) > 12:
            return None
        value = int(value)
    if not isinstance(value, int) or not EARLIEST_TIMESTAMP <= value <= LATEST_TIMESTAMP:
        return None
    return value


def outbox_id_from_callback(value: Any) -> int | None:
    """The outbox id a status webhook echoes in `biz_opaque_callback_data` ("<id>" or "<id>:<app's value>"), or None
    when the value is not one of ours."""
    if not isinstance(value, str):
        return None
    match = _CALLBACK_OUTBOX_ID.match(value)
    return int(match.group(1)) if match else None


def parse_errors(value: Any) -> list[dict] | None:
    """A status's `errors` as a list of objects (Meta sends a list of {"code", "title", …}); None when there are
    none. A lone object is wrapped; anything else is dropped (the raw payload stays on the webhook event)."""
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return None
    errors = [e for e in value if isinstance(e, dict)]
    return errors or None


def status_word(value: Any) -> str:
    """The status word, cut to a sane length ("" when missing)."""
    return value[:MAX_WORD_CHARS] if isinstance(value, str) else ""


def status_entry(event: WebhookEvent) -> dict:
    """A stored status event as apply_statuses.sql's input: every field parsed, garbage dropped."""
    item = _first_item(event.payload, "statuses")
    return {"event_id": event.id, "wamid": event.wamid,
            "status": status_word(event.update_status or item.get("status")),
            "notification_id": outbox_id_from_callback(item.get("biz_opaque_callback_data")),
            "errors": parse_errors(item.get("errors")), "ts": parse_timestamp(item.get("timestamp"))}


def contact_of(event: WebhookEvent) -> dict:
    """A stored inbound message as record_inbound_messages.sql's input: who wrote, their profile name, when."""
    payload = event.payload
    value = payload.get("value") if isinstance(payload, dict) else None
    message = _first_item(payload, "messages")
    wa_id = message.get("from")
    wa_id = wa_id if isinstance(wa_id, str) and 0 < len(wa_id) <= MAX_WA_ID_CHARS else None
    name = None
    contacts = value.get("contacts") if isinstance(value, dict) else None
    for contact in contacts if isinstance(contacts, list) else ():
        if isinstance(contact, dict) and contact.get("wa_id") == wa_id:
            profile = contact.get("profile")
            candidate = profile.get("name") if isinstance(profile, dict) else None
            name = candidate[:MAX_NAME_CHARS] if isinstance(candidate, str) else None
            break
    return {"phone_number_id": event.phone_number_id, "wa_id": wa_id, "profile_name": name,
            "ts": parse_timestamp(message.get("timestamp"))}


def error_text(exc: BaseException) -> str:
    """An exception as the event's last_error: short, and text Postgres can store (no NUL, no lone surrogate)."""
    text = f"{type(exc).__name__}: {exc}".replace("\x00", "\\0").encode("utf-8", "replace").decode("utf-8")
    return text[:MAX_ERROR_CHARS]


def inbound_result(outcome: dict) -> InboundResult:
    """An event's outcome as the `result` label of wa_outbox_inbound_events_total."""
    if outcome["status"] == WebhookEventStatus.QUEUED:
        return InboundResult.WAITING if outcome.get("refund") else InboundResult.RETRY
    return InboundResult.DEAD if outcome["status"] == WebhookEventStatus.DEAD else InboundResult.DONE


def _first_item(payload: Any, list_name: str) -> dict:
    value = payload.get("value") if isinstance(payload, dict) else None
    items = value.get(list_name) if isinstance(value, dict) else None
    return items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else {}


def _is_the_statements_fault(exc: Exception) -> bool:
    """Whether the database refused the statement for its input (so bisecting the batch finds the culprit), rather
    than the connection or server failing (so every event would fail alike)."""
    sqlstate = exc.sqlstate if isinstance(exc, psycopg.Error) else None
    return bool(sqlstate and not sqlstate.startswith(_INFRASTRUCTURE_SQLSTATES))


# --- the processor -----------------------------------------------------------------------------------------------

def load_handlers(paths: tuple[str, ...]) -> list[Handler]:
    handlers = []
    for path in paths:
        module_name, _, attr = path.partition(":")
        try:
            handler = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"WA_OUTBOX_INBOUND_HANDLERS: cannot load {path!r}: {exc}") from None
        if not callable(handler):
            raise ConfigError(f"WA_OUTBOX_INBOUND_HANDLERS: {path!r} is not callable")
        handlers.append(handler)
    return handlers


class InboundProcessor:
    def __init__(self, engine: sa.Engine, worker_id: str, handlers: list[Handler],
                 policy: RetryPolicy, lease_seconds: float, batch_size: int = 200,
                 metrics: WorkerMetrics | None = None, on_media: Callable[[], None] | None = None):
        self.engine = engine
        self.on_media = on_media  # media rows were created: wake this worker's media fetcher (worker/_media.py)
        self.metrics = metrics or WorkerMetrics()  # counted here, written to Postgres with the heartbeat
        self.worker_id = worker_id
        self.handlers = handlers
        self.policy = policy
        self.lease_seconds = lease_seconds
        self.batch_size = batch_size
        self.stats = {"processed": 0, "statuses": 0, "messages": 0, "failed": 0, "dead": 0,
                      "unrecognized_statuses": 0, "lease_lost": 0}

    def process_batch(self) -> int:
        """Claim and process one batch; return how many events it held."""
        events = queries.claim_webhook_events(self.engine, limit=self.batch_size, worker_id=self.worker_id,
                                              lease_seconds=self.lease_seconds)
        if not events:
            return 0
        statuses = [e for e in events if e.kind == "status"]
        messages = [e for e in events if e.kind == "message" and e.field == "messages"]
        handled = [e for e in events if e.kind != "status"]
        keeper = _LeaseKeeper(self.engine, self.worker_id, self.lease_seconds, [e.id for e in events])
        if self.handlers and handled:
            keeper.start()  # handlers may be slow: keep the batch ours until it is finished
        try:
            outcomes: dict[int, dict] = {}
            if statuses:
                outcomes.update(self._apply_statuses(statuses))
            if messages:
                outcomes.update(self._record_contacts(messages))
            health = [e for e in handled if e.field in number_health.FIELDS]
            if health:  # number quality, throughput and account state (issue 20)
                outcomes.update(self._record_number_health(health))
            template_changes = [e for e in events if e.kind == "change" and e.field in templates.FIELDS]
            if template_changes:
                outcomes.update(self._record_templates(template_changes))
            capabilities = [e for e in handled if e.kind == "change" and e.field == "business_capability_update"]
            if capabilities:  # the messaging limit of the WABA's portfolio (issue 20)
                by_id = {e.id: e for e in capabilities}
                outcomes.update({event_id: self._failure(by_id[event_id], error) for event_id, error in
                                 apply_capability_updates(self.engine, capabilities).items()})
            envelopes = self._envelopes(handled) if self.handlers and handled else {}
            for event in handled:
                if event.id in outcomes:  # its contact could not be recorded: retried, handlers then
                    continue
                if not keeper.holds(event.id):
                    self.stats["lease_lost"] += 1
                    self.metrics.count("wa_outbox_inbound_events_total", kind=event.kind,
                                       result=InboundResult.LEASE_LOST)
                    log.warning("inbound event %s: lease lost, left to the worker that holds it now", event.id,
                                extra={"correlation_id": event.correlation_id})
                    continue
                with keeper.running():
                    outcomes[event.id] = self._handle(event, envelopes.get(event.id))
            if outcomes:
                queries.finish_webhook_events(self.engine, worker_id=self.worker_id,
                                              outcomes=json.dumps(list(outcomes.values())))
                kinds = {e.id: e.kind for e in events}
                for event_id, result in outcomes.items():
                    self.metrics.count("wa_outbox_inbound_events_total", kind=kinds[event_id],
                                       result=inbound_result(result))
                    if result["status"] == WebhookEventStatus.DEAD:
                        self.metrics.count("wa_outbox_dead_letters_total", queue="webhook_events")
        finally:
            keeper.stop()
        self.stats["processed"] += len(events)
        self.stats["statuses"] += len(statuses)
        self.stats["messages"] += len(messages)
        return len(events)

    def _apply_statuses(self, statuses: list[WebhookEvent]) -> dict[int, dict]:
        entries, by_id = [], {e.id: e for e in statuses}
        for event in statuses:
            entry = status_entry(event)
            if entry["status"] not in KNOWN_STATUS_WORDS:
                self._unrecognized(entry["status"], event)
            entries.append(entry)
        rows, failures = self._isolated(lambda text: queries.apply_statuses(self.engine, statuses=text), entries,
                                        "event_id")
        outcomes = {event_id: self._failure(by_id[event_id], error) for event_id, error in failures.items()}
        # A send whose answer was lost, settled as sent by its status webhook, is a send that succeeded: counted
        # where the timeline records it (`reconciled`, states.SENT_EVENTS), once per message.
        reconciled = len({row.notification_id for row in rows if row.reconciled})
        if reconciled:
            self.metrics.count("wa_outbox_sends_total", reconciled, outcome=SendOutcome.SENT, code="none")
        narrate = logs.events.isEnabledFor(logging.DEBUG)
        for row in sorted(rows, key=lambda r: r.event_id) if narrate else rows:  # narrated in arrival order
            event_id, disposition = row.event_id, row.disposition
            if narrate and disposition == "applied" and row.status != "sent":  # the send said "sent" already
                logs.events.debug("message %s %s", row.notification_id, row.status,
                                  extra={"notification_id": row.notification_id,
                                         "correlation_id": by_id[event_id].correlation_id})
            if disposition == "retry":  # waiting for the send to be recorded is no failure: the attempt is refunded
                outcomes[event_id] = {"id": event_id, "status": WebhookEventStatus.QUEUED,
                                      "delay": STATUS_RETRY_SECONDS, "refund": True,
                                      "error": "its message is still being sent"}
            else:
                outcomes[event_id] = {"id": event_id, "status": WebhookEventStatus.DONE,
                                      "error": None if disposition == "applied" else
                                      "no message of this outbox has this wamid or id"}
        return outcomes

    def _record_contacts(self, messages: list[WebhookEvent]) -> dict[int, dict]:
        """Open the 24-hour windows; return the failure outcomes of the events whose contact could not be stored."""
        entries = [{**contact_of(e), "event_id": e.id, "wamid": e.wamid,
                    **(media_of(_first_item(e.payload, "messages")) or {})} for e in messages]

        created = 0

        def record(text: str) -> list[StatusApplied]:
            nonlocal created
            created += queries.record_inbound_messages(self.engine, messages=text, id_lifetime=ID_LIFETIME_SECONDS)
            return []
        _, failures = self._isolated(record, entries, "event_id")
        if created and self.on_media is not None:
            self.on_media()
        by_id = {e.id: e for e in messages}
        return {event_id: self._failure(by_id[event_id], error) for event_id, error in failures.items()}

    def _record_number_health(self, changes: list[WebhookEvent]) -> dict[int, dict]:
        """Store what quality and account updates say of their numbers (record_number_health.sql, one statement);
        return the failure outcomes of the events that could not be stored (retried, handlers then)."""
        entries = [entry for e in changes
                   if (entry := number_health.health_update(e.field, e.payload.get("value"), e.id)) is not None]

        def record(text: str) -> list[StatusApplied]:
            for row in queries.record_number_health(self.engine, entries=text):
                if row.paced_mps is not None:
                    log.info("sender %s: Meta's throughput is now %g messages/s; its pacing follows",
                             row.phone_number_id, row.paced_mps)
            return []
        if not entries:
            return {}
        _, failures = self._isolated(record, entries, "event_id")
        by_id = {e.id: e for e in changes}
        return {event_id: self._failure(by_id[event_id], error) for event_id, error in failures.items()}

    def _record_templates(self, changes: list[WebhookEvent]) -> dict[int, dict]:
        """Keep the templates table current and act on the messages of templates whose status changed
        (template_store.apply_changes); return the failure outcomes of the events that could not be recorded."""
        entries = []
        for event in changes:
            time = event.payload.get("time") if isinstance(event.payload, dict) else None
            change = templates.webhook_change(event.id, event.field, event.payload, entry_time=time)
            if change is not None:
                entries.append(change.as_json())

        def record(text: str) -> list[StatusApplied]:
            applied = template_store.apply_changes(
                self.engine, [templates.TemplateChange(**e) for e in json.loads(text)],
                actor=f"worker {self.worker_id}")
            for reason, held in applied.held_by.items():
                self.metrics.count("wa_outbox_template_holds_total", held, reason=reason)
            if applied.dead:
                self.metrics.count("wa_outbox_template_dead_letters_total", applied.dead)
                self.metrics.count("wa_outbox_dead_letters_total", applied.dead, queue="notifications")
            return []
        _, failures = self._isolated(record, entries, "event_id") if entries else ([], {})
        by_id = {e.id: e for e in changes}
        return {event_id: self._failure(by_id[event_id], error) for event_id, error in failures.items()}

    def _isolated(self, run: Callable[[str], list[StatusApplied]], entries: list[dict],
                  key: str) -> tuple[list[StatusApplied], dict[int, str]]:
        """Run a set-based statement (`run`, given the entries' JSON text) over `entries`; if the database refuses
        it, bisect, so that the entries that can be applied are, and only those that fail are returned (by `key`,
        with their error). One statement when all is well; about 2·log2(n) more per bad entry otherwise."""
        try:
            return run(json.dumps(entries)), {}
        except Exception as exc:
            if not _is_the_statements_fault(exc):
                raise  # the database is in trouble: the batch goes back by its lease
            if len(entries) == 1:
                return [], {entries[0][key]: error_text(exc)}
            middle = len(entries) // 2
            rows_a, failed_a = self._isolated(run, entries[:middle], key)
            rows_b, failed_b = self._isolated(run, entries[middle:], key)
            return rows_a + rows_b, {**failed_a, **failed_b}

    def _envelopes(self, handled: list[WebhookEvent]) -> dict[int, dict[str, Any]]:
        """The feed's envelope of each event, by webhook event id: handlers see what an endpoint sees."""
        rows = queries.events_of_webhook_events(self.engine, ids=[e.id for e in handled])
        return {r.webhook_event_id: envelope(r.seq, r.type, r.occurred_at, r.data) for r in rows}

    def _handle(self, event: WebhookEvent, feed_event: dict[str, Any] | None = None) -> dict:
        if not self.handlers:
            return {"id": event.id, "status": WebhookEventStatus.DONE}
        # "event": the envelope {"id", "type", "timestamp", "data"} an endpoint gets for it (GET /v1/events, pushes);
        # None for an event stored before events existed. The other keys are as they always were.
        public = {k: getattr(event, k) for k in ("id", "kind", "field", "phone_number_id", "wamid", "payload",
                                                 "correlation_id")}
        public["event"] = feed_event
        try:
            for handler in self.handlers:
                handler(public)
            return {"id": event.id, "status": WebhookEventStatus.DONE}
        except Exception as exc:  # noqa: BLE001 - the application's code: retry, then dead-letter
            self.metrics.count("wa_outbox_handler_failures_total")
            return self._failure(event, error_text(exc))

    def _failure(self, event: WebhookEvent, error: str) -> dict:
        """The outcome of a failed attempt: retried after the policy's backoff, or dead when attempts are spent."""
        self.stats["failed"] += 1
        delay = self.policy.after_failure(event.attempts, event.max_attempts)
        if delay is None:
            self.stats["dead"] += 1
            log.error("inbound event %s dead after %d attempts: %s", event.id, event.attempts, error,
                      extra={"correlation_id": event.correlation_id})
            return {"id": event.id, "status": WebhookEventStatus.DEAD, "error": error}
        log.warning("inbound event %s failed (attempt %d), retry in %.1f s: %s", event.id, event.attempts,
                    delay, error, extra={"correlation_id": event.correlation_id})
        return {"id": event.id, "status": WebhookEventStatus.QUEUED, "delay": delay, "error": error}

    def _unrecognized(self, word: str, event: WebhookEvent) -> None:
        self.stats["unrecognized_statuses"] += 1
        with _logged_words_lock:
            first = word not in _logged_words and len(_logged_words) < _MAX_LOGGED_WORDS
            if first:
                _logged_words.add(word)
        if first:
            log.warning("status word %r is not one this version knows: recorded on the timeline as %s, the message "
                        "is not moved (webhook event %s; logged once per word)", word,
                        TimelineEvent.UNRECOGNIZED_STATUS.value, event.id,
                        extra={"correlation_id": event.correlation_id})


class _LeaseKeeper:
    """Renews the lease of a batch's events every third of a lease while its handlers run, in one UPDATE for the
    ids still held (guarded by locked_by). An id the UPDATE no longer returns was rescued: it is not ours any more,
    and its handler must not run. A handler running past HANDLER_HOLD_LEASES leases is taken for hung: renewing
    stops, so the rescuer can give the batch to another worker, and the rest of this batch is skipped."""

    def __init__(self, engine: sa.Engine, worker_id: str, lease_seconds: float, ids: Iterable[int]):
        self.engine = engine
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self._held = set(ids)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._gave_up = False
        self._handler_started: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="inbound-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def holds(self, event_id: int) -> bool:
        with self._lock:
            return not self._gave_up and event_id in self._held

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around a handler call: the hung-handler check times it."""
        with self._lock:
            self._handler_started = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._handler_started = None

    def _run(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            with self._lock:
                started, ids = self._handler_started, sorted(self._held)
            if started is not None and time.monotonic() - started > HANDLER_HOLD_LEASES * self.lease_seconds:
                with self._lock:
                    self._gave_up = True
                log.error("an inbound handler has run for over %d leases: no longer renewing its batch's lease",
                          HANDLER_HOLD_LEASES)
                return
            if not ids:
                return
            try:
                renewed = queries.renew_webhook_leases(self.engine, ids=ids, worker_id=self.worker_id,
                                                       lease_seconds=self.lease_seconds)
            except Exception:  # try again at the next tick, well within the lease
                log.warning("could not renew the inbound batch's lease", exc_info=True)
                continue
            with self._lock:
                self._held &= set(renewed)

