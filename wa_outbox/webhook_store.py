"""Inbound webhooks, the storing part: one INSERT … ON CONFLICT DO NOTHING per batch.

Concurrent POSTs in one process are coalesced into one statement — group commit in the application: while one
request thread runs the INSERT, the others queue their events; when it is done, the first of them runs one INSERT for
all that queued meanwhile. Each POST is answered only after the commit that holds its events, so nothing is
acknowledged before it is durable; under load, a commit (and a round trip) serves several POSTs.

No POST can fail another: each POST's rows are serialized in its own request thread (a row that cannot be becomes the
POST's one dead event), and when Postgres refuses a coalesced INSERT, every POST of it is inserted again on its own,
so only the POST whose rows were refused sees the error — and that one is stored as one dead event holding its raw
bytes rather than answered 500. Only a database that is unreachable fails the POSTs (and Meta redelivers them).

Sanitized and dead events keep the POST's raw bytes in wa_outbox.webhook_bodies, once per body (keyed by its
SHA-256), so a 1,000-update POST stores them once; clean POSTs run the unchanged statement and store no bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

import orjson
import psycopg
import sqlalchemy as sa
from psycopg.types.json import Jsonb

from . import queries
from .states import WebhookEventStatus
from .webhooks import WebhookEvent, unprocessable_event

log = logging.getLogger(__name__)

# SQLSTATE classes of a database that did not answer for the statement (connection lost, shutting down): inserting
# each POST again alone would only fail again, slower.
_UNREACHABLE = ("08", "57")


class _Pending:
    __slots__ = ("events", "rows", "correlation_id", "body", "body_sha256", "app_id", "wake", "leader", "alone",
                 "refusal", "new", "error")

    def __init__(self, events: list[WebhookEvent], correlation_id: str | None, body: bytes, app_id: str | None = None,
                 unregistered: tuple[bool, ...] | None = None):
        self.correlation_id = correlation_id
        self.body = body
        self.body_sha256: str | None = None
        self.app_id = app_id
        try:
            self.rows = self._serialize(events, correlation_id, unregistered)
        except (ValueError, RecursionError) as exc:  # too deep to serialize here: the raw bytes, dead
            events = [unprocessable_event(body, f"cannot be serialized: {exc}")]
            self.rows = self._serialize(events, correlation_id, None)
        if self.body_sha256 is not None:
            log.warning("webhook body %s kept raw: %s", self.body_sha256,
                        next((e.dead_reason for e in events if e.dead_reason), "sanitized to fit jsonb"))
        self.events = events
        self.wake = threading.Event()
        self.leader = False
        self.alone = False  # the coalesced INSERT was refused: insert this POST on its own
        self.refusal: BaseException | None = None  # Postgres refused this POST's own rows
        self.new = 0
        self.error: BaseException | None = None

    def _serialize(self, events: list[WebhookEvent], correlation_id: str | None,
                   unregistered: tuple[bool, ...] | None) -> bytes:
        """This POST's rows as JSON array elements (no brackets), UTF-8, for jsonb_to_recordset. The app and the
        unregistered flag only when there is one (single-number mode: the rows as they always were)."""
        rows = []
        for n, e in enumerate(events):
            row: dict[str, Any] = {"k": e.dedup_key, "f": e.field, "t": e.kind, "a": e.account_id,
                                   "p": e.phone_number_id, "w": e.wamid, "s": e.update_status, "v": e.payload,
                                   "c": correlation_id}
            if self.app_id is not None:
                row["ap"] = self.app_id
            if unregistered is not None and unregistered[n]:
                row["u"] = True
            if e.raw_body or e.dead_reason:
                if self.body_sha256 is None:
                    self.body_sha256 = hashlib.sha256(self.body).hexdigest()
                row["r"] = self.body_sha256
            if e.dead_reason:
                row.update(st=WebhookEventStatus.DEAD.value, err=e.dead_reason)
            rows.append(row)
        # orjson: a fifth of json.dumps's time, which was the largest part of a 100-update POST's CPU. It would write
        # NaN as null, but none gets here: the parser keeps non-finite numbers as their text (webhooks.py).
        # Bytes all the way to the socket: decoding them to a str, which psycopg would encode again, cost as much as
        # orjson itself.
        try:
            return orjson.dumps(rows)[1:-1]
        except TypeError:  # what orjson does not write (an int past 64 bits, nesting past 254): as json writes it
            return json.dumps(rows, separators=(",", ":"), allow_nan=False)[1:-1].encode()


class WebhookStore:
    def __init__(self, engine: sa.Engine):
        self.engine = engine  # autocommit: one statement is one transaction
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._busy = False  # a thread is running an INSERT

    def store(self, events: Iterable[WebhookEvent], correlation_id: str | None, body: bytes = b"",
              app_id: str | None = None, unregistered: tuple[bool, ...] | None = None) -> int:
        """Store the events of one POST (`body`: its raw bytes, kept for sanitized and dead events; `app_id`: the app
        that verified it; `unregistered`: per event, whether its number is not registered: webhook_routing.py);
        return how many were new. Returns after they are committed."""
        events = list(events)
        if not events:
            return 0
        mine = _Pending(events, correlation_id, body, app_id, unregistered)
        with self._lock:
            self._queue.append(mine)
            lead = not self._busy
            self._busy = True
        if not lead:
            mine.wake.wait()
            lead = mine.leader  # woken to run the next INSERT, not because it is done
        if lead:
            self._flush()
        if mine.error is not None:
            raise mine.error
        if mine.alone:
            self._insert_alone(mine)
        if mine.refusal is not None:
            return self._store_dead(mine)
        return mine.new

    def _flush(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        try:
            self._count_new(batch, self._insert(batch))
        except BaseException as exc:  # noqa: BLE001 - handed to the POSTs of the batch
            refused = _refused_by_postgres(exc)
            if refused and len(batch) > 1:
                log.warning("a coalesced webhook INSERT of %d POSTs was refused (%s): inserting each alone",
                            len(batch), exc)
            for pending in batch:
                if not refused:
                    pending.error = exc
                elif len(batch) > 1:
                    pending.alone = True
                else:
                    pending.refusal = exc  # its own rows
        with self._lock:
            if self._queue:  # hand over to the first waiter: it runs the next INSERT
                self._queue[0].leader = True
                self._queue[0].wake.set()
            else:
                self._busy = False
        for pending in batch:
            pending.wake.set()

    def _insert_alone(self, mine: _Pending) -> None:
        """This POST's rows in their own INSERT, in its own request thread (the coalesced one was refused)."""
        try:
            self._count_new([mine], self._insert([mine]))
        except psycopg.Error as exc:
            if not _refused_by_postgres(exc):
                raise
            mine.refusal = exc

    def _store_dead(self, mine: _Pending) -> int:
        """Postgres refused this POST's own rows: store the POST as one dead event holding its raw bytes."""
        reason = f"cannot be stored: {type(mine.refusal).__name__}: {mine.refusal}"
        dead = _Pending([unprocessable_event(mine.body, reason)], mine.correlation_id, mine.body, mine.app_id)
        self._count_new([dead], self._insert([dead]))
        return dead.new

    @staticmethod
    def _count_new(batch: list[_Pending], new_keys: set[str]) -> None:
        if len(batch) == 1:  # every key returned is this POST's
            batch[0].new = len(new_keys)
            return
        claimed: set[str] = set()
        for pending in batch:  # the first POST to carry a new key is the one it was new for
            keys = {e.dedup_key for e in pending.events} & new_keys
            pending.new = len(keys - claimed)
            claimed |= keys

    def _insert(self, batch: list[_Pending]) -> set[str]:
        # The rows' JSON text as it is, typed jsonb (Postgres parses it as it would a text parameter cast to jsonb).
        events = Jsonb(b"[" + b",".join(p.rows for p in batch) + b"]", dumps=_as_is)
        bodies = {p.body_sha256: p.body for p in batch if p.body_sha256 is not None}
        if not bodies:  # the common path: the statement as it always was
            return queries.insert_webhook_events(self.engine, events=events)
        return queries.insert_webhook_events_with_bodies(self.engine, events=events, digests=list(bodies),
                                                         bodies=list(bodies.values()))


def _as_is(data: bytes) -> bytes:
    return data


def _refused_by_postgres(exc: BaseException) -> bool:
    """Postgres answered and refused the statement (bad data, a limit, a constraint): another statement may pass."""
    sqlstate = exc.sqlstate if isinstance(exc, psycopg.Error) else None
    return bool(sqlstate and not sqlstate.startswith(_UNREACHABLE))
