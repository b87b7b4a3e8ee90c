"""Wake-ups for the feed's long polls (GET /v1/events?wait=): one LISTEN wa_outbox_events connection per process.

The emission triggers wake the listeners at the commit of a transaction that wrote events, from at most one such
transaction at a time (wa_outbox.notify_events(): a NOTIFY serializes the commits of every notifying transaction), so
a wake-up may come without the events of a transaction that committed just after it: polls also read again at
least every events.TICK_SECONDS. A long poll waits on
this process-wide listener, not on a connection of its own: waiting holds a web thread (for at most
events.MAX_WAIT_SECONDS) but no pooled database connection. The listener counts notifications (`generation`); a
poll takes the count before it reads the feed and, finding nothing, waits for the count to move. The listener's
connection is opened on the first long poll and opened again after it breaks (a poll then simply reads again at
each of its ticks). With WA_OUTBOX_LISTEN=false (PgBouncer in transaction mode) there is no listener: polls
only tick."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from . import db
from .config import Settings, scrub

log = logging.getLogger("wa_outbox.events")

CHANNEL = "wa_outbox_events"
RECONNECT_SECONDS = 2.0


class EventNotices:
    def __init__(self, settings: Settings):
        self._settings = settings
        # Long polls that may wait at once in this process: a quarter of its threads (at least one), so waiting polls
        # never take the threads webhook POSTs need. A poll over the limit answers at once (an empty page: the
        # client simply asks again).
        self._waiters = threading.BoundedSemaphore(max(1, settings.web_threads // 4))
        self._waiting = 0  # polls holding a slot (for /metrics-like looks and tests)
        self._generation = 0
        self._listening = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopping = threading.Event()

    @contextmanager
    def waiting_slot(self) -> Iterator[bool]:
        """Whether this poll may wait (held for the poll's duration)."""
        got = self._waiters.acquire(blocking=False)
        if got:
            with self._changed:
                self._waiting += 1
        try:
            yield got
        finally:
            if got:
                with self._changed:
                    self._waiting -= 1
                self._waiters.release()

    @property
    def waiting(self) -> int:
        """How many polls hold a waiting slot now."""
        return self._waiting

    @property
    def listening(self) -> bool:
        return self._listening

    def generation(self, *, ready_within: float = 2.0) -> int:
        """The notification count now, once the listener is listening (or after `ready_within` seconds)."""
        if not self._settings.listen:
            return 0
        self._start()
        deadline = time.monotonic() + ready_within
        with self._changed:
            while not self._listening and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return self._generation

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a notification after count `seen`; whether one came."""
        deadline = time.monotonic() + timeout
        with self._changed:
            if not self._settings.listen:
                self._changed.wait(timeout)
                return False
            while self._generation == seen and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return self._generation != seen

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="event-notices", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Stop listening (within a second) and close the connection; waiting polls go on with their ticks."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                with db.connect(self._settings, autocommit=True, connect_timeout=5,
                                application_name="wa-outbox-event-notices") as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._bump(listening=True)  # whatever happened while not listening: polls read again
                    while not self._stopping.is_set():
                        if any(True for _ in conn.notifies(timeout=1.0, stop_after=1)):
                            self._bump(listening=True)
            except Exception as exc:  # noqa: BLE001 - the database went away: polls fall back to their ticks meanwhile
                log.warning("event notices: the listener lost its connection; polls tick meanwhile: %s",
                            scrub(str(exc), self._settings.database_url).splitlines()[0] if str(exc) else type(exc))
            self._bump(listening=False)
            self._stopping.wait(RECONNECT_SECONDS)

    def _bump(self, *, listening: bool) -> None:
        with self._changed:
            self._generation += 1
            self._listening = listening
            self._changed.notify_all()
