"""The push engine end to end: real Postgres, real workers (threads), real HTTP receivers on 127.0.0.1 that verify
every delivery with the Standard Webhooks reference library (tests/endpoint_rows.py)."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time

import psycopg
import pytest

from tests.endpoint_rows import Receiver, add_endpoint, add_events, push_settings, serve_receiver
from tests.live import running_worker, wait_for, worker_settings
from wa_outbox import db as wa_db, queries
from wa_outbox.endpoint_urls import address_problem
from wa_outbox.enqueue import enqueue
from wa_outbox.events import envelope_bytes, event_id
from wa_outbox.worker import _deliverer

TEXT = {"type": "text", "text": {"body": "pedido enviado"}}


def deliveries(db, endpoint_id: str) -> dict[int, dict]:
    cur = db.execute("SELECT event_seq, status, attempts, last_status_code, last_error FROM wa_outbox.deliveries "
                     "WHERE endpoint_id = %s ORDER BY id", (endpoint_id,))
    return {r[0]: dict(zip(("status", "attempts", "code", "error"), r[1:], strict=True)) for r in cur}


def attempts(db, endpoint_id: str) -> list[tuple]:
    return db.execute("SELECT d.event_seq, a.attempt, a.status_code, a.response_head, a.error, a.latency_ms "
                      "FROM wa_outbox.delivery_attempts a JOIN wa_outbox.deliveries d ON d.id = a.delivery_id "
                      "WHERE a.endpoint_id = %s ORDER BY d.event_seq, a.attempt", (endpoint_id,)).fetchall()


def endpoint(db, endpoint_id: str) -> dict:
    cur = db.execute("SELECT state, disabled_reason, failing_since FROM wa_outbox.endpoints WHERE id = %s",
                     (endpoint_id,))
    return dict(zip(("state", "reason", "failing_since"), cur.fetchone(), strict=True))


def all_delivered(db, endpoint_id: str, n: int):
    return lambda: db.execute("SELECT count(*) FROM wa_outbox.deliveries WHERE endpoint_id = %s AND "
                              "status = 'delivered'", (endpoint_id,)).fetchone()[0] == n


def rounds_pass(worker, n: int = 5) -> None:
    """Let the worker's deliveries loop go round n more times (each round dispatches or polls, and claims)."""
    start = worker.deliverer.rounds
    wait_for(lambda: worker.deliverer.rounds >= start + n, what=f"{n} more delivery rounds")


def test_every_delivery_is_signed_and_verifies_with_the_reference_library(db, settings):
    with serve_receiver(Receiver(secrets=[])) as receiver:
        endpoint_id, secret = add_endpoint(db, receiver.url)
        receiver.secrets.append(secret)
        seqs = add_events(db, 25)
        with running_worker(push_settings(settings)):
            wait_for(all_delivered(db, endpoint_id, 25), what="25 deliveries")
        got = receiver.delivered()
    assert sorted(r.webhook_id for r in got) == sorted(event_id(s) for s in seqs)
    assert all(r.verified for r in got)
    events = {s: (t, at, data) for s, t, at, data in db.execute(
        "SELECT seq, type, occurred_at, data FROM wa_outbox.events").fetchall()}
    for r in got:
        seq = int(r.webhook_id.removeprefix("evt_"))
        assert r.body == envelope_bytes(seq, *events[seq])  # the feed's envelope, byte for byte
        assert r.headers["content-type"] == "application/json" and r.headers["user-agent"] == "wa-outbox"
        assert len(r.headers["webhook-signature"].split(" ")) == 1
    recorded = attempts(db, endpoint_id)
    assert len(recorded) == 25 and {(a[1], a[2], a[3]) for a in recorded} == {(1, 200, '{"ok": true}')}
    assert all(a[5] is not None and a[5] > 0 for a in recorded)
    assert endpoint(db, endpoint_id)["failing_since"] is None


