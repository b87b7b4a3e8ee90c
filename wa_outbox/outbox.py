"""Operations on messages for people and the API, each with a rule beyond its query: accept one message from a
request (validated, with a generated idempotency key), look one up by any term, requeue, cancel, purge and prune
dead or finished ones. The queries are wa_outbox/queries/'s; the /ops page's reads are wa_outbox/ops.py's, the
campaigns' wa_outbox/campaigns.py's."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa

from . import db, queries, states
from .messages import InvalidMessage, check_request, normalize_recipient, validate_ordered

AUTO_KEY_PREFIX = "auto:"


def accept_message(engine: sa.Engine, *, to: Any, message: Any, idempotency_key: Any = None,
                   correlation_id: Any = None, phone_number_id: Any = None, key_name: str = "idempotency_key",
                   ordered: Any = True) -> queries.Enqueued:
    """Validate and queue one message a request brought (POST /v1/messages, `wa-outbox send`), in one autocommit
    statement of its own (wa_outbox.enqueue() is the one inside an app's transaction): its id, status and whether
    this request created it. `engine` must be an autocommit engine. Raises InvalidMessage before touching the
    database.

    A request without an idempotency key gets a generated one (`auto:<uuid4>`), so the statement is safe to repeat
    after a lost COMMIT reply: the retry finds the row the first attempt made instead of queuing a second one."""
    checked = check_request(to=to, message=message, idempotency_key=idempotency_key, correlation_id=correlation_id,
                            phone_number_id=phone_number_id, key_name=key_name)
    in_order = validate_ordered(ordered)
    key = checked.idempotency_key or f"{AUTO_KEY_PREFIX}{uuid.uuid4()}"
    row = queries.enqueue_one(
        engine, to=checked.recipient, message=json.dumps(message, separators=(",", ":")), idempotency_key=key,
        correlation_id=checked.correlation_id, phone_number_id=checked.phone_number_id, ordered=in_order)
    # A generated key is this request's own: a row found by it was created by this request's first attempt.
    return row if row.created or checked.idempotency_key is not None else dataclasses.replace(row, created=True)


def find_messages(engine: sa.Engine, term: str, limit: int = 20) -> list[queries.NotificationSummary]:
    """Messages to a phone number, or with a correlation id."""
    try:
        recipient = normalize_recipient(term)
    except InvalidMessage:
        recipient = None
    return queries.find_notifications(engine, recipient=recipient, correlation_id=term, limit=limit)


def requeue(engine: sa.Engine, *, ids: Sequence[int] = (), all_dead: bool = False, code: int | None = None,
            recipient: str | None = None, actor: str) -> list[int]:
    return queries.requeue(engine, ids=list(ids), all=all_dead, code=code, recipient=recipient, actor=actor)


def purge_dead(engine: sa.Engine, *, ids: Sequence[int] = (), all_dead: bool = False, older_than_days: int = 0) -> int:
    """Delete dead messages with their timelines, in a transaction that opens the append-only timeline's door for
    itself only."""
    with engine.connect() as conn:
        raw = db.psycopg_connection(conn)
        with raw.transaction():
            raw.execute("SET LOCAL wa_outbox.allow_prune = 'on'")
            return queries.purge_dead(raw, ids=list(ids), all=all_dead, older_than_days=older_than_days)


MIN_DEDUP_KEY_DAYS = 8  # Meta redelivers a webhook for up to 7 days: a dedup key must outlive that
PRUNE_BATCH = 1000       # messages per batch (with their timelines: a few thousand rows, tens of milliseconds)
PRUNE_WINDOW = 10        # each batch reads at most this many batches' worth of ids, whatever it keeps


@dataclasses.dataclass
class PruneResult:
    """What one `prune` run deleted so far (updated after every batch, so an interrupted run can still report)."""
    messages: int = 0
    events: int = 0                # the messages' timeline events
    webhook_events: int = 0
    batches: int = 0
    seconds: float = 0.0
    longest_batch_seconds: float = 0.0
    phase: str = "messages"        # what is being pruned now: messages, then webhook_events, then ops_sessions
    ops_sessions: int = 0          # /ops sessions past their end (also deleted at every login)
    feed_events: int = 0           # events for apps (the feed) past WA_OUTBOX_EVENT_RETENTION_DAYS
    deliveries: int = 0            # their deliveries to endpoints
    fraction: float = 0.0          # how far through the phase's old ids
    media: int = 0                 # inbound media past WA_OUTBOX_MEDIA_RETENTION_DAYS (cli/prune.py: media_retention)

    @property
    def rows(self) -> int:
        return self.messages + self.events + self.webhook_events + self.feed_events


def prune(engine: sa.Engine, *, days: int, dead_days: int | None = None, batch_size: int = PRUNE_BATCH,
          progress: Callable[[PruneResult], None] | None = None, result: PruneResult | None = None,
          event_days: int | None = None) -> PruneResult:
    """Retention, in bounded batches that are each their own short transaction, safe while workers run: finished
    messages (states.PRUNABLE_STATUSES) updated more than `days` ago with their timelines, then `done` webhook events
    (their dedup keys and raw bodies) received more than max(`days`, 8) days ago. Dead messages and dead webhook
    events go only when `dead_days` is given (dead webhook events never before 8 days either). With `event_days`,
    then the events feed's oldest events, older than that, with their deliveries: a prefix of the feed, so that a
    cursor older than what is kept is known (events_after() says so).

    Each phase walks the primary key from the oldest row to the last one created before its cutoff (found by
    bisection: ids grow with time), `batch_size` rows at a time, skipping rows other transactions hold, so a run costs
    what it deletes, not the table's size, and stopping it anywhere loses at most one batch's work: the next run
    carries on. `progress` is called after every batch with `result`, the running totals."""
    result = result if result is not None else PruneResult()
    started = time.monotonic()
    with engine.connect() as conn:
        raw = db.psycopg_connection(conn)
        cutoffs = queries.prune_cutoffs(raw, days=days, dead_days=dead_days, min_key_days=MIN_DEDUP_KEY_DAYS)
        statuses = [str(s) for s in states.PRUNABLE_STATUSES]

        def on_batch(row: queries.PrunedMessages | queries.PrunedWebhooks | queries.PrunedEvents, seconds: float,
                     fraction: float) -> None:
            if isinstance(row, queries.PrunedMessages):
                result.messages += row.messages
                result.events += row.events
            elif isinstance(row, queries.PrunedWebhooks):
                result.webhook_events += row.webhook_events
            result.batches += 1
            result.longest_batch_seconds = max(result.longest_batch_seconds, seconds)
            result.seconds, result.fraction = time.monotonic() - started, fraction
            if progress:
                progress(result)

        def messages_batch(after: int, until: int) -> queries.PrunedMessages:
            return queries.prune_messages_batch(raw, after=after, until=until, limit=batch_size, statuses=statuses,
                                                before=cutoffs.before, dead_before=cutoffs.dead_before)

        def webhooks_batch(after: int, until: int) -> queries.PrunedWebhooks:
            return queries.prune_webhooks_batch(raw, after=after, until=until, limit=batch_size,
                                                before=cutoffs.keys_before, dead_before=cutoffs.dead_keys_before)

        result.phase = "messages"
        _prune_walk(raw, lambda at: queries.prune_messages_probe(raw, id=at), messages_batch,
                    _latest(cutoffs.before, cutoffs.dead_before), batch_size, on_batch)
        result.phase, result.fraction = "webhook_events", 0.0
        _prune_walk(raw, lambda at: queries.prune_webhooks_probe(raw, id=at), webhooks_batch,
                    _latest(cutoffs.keys_before, cutoffs.dead_keys_before), batch_size, on_batch)
        if event_days is not None:
            result.phase, result.fraction = "events", 0.0
            more = True
            while more:
                batch_started = time.monotonic()
                with raw.transaction():
                    pruned = queries.prune_events_batch(raw, limit=batch_size, days=event_days)
                result.feed_events += pruned.events
                result.deliveries += pruned.deliveries
                more = pruned.more
                on_batch(pruned, time.monotonic() - batch_started, 1.0 if not more else 0.5)
        result.phase, result.fraction = "ops_sessions", 0.0
        with raw.transaction():
            result.ops_sessions = queries.prune_ops_sessions(raw)
    result.seconds = time.monotonic() - started
    return result


def _latest(*times: datetime | None) -> datetime:
    return max(t for t in times if t is not None)


_Batch = queries.PrunedMessages | queries.PrunedWebhooks


def _prune_walk(conn: psycopg.Connection[Any], probe: Callable[[int], queries.PruneProbe],
                batch: Callable[[int, int], _Batch], cutoff: datetime, batch_size: int,
                on_batch: Callable[[_Batch, float, float], None]) -> None:
    """Delete a table's prunable rows batch by batch along the primary key, up to the last id created before
    `cutoff` (`probe`, prune_<table>_probe.sql, bisected; later rows cannot be old enough)."""
    first = probe(0)  # no id: no row (then no created_at nor last_id either)
    if first.id is None or first.created_at is None or first.last_id is None or first.created_at >= cutoff:
        return
    low, high = first.id, first.last_id + 1  # probe(low) is old; every id >= high is new (or absent)
    while high - low > 1:
        middle = (low + high) // 2
        found = probe(middle)
        if found.id is None or found.created_at is None or found.created_at >= cutoff:
            high = middle
        else:
            low = found.id if found.id < high else middle
    after, until_end, window = first.id - 1, low, batch_size * PRUNE_WINDOW
    span = until_end - after
    while after < until_end:
        until = min(until_end, after + window)
        batch_started = time.monotonic()
        with conn.transaction():
            conn.execute("SET LOCAL wa_outbox.allow_prune = 'on'")  # the timeline's door, for this batch only
            row = batch(after, until)
        after = row.next_after
        on_batch(row, time.monotonic() - batch_started, min(1.0, (after - first.id + 1) / span))


def cancel(engine: sa.Engine, ids: list[int], *, actor: str) -> dict[int, tuple[str, bool]]:
    """Cancel `queued` messages (the timeline names `actor`: api, cli, …). Returns, for each id that exists, its
    status now and whether this call cancelled it; ids that match no message are absent."""
    return {row.id: (row.status, row.cancelled) for row in queries.cancel(engine, ids=list(ids), actor=actor)}

