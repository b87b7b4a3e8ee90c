"""The worker process: outbound sends, inbound webhook processing, and maintenance, all against Postgres.

Threads of one worker:
- main: the producer — claims due messages into free send slots (`_sender.py`);
- send-N: the sends, through one pooled HTTP session (`_transport.py`), judged by `_classify.py`;
- recorder: writes outcomes back in batches (`_sender.py`);
- listener: LISTEN wa_outbox_notifications, so an enqueue wakes the producer at once (polling is the fallback);
- inbound: drains webhook_events (`_inbound.py`);
- maintenance: heartbeat, rescuer, reconciler, every few seconds.
Any number of workers may run on any number of machines: every claim is FOR UPDATE SKIP LOCKED and every recovery
is guarded, so no leader is needed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

import psycopg
import sqlalchemy as sa

from .. import db
from ..config import Settings
from ._analyzer import analyze_if_never
from ._heartbeat import beat, gone
from ._inbound import Handler, InboundProcessor, load_handlers
from ._reconciler import settle_unknown
from ._rescuer import rescue
from ._sender import Sender
from ._transport import DryRunTransport, GraphTransport, Transport

log = logging.getLogger("wa_outbox.worker")

NOTIFY_CHANNEL = "wa_outbox_notifications"
MAINTENANCE_INTERVAL = 5.0
INBOUND_IDLE_WAIT = 0.5


class Worker:
    def __init__(self, settings: Settings, *, engine: sa.Engine | None = None, transport: Transport | None = None,
                 handlers: list[Handler] | None = None, worker_id: str | None = None):
        self.settings = settings
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.engine = engine or db.create_engine(
            settings.database_url, pool_size=4, application_name="wa-outbox-worker", isolation_level="AUTOCOMMIT")
        self.transport = transport or (DryRunTransport() if settings.dry_run else GraphTransport(
            settings.api_base_url, settings.access_token or "", pool_size=settings.worker_concurrency,
            connect_timeout=settings.connect_timeout, read_timeout=settings.send_timeout))
        self.policy = settings.retry_policy()
        self.sender = Sender(self.engine, self.transport, settings, self.worker_id, self.policy)
        self.inbound = InboundProcessor(
            self.engine, self.worker_id, load_handlers(settings.inbound_handlers) if handlers is None else handlers,
            self.policy, settings.lease_seconds)
        self.stopping = threading.Event()
        self._recorder_done = threading.Event()
        self._threads: list[threading.Thread] = []

    def run(self) -> None:
        """Work until stop() is called; then drain within the shutdown grace and return."""
        log.info("worker %s starting: concurrency %d, %s", self.worker_id, self.settings.worker_concurrency,
                 "dry run" if self.settings.dry_run else self.settings.api_base_url)
        beat(self.engine, self.worker_id, "running", self._info())
        analyze_if_never(self.engine)
        for name, target in (("recorder", lambda: self.sender.record(self._recorder_done)),
                             ("listener", self._listen), ("inbound", self._inbound_loop),
                             ("maintenance", self._maintenance_loop)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        try:
            self.sender.produce(self.stopping)
        finally:
            self._shutdown()

    def stop(self) -> None:
        self.stopping.set()
        self.sender.wake.set()

    def _shutdown(self) -> None:
        log.info("worker %s stopping: %d sends in flight", self.worker_id, self.sender.in_flight)
        try:
            beat(self.engine, self.worker_id, "stopping", self._info())
        except Exception:  # noqa: BLE001
            pass
        left = self.sender.drain(self.settings.shutdown_grace)
        if left:
            log.warning("%d sends still in flight at the end of the grace: their leases expire and they are "
                        "settled as unknown", left)
        self._recorder_done.set()
        for thread in self._threads:
            thread.join(timeout=5)
        try:
            gone(self.engine, self.worker_id)
        except Exception:  # noqa: BLE001
            pass
        self.transport.close()
        log.info("worker %s stopped: %s", self.worker_id, self.sender.stats)

    def _info(self) -> dict:
        return {"in_flight": self.sender.in_flight, **self.sender.stats, **{f"inbound_{k}": v for k, v in
                                                                           self.inbound.stats.items()}}

    # --- threads -------------------------------------------------------------------------------------------------

    def _listen(self) -> None:
        while not self.stopping.is_set():
            try:
                with psycopg.connect(self.settings.database_url, autocommit=True,
                                     application_name="wa-outbox-listener") as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self.sender.wake.set()  # anything enqueued while we were not listening
                    while not self.stopping.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.sender.wake.set()
            except psycopg.Error:
                log.warning("listener lost its connection; polling until it is back", exc_info=True)
                self.stopping.wait(self.settings.poll_interval)

    def _inbound_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.inbound.process_batch():
                    continue
            except Exception:  # noqa: BLE001 - keep going; the lease returns the batch to the queue
                log.exception("inbound batch failed")
            self.stopping.wait(INBOUND_IDLE_WAIT)

    def _maintenance_loop(self) -> None:
        while not self.stopping.wait(MAINTENANCE_INTERVAL):
            self.maintain()

    def maintain(self) -> None:
        """One round of maintenance (also callable from tests)."""
        for step in (lambda: beat(self.engine, self.worker_id, "running", self._info()),
                     lambda: rescue(self.engine, self.worker_id, self.policy),
                     lambda: settle_unknown(self.engine, self.settings.unknown_window_seconds,
                                            self.settings.unknown_policy, self.policy),
                     lambda: analyze_if_never(self.engine)):
            try:
                step()
            except Exception:  # noqa: BLE001 - one failing step must not stop the others
                log.exception("maintenance step failed")