def test_during_a_rotation_both_secrets_sign(db, settings):
    with serve_receiver(Receiver(secrets=[])) as receiver:
        endpoint_id, secret = add_endpoint(db, receiver.url, previous_secret="whsec_" + "b2xkLXNlY3JldC0xMjM0NTY=")
        receiver.secrets.append("whsec_b2xkLXNlY3JldC0xMjM0NTY=")  # a receiver that still has only the old one
        add_events(db, 3)
        with running_worker(push_settings(settings)):
            wait_for(all_delivered(db, endpoint_id, 3), what="3 deliveries")
        got = receiver.delivered()
    assert len(got) == 3 and all(r.verified for r in got)
    assert all(len(r.headers["webhook-signature"].split(" ")) == 2 for r in got)


def test_500_three_times_then_the_fourth_try_delivers_each_event_with_one_id(db, settings):
    def answer(_id: str, tries: int) -> int:
        return 500 if tries < 3 else 200

    with serve_receiver(Receiver(secrets=[], answer=answer)) as receiver:
        endpoint_id, secret = add_endpoint(db, receiver.url)
        receiver.secrets.append(secret)
        seqs = add_events(db, 10)
        with running_worker(push_settings(settings, delivery_schedule=(0.1, 0.1, 0.1))):
            wait_for(all_delivered(db, endpoint_id, 10), what="10 deliveries")
        received = list(receiver.received)
    for seq in seqs:
        tries = [r for r in received if r.webhook_id == event_id(seq)]
        assert [r.answered for r in tries] == [500, 500, 500, 200]
        assert all(r.verified for r in tries)  # re-signed on each attempt, with the same id
    rows = deliveries(db, endpoint_id)
    assert {(r["status"], r["attempts"], r["code"]) for r in rows.values()} == {("delivered", 4, 200)}
    assert [a[1:3] for a in attempts(db, endpoint_id) if a[0] == seqs[0]] == [(1, 500), (2, 500), (3, 500),
                                                                              (4, 200)]
    assert endpoint(db, endpoint_id)["failing_since"] is None  # the successes cleared it


def test_when_the_schedule_runs_out_the_delivery_is_failed(db, settings):
    with serve_receiver(Receiver(secrets=[], answer=lambda _id, _tries: 302)) as receiver:
        receiver.headers_out["Location"] = "http://127.0.0.1:1/elsewhere"
        endpoint_id, _ = add_endpoint(db, receiver.url)
        [seq] = add_events(db, 1)
        with running_worker(push_settings(settings, delivery_schedule=(0.1,))):
            wait_for(lambda: deliveries(db, endpoint_id).get(seq, {}).get("status") == "failed", what="failed")
    assert len(receiver.received) == 2  # a redirect is a failed attempt, never followed
    row = deliveries(db, endpoint_id)[seq]
    assert row["attempts"] == 2 and row["code"] == 302 and "redirects are not followed" in row["error"]
    assert endpoint(db, endpoint_id)["failing_since"] is not None and endpoint(db, endpoint_id)["state"] == "enabled"


def test_retry_after_is_honoured(db, settings):
    with serve_receiver(Receiver(secrets=[], answer=lambda _id, tries: 503 if tries == 0 else 200)) as receiver:
        receiver.headers_out["Retry-After"] = "30"
        endpoint_id, _ = add_endpoint(db, receiver.url)
        [seq] = add_events(db, 1)
        with running_worker(push_settings(settings)):
            wait_for(lambda: len(attempts(db, endpoint_id)) == 1, what="the first attempt")
            wait_for(lambda: deliveries(db, endpoint_id).get(seq, {}).get("status") == "queued", what="queued again")
    waits = db.execute("SELECT extract(epoch FROM next_attempt_at - updated_at) FROM wa_outbox.deliveries "
                       "WHERE endpoint_id = %s", (endpoint_id,)).fetchone()[0]
    assert 29 <= waits <= 31  # the receiver's 30 s, not the schedule's 0.1 s


