"""Inbound webhooks, the storing part: one INSERT … ON CONFLICT DO NOTHING per batch.

Concurrent POSTs in one process are coalesced into one statement — group commit in the application: while one
request thread runs the INSERT, the others queue their events; when it is done, the first of them runs one INSERT for
all that queued meanwhile. Each POST is answered only after the commit that holds its events, so nothing is
acknowledged before it is durable; under load, a commit (and a round trip) serves several POSTs.
"""

from __future__ import annotations

import json
import threading
from typing import Iterable

import sqlalchemy as sa

from .db import fetch
from .webhooks import WebhookEvent


class _Pending:
    __slots__ = ("events", "correlation_id", "wake", "leader", "new", "error")

    def __init__(self, events: list[WebhookEvent], correlation_id: str | None):
        self.events = events
        self.correlation_id = correlation_id
        self.wake = threading.Event()
        self.leader = False
        self.new = 0
        self.error: BaseException | None = None


class WebhookStore:
    def __init__(self, engine: sa.Engine):
        self.engine = engine  # autocommit: one statement is one transaction
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._busy = False  # a thread is running an INSERT

    def store(self, events: Iterable[WebhookEvent], correlation_id: str | None) -> int:
        """Store the events of one POST; return how many were new. Returns after they are committed."""
        mine = _Pending(list(events), correlation_id)
        if not mine.events:
            return 0
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
        return mine.new

    def _flush(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        try:
            new_keys = self._insert(batch)
            claimed: set[str] = set()
            for pending in batch:  # the first POST to carry a new key is the one it was new for
                keys = {e.dedup_key for e in pending.events} & new_keys
                pending.new = len(keys - claimed)
                claimed |= keys
        except BaseException as exc:  # noqa: BLE001 - every POST of the batch answers with the failure
            for pending in batch:
                pending.error = exc
        with self._lock:
            if self._queue:  # hand over to the first waiter: it runs the next INSERT
                self._queue[0].leader = True
                self._queue[0].wake.set()
            else:
                self._busy = False
        for pending in batch:
            pending.wake.set()

    def _insert(self, batch: list[_Pending]) -> set[str]:
        rows = [{"k": e.dedup_key, "f": e.field, "t": e.kind, "a": e.account_id, "p": e.phone_number_id,
                 "w": e.wamid, "s": e.update_status, "v": e.payload, "c": p.correlation_id}
                for p in batch for e in p.events]
        result = fetch(self.engine, "insert_webhook_events", {"events": json.dumps(rows, separators=(",", ":"))})
        return {row["dedup_key"] for row in result}
