"""When a finished send wakes the producer (wa_outbox/worker/_sender.py `_more_due`): only when something may be
left to claim. A short claim took everything due, so the thread it frees has nothing new to claim and no claim runs
(at a steady rate those empty claims were a third of all claims); a claim that filled every thread leaves more, and
the send that frees a thread claims the next at once, not at the next poll."""

from __future__ import annotations

import threading
import time

import pytest

from tests.live import wait_for, worker_settings
from tests.system.test_worker_process import TEXT, count
from wa_outbox import db as wa_db
from wa_outbox.enqueue import enqueue
from wa_outbox.worker._sender import Sender
from wa_outbox.worker._transport import DryRunTransport

LONG_POLL = 60.0  # no poll (and no listener) wakes the producer during these tests: only sends and stop


@pytest.fixture
def engine(database_url):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def _run(producer: Sender):
    stopping, recorded = threading.Event(), threading.Event()
    threads = [threading.Thread(target=producer.produce, args=(stopping,), daemon=True),
               threading.Thread(target=producer.record, args=(recorded,), daemon=True)]
    for thread in threads:
        thread.start()

    def stop():
        stopping.set()
        producer.wake.set()
        recorded.set()
        for thread in threads:
            thread.join(timeout=10)
        producer.drain(1)
    return stop


def test_a_send_finished_after_a_short_claim_claims_nothing(db, sender, settings, engine):
    nid = enqueue(db, to="+5511900000001", message=TEXT)
    quiet = worker_settings(settings, "http://127.0.0.1:9", poll_interval=LONG_POLL, rate_limit_mps=100000.0,
                            listen=False)
    producer = Sender(engine, DryRunTransport(), quiet, "worker-quiet", quiet.retry_policy())
    stop = _run(producer)
    try:
        wait_for(lambda: count(db, f"id = {nid} AND status = 'sent'") == 1, timeout=20, what="the message sent")
        rounds = producer.claim_rounds
        assert rounds == 1  # 8 threads, 1 row: a short claim, then waiting for the poll (60 s)
        time.sleep(0.5)  # the send ended and was recorded: its thread's end must not have claimed again
        assert producer.claim_rounds == rounds
        producer.notified()  # an enqueue's NOTIFY does
        wait_for(lambda: producer.claim_rounds > rounds, timeout=20, what="a claim after the NOTIFY")
    finally:
        stop()


def test_a_send_that_frees_the_only_thread_claims_the_next_at_once(db, sender, settings, engine):
    ids = [enqueue(db, to=f"+55119000000{i:02d}", message=TEXT) for i in range(3)]
    one = worker_settings(settings, "http://127.0.0.1:9", poll_interval=LONG_POLL, rate_limit_mps=100000.0,
                          listen=False, worker_concurrency=1)
    producer = Sender(engine, DryRunTransport(), one, "worker-one", one.retry_policy())
    stop = _run(producer)
    try:
        # Each claim fills the only thread: the send that frees it wakes the next claim (a poll would take 60 s).
        wait_for(lambda: count(db, "status = 'sent'") == len(ids), timeout=30, what="all three sent")
    finally:
        stop()