def test_410_disables_the_endpoint_and_nothing_more_is_sent_to_it(db, settings):
    with serve_receiver(Receiver(secrets=[], answer=lambda _id, _tries: 410)) as receiver:
        endpoint_id, _ = add_endpoint(db, receiver.url)
        add_events(db, 3)
        with running_worker(push_settings(settings)) as worker:
            wait_for(lambda: endpoint(db, endpoint_id)["state"] == "disabled", what="the endpoint disabled")
            posts = len(receiver.received)
            add_events(db, 5)
            rounds_pass(worker, 10)
            assert len(receiver.received) == posts <= 3
            assert worker.metrics.snapshot()[("wa_outbox_endpoints_disabled_total", '{"reason": "gone"}')] == 1
    assert endpoint(db, endpoint_id)["reason"] == "gone"
    # What was not delivered stays queued: enabling the endpoint again resumes it.
    assert {r["status"] for r in deliveries(db, endpoint_id).values()} == {"queued"}


def test_a_410_is_not_posted_again_while_its_endpoint_is_being_disabled(db, settings, monkeypatch):
    """The 410's delivery goes back to the queue as a retry (0.1 s here) before the recorder disables its endpoint;
    the recorder is another thread than the claims, so no claim runs until that is done: held here for a second
    (a busy machine), the retry is due long before the endpoint is disabled, and still it is not POSTed again."""
    real_disable = queries.disable_endpoints

    def slow_disable(*args, **kwargs):
        time.sleep(1.0)
        return real_disable(*args, **kwargs)

    monkeypatch.setattr(queries, "disable_endpoints", slow_disable)
    with serve_receiver(Receiver(secrets=[], answer=lambda _id, _tries: 410)) as receiver:
        endpoint_id, _ = add_endpoint(db, receiver.url)
        add_events(db, 1)
        with running_worker(push_settings(settings)) as worker:
            wait_for(lambda: endpoint(db, endpoint_id)["state"] == "disabled", what="the endpoint disabled")
            rounds_pass(worker, 5)
    assert len(receiver.received) == 1


def test_an_endpoint_failing_for_n_days_is_disabled_and_a_success_clears_failing_since(db, settings):
    with serve_receiver(Receiver(secrets=[], answer=lambda _id, _tries: 500)) as failing, \
            serve_receiver(Receiver(secrets=[])) as healthy:
        failing_id, _ = add_endpoint(db, failing.url)
        healthy_id, _ = add_endpoint(db, healthy.url)
        db.execute("UPDATE wa_outbox.endpoints SET failing_since = now() - interval '6 days'")
        add_events(db, 2)
        with running_worker(push_settings(settings, endpoint_disable_after_days=5)):
            wait_for(lambda: endpoint(db, failing_id)["state"] == "disabled", what="the failing endpoint disabled")
            wait_for(all_delivered(db, healthy_id, 2), what="the healthy endpoint's deliveries")
    assert endpoint(db, failing_id)["reason"] == "failing"
    assert endpoint(db, healthy_id) == {"state": "enabled", "reason": None, "failing_since": None}


def test_the_filter_selects_event_types(db, settings):
    with serve_receiver(Receiver(secrets=[])) as receiver:
        endpoint_id, _ = add_endpoint(db, receiver.url, event_types=["message.status"])
        add_events(db, 3, type_="message.received")
        wanted = add_events(db, 2, type_="message.status")
        with running_worker(push_settings(settings)):
            wait_for(all_delivered(db, endpoint_id, 2), what="the two status events")
    assert sorted(receiver.ids()) == sorted(event_id(s) for s in wanted)
    assert set(deliveries(db, endpoint_id)) == set(wanted)


