"""Deliveries across a real worker process killed with SIGKILL mid-delivery (delivered again after the lease: at
least once, the same webhook-id) and stopped with SIGTERM mid-delivery (the delivery finishes and is recorded)."""

from __future__ import annotations

import signal
import threading

from tests.endpoint_rows import SECRET_KEY, Receiver, add_endpoint, add_events, serve_receiver
from tests.live import wait_for
from tests.system.test_worker_process import start_worker_process
from wa_outbox.events import event_id

PUSH_ENV = {"WA_OUTBOX_SECRET_KEY": SECRET_KEY, "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE": "true",
            "WA_OUTBOX_DRY_RUN": "true", "WA_OUTBOX_DELIVERY_SCHEDULE": "0.2,0.2,0.2",
            "WA_OUTBOX_DELIVERY_TIMEOUT": "4", "WA_OUTBOX_LEASE_SECONDS": "10"}


def status(db, seq: int) -> str | None:
    found = db.execute("SELECT status FROM wa_outbox.deliveries WHERE event_seq = %s", (seq,)).fetchone()
    return found and found[0]


def test_sigkill_mid_delivery_then_another_worker_delivers_it_after_the_lease(database_url, db):
    gate, arrived = threading.Event(), threading.Event()

    def answer(_id: str, tries: int) -> int:
        if tries == 0:
            arrived.set()
            gate.wait(30)  # the first POST hangs: its worker is killed meanwhile
        return 200

    with serve_receiver(Receiver(secrets=[], answer=answer)) as receiver:
        endpoint_id, secret = add_endpoint(db, receiver.url)
        receiver.secrets.append(secret)
        [seq] = add_events(db, 1)
        victim = start_worker_process(database_url, "http://127.0.0.1:9", **PUSH_ENV)
        try:
            wait_for(lambda: status(db, seq) == "delivering", timeout=60, what="the delivery in flight")
        except AssertionError:
            victim.kill()
            raise AssertionError(victim.communicate()[0]) from None
        # killed with its POST on the wire (a claimed delivery whose request has not gone yet is another case)
        assert arrived.wait(60), "the first POST never reached the receiver"
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=10)
        gate.set()
        assert status(db, seq) == "delivering"  # stranded under a dead worker's lease
        rescuer = start_worker_process(database_url, "http://127.0.0.1:9", **PUSH_ENV)
        try:
            wait_for(lambda: status(db, seq) == "delivered", timeout=90, what="delivered after the lease")
        finally:
            rescuer.send_signal(signal.SIGTERM)
            output = rescuer.communicate(timeout=30)[0]
        assert rescuer.returncode == 0, output
        assert "rescued 1 deliveries" in output
    ids = [r.webhook_id for r in receiver.received]
    assert ids == [event_id(seq)] * 2 and all(r.verified for r in receiver.received)  # at least once, one id
    attempts = db.execute("SELECT attempts FROM wa_outbox.deliveries WHERE endpoint_id = %s",
                          (endpoint_id,)).fetchone()[0]
    assert attempts == 2


def test_sigterm_lets_a_delivery_in_flight_finish_and_records_it(database_url, db):
    gate = threading.Event()

    def answer(_id: str, _tries: int) -> int:
        gate.wait(30)
        return 200

    with serve_receiver(Receiver(secrets=[], answer=answer)) as receiver:
        add_endpoint(db, receiver.url)
        [seq] = add_events(db, 1)
        proc = start_worker_process(database_url, "http://127.0.0.1:9", **PUSH_ENV)
        try:
            wait_for(lambda: status(db, seq) == "delivering", timeout=60, what="the delivery in flight")
        except AssertionError:
            proc.kill()
            raise AssertionError(proc.communicate()[0]) from None
        proc.send_signal(signal.SIGTERM)
        threading.Timer(1.0, gate.set).start()  # it answers while the worker is stopping
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    assert status(db, seq) == "delivered" and len(receiver.received) == 1
