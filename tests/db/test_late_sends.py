"""The pacing promise where the machine stalls (issue 22): a send whose slot has slipped by the time its request
would go is not sent late (which would crowd the sliding second of the sends after it) but re-slotted by the sender,
which knows when it actually sends: the transport refuses the request past its deadline (SlotMissed, nothing on the
wire), the row takes a new slot from the shared schedule and goes then, once, its attempt counted once. The stall is a
test signal (a send thread held until its slot has passed), not a sleep."""

from __future__ import annotations

import threading
import time

import pytest

from tests.db.test_pacing import queue
from tests.live import SENDER, running_worker, wait_for, worker_settings
from wa_outbox.worker import _sender
from wa_outbox.worker._sender import LATE_SEND_LIMIT
from wa_outbox.worker._transport import GraphTransport, SlotMissed


def test_the_transport_refuses_a_request_past_its_deadline_and_sends_nothing(sim):
    transport = GraphTransport(sim.base_url, "test-access-token", pool_size=2)
    body = {"messaging_product": "whatsapp", "to": "+5511900000001", "type": "text", "text": {"body": "x"}}
    try:
        with pytest.raises(SlotMissed) as missed:
            transport.send(SENDER, body, not_after=time.time() - 0.02)
        assert missed.value.late_seconds >= 0.02
        assert sim.messages() == []  # nothing went on the wire
        result = transport.send(SENDER, body, not_after=time.time() + 5)
        assert result.http_status == 200 and len(sim.messages()) == 1
        assert transport.send(SENDER, body).http_status == 200  # no deadline: as before
    finally:
        transport.close()


def stall_first_send(monkeypatch) -> tuple[threading.Event, threading.Event, list[int]]:
    """The first send stalls (as a starved machine stalls a thread) until `release` is set: (held: it has stalled,
    release, [its id])."""
    held, release = threading.Event(), threading.Event()
    real = _sender.request_body
    stalled: list[int] = []

    def stalling_body(row):
        if not stalled:
            stalled.append(row.id)
            held.set()
            release.wait(30)
        return real(row)
    monkeypatch.setattr(_sender, "request_body", stalling_body)
    return held, release, stalled


def hold_until_slipped(db, held: threading.Event, stalled: list[int], seconds: float) -> float:
    """Once the send has stalled: wait until the database's clock is past its slot by `seconds`; its slot."""
    assert held.wait(30), "no send started"
    slot = db.execute("SELECT (detail->>'send_at')::float8 FROM wa_outbox.notification_events "
                      "WHERE notification_id = %s AND event = 'sending'", (stalled[0],)).fetchone()[0]
    wait_for(lambda: db.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
             > slot + seconds, what="the slot to slip")
    return slot


def test_a_send_stalled_past_its_slot_is_re_slotted_not_sent_late(db, sender, sim, settings, run, monkeypatch):
    assert run("ratelimit", "set", SENDER, "--mps", "5").exit_code == 0
    held, release, stalled = stall_first_send(monkeypatch)
    ids = queue(db, 3)
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        # the stall lasts until the database's clock is past the slot by more than the limit
        slot = hold_until_slipped(db, held, stalled, LATE_SEND_LIMIT + 0.05)
        release.set()
        wait_for(lambda: len(sim.messages()) == len(ids), timeout=30, what="every message sent")
        assert worker.sender.stats["reslotted"] >= 1
    by_id = {int(m["biz_opaque_callback_data"]): m for m in sim.messages()}
    assert sorted(by_id) == sorted(ids)  # each once
    # The slot it went in: the new one on its `sent` event; or, had the new slot slipped too on this busy machine
    # (RESLOT_TRIES times), it was given back and claimed again: its last claim's slot.
    new_slot = db.execute(
        "SELECT coalesce((SELECT (detail->>'send_at')::float8 FROM wa_outbox.notification_events "
        "                 WHERE notification_id = %(id)s AND event = 'sent' AND detail ? 'send_at'), "
        "                (SELECT (detail->>'send_at')::float8 FROM wa_outbox.notification_events "
        "                 WHERE notification_id = %(id)s AND event = 'sending' ORDER BY id DESC LIMIT 1))",
        {"id": stalled[0]}).fetchone()[0]
    assert new_slot > slot + LATE_SEND_LIMIT  # a new slot, not the old one late
    assert by_id[stalled[0]]["received_at"] >= new_slot - 0.005  # sent in it (same machine's clock), not before
    assert db.execute("SELECT status, attempts FROM wa_outbox.notifications WHERE id = %s",
                      (stalled[0],)).fetchone() == ("sent", 1)


def test_above_metas_highest_throughput_a_stalled_send_goes_in_its_own_slot(db, sender, sim, settings, run,
                                                                          monkeypatch):
    """At a rate no Meta number has (a "no limit" such as 10^6 mps) the schedule's margin grows with the rate
    (schema.sql, slot_margin): a send 200 ms late is inside it, so it goes in its slot, not re-slotted: a drain on a
    busy machine is not held back by wake-ups no second at Meta's end could feel."""
    assert run("ratelimit", "set", SENDER, "--mps", "1000000").exit_code == 0
    held, release, stalled = stall_first_send(monkeypatch)
    ids = queue(db, 3)
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        hold_until_slipped(db, held, stalled, 0.2)
        release.set()
        wait_for(lambda: len(sim.messages()) == len(ids), timeout=30, what="every message sent")
        assert worker.sender.stats["reslotted"] == 0
    assert sorted(int(m["biz_opaque_callback_data"]) for m in sim.messages()) == sorted(ids)  # each once
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE notification_id = %s "
                      "AND event = 'sent' AND detail ? 'send_at'", (stalled[0],)).fetchone()[0] == 0