def test_ordered_one_conversation_waits_for_its_failing_event_while_another_proceeds(db, settings):
    state = {"b_done": False}
    a_events: list[int] = []

    def answer(webhook_id: str, _tries: int) -> int:
        # The first event of conversation A fails until every event of B has arrived.
        return 500 if webhook_id == event_id(a_events[0]) and not state["b_done"] else 200

    with serve_receiver(Receiver(secrets=[], answer=answer)) as receiver:
        endpoint_id, _ = add_endpoint(db, receiver.url, ordered=True)
        for i in range(6):  # interleaved: A1 B1 A2 B2 ...
            a_events += add_events(db, 1, wa_id="551100000001", start=i)
            add_events(db, 1, wa_id="551100000002", start=i)
        with running_worker(push_settings(settings, delivery_schedule=(0.2,) * 50)):
            wait_for(lambda: sum(1 for r in receiver.delivered() if r.webhook_id not in
                                 {event_id(s) for s in a_events}) == 6, what="conversation B delivered")
            assert not [r for r in receiver.delivered() if r.webhook_id in {event_id(s) for s in a_events}]
            state["b_done"] = True
            wait_for(all_delivered(db, endpoint_id, 12), what="conversation A delivered too")
    order = [int(i.removeprefix("evt_")) for i in receiver.ids()]
    a_order = [s for s in order if s in a_events]
    b_order = [s for s in order if s not in a_events]
    assert a_order == sorted(a_events) and b_order == sorted(b_order) and len(b_order) == 6
    assert len(order) == len(set(order)) == 12
    # A's first event was tried again and again, and none of A's later events was sent meanwhile
    first_success = next(i for i, r in enumerate(receiver.received) if r.webhook_id == event_id(a_events[0])
                         and r.answered == 200)
    assert not {r.webhook_id for r in receiver.received[:first_success]} & {event_id(s) for s in a_events[1:]}


def test_ordered_a_failed_event_lets_its_conversation_move_on_and_stays_replayable(db, settings):
    first: list[int] = []
    with serve_receiver(Receiver(secrets=[], answer=lambda i, _t: 500 if i == event_id(first[0]) else 200)) as rec:
        endpoint_id, _ = add_endpoint(db, rec.url, ordered=True)
        seqs = add_events(db, 4)
        first.append(seqs[0])
        with running_worker(push_settings(settings, delivery_schedule=(0.1,))):
            wait_for(all_delivered(db, endpoint_id, 3), what="the rest of the conversation")
    assert deliveries(db, endpoint_id)[seqs[0]]["status"] == "failed"
    assert rec.ids() == [event_id(s) for s in seqs[1:]]  # in order, after the failed one's two attempts
    assert [r.webhook_id for r in rec.received[:2]] == [event_id(seqs[0])] * 2


def test_a_hanging_endpoint_does_not_stop_another_endpoint_or_sends(db, sender, sim, settings):
    hold = threading.Event()
    with serve_receiver(Receiver(secrets=[], hold=hold)) as hanging, serve_receiver(Receiver(secrets=[])) as fine:
        # Both take message.received only: the send below emits message.status events of its own.
        hanging_id, _ = add_endpoint(db, hanging.url, event_types=["message.received"])
        fine_id, _ = add_endpoint(db, fine.url, event_types=["message.received"])
        add_events(db, 40)
        nid = enqueue(db, to="+5511987654321", message=TEXT)
        s = push_settings(worker_settings(settings, sim.base_url), dry_run=False, delivery_timeout=60.0,
                          lease_seconds=90.0, delivery_concurrency=8, delivery_per_endpoint=4)
        with running_worker(s):
            wait_for(all_delivered(db, fine_id, 40), what="the healthy endpoint's 40 deliveries")
            wait_for(lambda: db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s",
                                        (nid,)).fetchone()[0] in ("sent", "delivered", "read"), what="the message sent")
            # The hanging endpoint holds its own share of threads, no more: 4 POSTs, and 4 more deliveries claimed
            # ahead (AHEAD), waiting for one of those to end.
            held = "SELECT count(*) FROM wa_outbox.deliveries WHERE endpoint_id = %s AND status = 'delivering'"
            wait_for(lambda: db.execute(held, (hanging_id,)).fetchone()[0] == 4 * _deliverer.AHEAD,
                     what="the hanging endpoint's share claimed")
            wait_for(lambda: hanging.waiting == 4, what="its 4 POSTs at the receiver")
            hold.set()
            wait_for(all_delivered(db, hanging_id, 40), what="the hanging endpoint's deliveries once it answers")
    assert hanging.most_waiting == 4  # never more POSTs at once than its share


def test_a_host_name_resolving_to_a_private_address_is_refused_at_delivery(db, settings):
    host = socket.gethostname()
    try:
        addresses = {a[4][0] for a in socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)}
    except OSError:
        pytest.skip(f"this machine's host name {host} does not resolve, so no name that resolves to a private "
                    "address is at hand (tests/unit/test_push_transport.py checks the rule with a resolver)")
    if not all(address_problem(a) for a in addresses):
        pytest.skip(f"this machine's host name {host} resolves to a public address, so it cannot stand for a name "
                    "that resolves to a private one (tests/unit/test_push_transport.py checks the rule with a "
                    "resolver)")
    with serve_receiver(Receiver(secrets=[])) as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        endpoint_id, _ = add_endpoint(db, f"https://{host}:{port}/hooks")
        [seq] = add_events(db, 1)
        with running_worker(push_settings(settings, endpoints_allow_private=False, delivery_schedule=(0.1,))):
            wait_for(lambda: deliveries(db, endpoint_id).get(seq, {}).get("status") == "failed", what="refused")
    assert receiver.received == []
    errors = [a[4] for a in attempts(db, endpoint_id)]
    assert len(errors) == 2 and all(e.startswith(f"refused: {host} resolves to") for e in errors)


def test_dispatch_takes_only_events_below_the_horizon_in_the_feeds_order_once(db, database_url, settings):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")

    def dispatched(batch: int) -> list[tuple[int, int]]:
        """The first dispatch that moves a cursor. The horizon is the cluster's: on a shared server another
        database's transaction may hold it back a moment, never for good."""
        return wait_for(lambda: [(r.scanned, r.inserted)
                                 for r in queries.dispatch_events(engine, batch=batch, backlog=1000)],
                        what="a dispatch below the horizon")

    try:
        endpoint_id, _ = add_endpoint(db, "https://example.com/hooks")
        with psycopg.connect(database_url) as slow:  # a writer whose transaction stays open
            slow.execute("SELECT pg_current_xact_id()")
            [early] = add_events(slow, 1, start=1)
            [late] = add_events(db, 1, start=2)  # committed, but after a transaction still running
            queries.dispatch_events(engine, batch=100, backlog=1000)
            assert deliveries(db, endpoint_id) == {}  # `late` is above the horizon while `slow` runs
            slow.commit()
        assert dispatched(100) == [(2, 2)]
        assert list(deliveries(db, endpoint_id)) == [early, late]  # the feed's order (txid, seq)
        assert queries.dispatch_events(engine, batch=100, backlog=1000) == []  # nothing twice
        add_events(db, 5)
        assert dispatched(3) == [(3, 3)]
        assert dispatched(3) == [(2, 2)]
        assert len(deliveries(db, endpoint_id)) == 7
    finally:
        engine.dispose()


def test_two_workers_deliver_each_event_once(db, settings):
    with serve_receiver(Receiver(secrets=[])) as receiver:
        endpoint_id, _ = add_endpoint(db, receiver.url)
        add_events(db, 200)
        s = push_settings(settings)
        with running_worker(s, worker_id="A"), running_worker(dataclasses.replace(s), worker_id="B"):
            wait_for(all_delivered(db, endpoint_id, 200), what="200 deliveries")
    assert len(receiver.ids()) == 200 == len(set(receiver.ids()))


def test_metrics_show_deliveries_and_endpoints(db, client, settings):
    with serve_receiver(Receiver(secrets=[], answer=lambda _id, _t: 500)) as receiver:
        add_endpoint(db, receiver.url)
        add_events(db, 2)
        with running_worker(push_settings(settings, delivery_schedule=(60.0,))) as worker:
            wait_for(lambda: worker.deliverer.stats["retry"] == 2, what="two failed attempts")
            worker.maintain()  # the heartbeat ships the counters
    text = client.get("/metrics").get_data(as_text=True)
    assert 'wa_outbox_queue_rows{queue="deliveries",status="queued"} 2.0' in text
    assert 'wa_outbox_endpoints{state="enabled"} 1.0' in text
    assert 'wa_outbox_endpoints{state="disabled"} 0.0' in text
    assert 'wa_outbox_deliveries_total{outcome="retry"} 2.0' in text
    assert 'wa_outbox_endpoints_disabled_total{reason="gone"} 0.0' in text
    assert "wa_outbox_deliveries_lag_seconds 0.0" in text  # nothing due: the retries wait for their time



def test_ordered_deliveries_behind_an_earlier_one_are_held_out_of_the_claims_way(db, database_url):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    try:
        endpoint_id, _ = add_endpoint(db, "https://example.com/hooks", ordered=True)
        seqs = add_events(db, 4)
        add_events(db, 1, wa_id=None)  # no conversation: never held
        wait_for(lambda: queries.dispatch_events(engine, batch=100, backlog=1000), what="a dispatch below the horizon")
        held = [seq for seq, infinite in db.execute(
            "SELECT event_seq, next_attempt_at = 'infinity' FROM wa_outbox.deliveries ORDER BY id").fetchall()
            if infinite]
        assert held == seqs[1:]
        # A wake-up missed (a dispatch and a record at the same moment): the rescuer's safety net wakes the row
        # once nothing earlier of its conversation is left undelivered.
        db.execute("UPDATE wa_outbox.deliveries SET status = 'delivered' WHERE event_seq = %s", (seqs[0],))
        queries.rescue_deliveries(engine, limit=100, max_attempts=8, held_window=120)
        due = [seq for (seq,) in db.execute("SELECT event_seq FROM wa_outbox.deliveries WHERE status = 'queued' "
                                            "AND next_attempt_at <= now() AND wa_id IS NOT NULL ORDER BY id")]
        assert due == [seqs[1]]
    finally:
        engine.dispose()


def test_a_replayed_failed_delivery_gets_the_whole_schedule_again(db, settings):
    """`endpoints replay --failed-only` after a receiver's outage: each failed delivery is retried on the whole
    schedule again (not failed anew after one try), and its attempts go on numbering delivery_attempts."""
    from wa_outbox import endpoints
    healthy = threading.Event()

    def answer(_id: str, tries: int) -> int:  # down until fixed; then two more failures per event before it works
        return 200 if healthy.is_set() and tries >= 4 else 500

    with serve_receiver(Receiver(secrets=[], answer=answer)) as receiver:
        endpoint_id, _ = add_endpoint(db, receiver.url)
        [seq] = add_events(db, 1)
        mine = push_settings(settings, delivery_schedule=(0.1, 0.1))
        with running_worker(mine):
            wait_for(lambda: deliveries(db, endpoint_id).get(seq, {}).get("status") == "failed", what="failed")
            healthy.set()
            engine = wa_db.create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
            try:
                assert endpoints.replay(engine, endpoint_id, failed_only=True).requeued == 1
            finally:
                engine.dispose()
            wait_for(all_delivered(db, endpoint_id, 1), what="the replayed delivery")
    assert [a[1:3] for a in attempts(db, endpoint_id)] == [(1, 500), (2, 500), (3, 500), (4, 500), (5, 200)]


def test_a_dispatch_by_another_worker_wakes_an_idle_worker_to_claim(db, settings):
    """A worker that found nothing to claim does not sleep until its next poll (here a minute away) while another
    worker dispatches: the dispatch's NOTIFY wa_outbox_deliveries wakes it to claim. (Its own dispatch is switched
    off: woken when its listener connects, it could otherwise dispatch the events itself.)"""
    engine = wa_db.create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        with serve_receiver(Receiver(secrets=[])) as receiver:
            endpoint_id, _ = add_endpoint(db, receiver.url)
            with running_worker(push_settings(settings, poll_interval=60.0)) as worker:
                worker.deliverer.dispatch = lambda batch=0: False  # this worker dispatches nothing: another does
                wait_for(lambda: worker.listening.is_set() and worker.deliverer.rounds >= 1,
                         what="the worker listening, its first round done")
                add_events(db, 3, notify=False)
                # another worker's dispatch (the first that moves the cursor: the horizon may hold it a moment)
                wait_for(lambda: queries.dispatch_events(engine, batch=10, backlog=10), what="a dispatch")
                wait_for(all_delivered(db, endpoint_id, 3), timeout=20.0, what="3 deliveries, well before the poll")
        assert len(set(receiver.ids())) == 3  # at least once: each of the 3 events
    finally:
        engine.dispose()


def test_dispatch_waits_while_an_endpoint_has_a_backlog_of_due_deliveries(db, database_url):
    """Back-pressure: an endpoint with `backlog` deliveries due and unclaimed gets no more until its threads catch
    up (its events wait in the feed); retries not yet due and held rows do not count, so a failing receiver or a
    stuck conversation never stops the rest."""
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")

    def dispatch() -> list[tuple[int, int]]:
        """The first dispatch that moves the cursor (the cluster-wide horizon may hold it back a moment)."""
        return wait_for(lambda: [(r.scanned, r.inserted) for r in queries.dispatch_events(engine, batch=10, backlog=3)],
                        what="a dispatch below the horizon")

    try:
        endpoint_id, _ = add_endpoint(db, "https://example.com/hooks")
        add_events(db, 3)
        assert dispatch() == [(3, 3)]            # 3 due deliveries now wait for a thread: the backlog
        add_events(db, 4)
        wait_for(lambda: db.execute("SELECT wa_outbox.events_horizon() > max(txid) FROM wa_outbox.events"
                                    ).fetchone()[0], what="the new events below the horizon")
        assert queries.dispatch_events(engine, batch=10, backlog=3) == []   # held in the feed
        # The three become retries not yet due (or held behind a conversation): the dispatch goes on.
        db.execute("UPDATE wa_outbox.deliveries SET next_attempt_at = now() + interval '1 hour' WHERE id = "
                   "(SELECT min(id) FROM wa_outbox.deliveries)")
        db.execute("UPDATE wa_outbox.deliveries SET next_attempt_at = 'infinity' WHERE id = "
                   "(SELECT max(id) FROM wa_outbox.deliveries)")
        assert dispatch() == [(4, 4)]
        assert len(deliveries(db, endpoint_id)) == 7
    finally:
        engine.dispose()


def test_deliveries_yield_to_claim_bound_sends_one_round_at_a_time_then_catch_up(db, settings, monkeypatch):
    """A saturated worker sends first: while its sends are claim-bound (Sender.claim_bound), the deliveries loop runs
    one round per YIELD_ROUND_INTERVAL (here an hour: only the rounds forced below), each taking at most a round's
    worth of events; once the sends catch up, it delivers the rest at full speed."""
    monkeypatch.setattr(_deliverer, "YIELD_ROUND_INTERVAL", 3600.0)
    yielding = threading.Event()
    with serve_receiver(Receiver(secrets=[])) as receiver:
        endpoint_id, secret = add_endpoint(db, receiver.url)
        receiver.secrets.append(secret)
        with running_worker(push_settings(settings, delivery_concurrency=4, delivery_per_endpoint=4)) as worker:
            # the wiring: the worker's deliveries yield exactly while its sender says it is claim-bound
            assert worker.deliverer.yield_to is not None and not worker.deliverer.yield_to()
            worker.sender._claim_bound_until = time.monotonic() + 60
            assert worker.deliverer.yield_to()
            worker.sender._claim_bound_until = 0.0
            worker.deliverer.yield_to = yielding.is_set
            yielding.set()
            wait_for(lambda: worker.deliverer.yielded_rounds >= 1, what="the first round while yielding")
            add_events(db, 10)
            # A window for NOTIFY to arrive: the loop must not go round for it. (On a busy machine the first round
            # may still be running and meet the events: then it took one round's worth, never more.)
            time.sleep(1.0)
            assert len(receiver.delivered()) <= 4 and worker.deliverer.yielded_rounds == 1
            worker.deliverer._next_yield_round = 0.0  # the next round is due: it takes one round's worth more
            wait_for(lambda: worker.deliverer.yielded_rounds == 2 and len(receiver.delivered()) >= 4,
                     what="one round's deliveries")
            time.sleep(0.5)
            assert len(receiver.delivered()) <= 8 and worker.deliverer.yielded_rounds == 2  # 10 were waiting
            yielding.clear()  # the sends caught up
            wait_for(all_delivered(db, endpoint_id, 10), what="the other deliveries at full speed")
        assert sorted(r.webhook_id for r in receiver.delivered()) == sorted(
            event_id(seq) for (seq,) in db.execute("SELECT seq FROM wa_outbox.events").fetchall())


def test_deliveries_run_at_their_own_niceness_and_the_sends_at_the_workers(db, sender, settings):
    """WA_OUTBOX_DELIVERY_NICE: on shared, saturated CPUs the web and the sends come first. Linux keeps a niceness per
    thread: the delivery threads, the deliveries loop and its recorder are lowered; the send threads, the dispatcher
    and the inbound thread keep the worker's own."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base >= 7:
        pytest.skip(f"the tests run at niceness {base}: a delivery niceness of 7 would change nothing to see")

    def niceness(thread: threading.Thread) -> int:
        assert thread.native_id is not None and thread.is_alive(), thread.name
        return os.getpriority(os.PRIO_PROCESS, thread.native_id)

    with serve_receiver(Receiver(secrets=[])) as receiver:
        endpoint_id, secret = add_endpoint(db, receiver.url)
        receiver.secrets.append(secret)
        add_events(db, 5)
        ids = [enqueue(db, to=f"+5511987{i:06d}", message=TEXT) for i in range(3)]
        with running_worker(push_settings(settings, delivery_nice=7)) as worker:
            wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE id = ANY(%s) AND "
                                        "status = 'sent'", (ids,)).fetchone()[0] == 3, what="3 sends")
            wait_for(lambda: len(receiver.delivered()) >= 5 + 3, what="the 5 events and the 3 sends' delivered")
            named = {t.name: t for t in threading.enumerate()}
            delivering = [*worker.deliverer._executor._threads, named["deliveries-recorder"],
                          next(t for t in worker._threads if t.name == "deliveries")]
            at_the_workers = [*worker.sender._executor._threads,
                              *(t for t in worker._threads if t.name in ("inbound", "recorder", "maintenance"))]
            assert worker.deliverer._executor._threads and worker.sender._executor._threads
            assert {t.name: niceness(t) for t in delivering} == {t.name: 7 for t in delivering}
            assert {t.name: niceness(t) for t in at_the_workers} == {t.name: base for t in at_the_workers}


def test_a_backlog_held_by_the_back_pressure_is_dispatched_as_threads_free_not_once_per_poll(db, settings,
                                                                                              monkeypatch):
    """The dispatch holds an endpoint's events in the feed while it has a backlog of due deliveries; once the threads
    have taken that backlog, the next batch is dispatched at once (not at the next poll: here 30 s away), so a backlog
    goes as fast as the threads deliver, not one batch per poll interval."""
    monkeypatch.setattr(_deliverer, "DISPATCH_BATCH", 5)
    monkeypatch.setattr(_deliverer, "DISPATCH_BACKLOG", 5)
    with serve_receiver(Receiver(secrets=[])) as receiver:
        endpoint_id, secret = add_endpoint(db, receiver.url)
        receiver.secrets.append(secret)
        add_events(db, 40)
        with running_worker(push_settings(settings, delivery_concurrency=2, delivery_per_endpoint=2,
                                          poll_interval=30.0)):
            wait_for(all_delivered(db, endpoint_id, 40), timeout=25.0, what="40 deliveries, well before a poll")
    assert len({r.webhook_id for r in receiver.delivered()}) == 40
