"""The delivery worker end to end: real Postgres, the real HTTP client, the Graph API simulator on a real socket
posting signed status webhooks to the real web app, which the worker then processes."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from tests.conftest import DATA
from tests.live import SENDER, running_worker, wait_for, worker_settings
from wa_outbox.enqueue import enqueue

TEXT = {"type": "text", "text": {"body": "Seu pedido saiu ✓"}}


def queue(db, n: int = 1, to: str = "+5511987654321", message=TEXT, **kwargs) -> list[int]:
    return [enqueue(db, to=to if n == 1 else f"+55119{i:08d}", message=message, **kwargs) for i in range(n)]


def row(db, nid: int) -> dict:
    cur = db.execute("SELECT status, attempts, wamid, last_error, next_attempt_at FROM wa_outbox.notifications "
                     "WHERE id = %s", (nid,))
    return dict(zip(("status", "attempts", "wamid", "last_error", "next_attempt_at"), cur.fetchone(), strict=True))


def events(db, nid: int) -> list[str]:
    return [e for (e,) in db.execute("SELECT event FROM wa_outbox.notification_events WHERE notification_id = %s "
                                     "ORDER BY id", (nid,))]


def status_is(db, nid: int, *wanted: str):
    return lambda: row(db, nid)["status"] in wanted


def test_a_message_goes_queued_sending_sent_delivered_read(db, sender, sim, settings):
    [nid] = queue(db, correlation_id="order-1")
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(status_is(db, nid, "read"), what="the read status webhook")
    received = sim.messages(to="+5511987654321")
    assert len(received) == 1
    assert received[0]["body"] == {"messaging_product": "whatsapp", "recipient_type": "individual",
                                   "to": "+5511987654321", **TEXT, "biz_opaque_callback_data": str(nid)}
    r = row(db, nid)
    assert r["wamid"] == received[0]["wamid"] and r["attempts"] == 1
    assert events(db, nid) == ["queued", "sending", "sent", "delivered", "read"]
    corr = {c for (c,) in db.execute("SELECT DISTINCT correlation_id FROM wa_outbox.notification_events "
                                     "WHERE notification_id = %s", (nid,))}
    assert corr == {"order-1"}


def test_every_spec_example_is_sent_unchanged_but_for_to_and_callback(db, sender, sim, settings):
    examples = json.loads((DATA / "openapi" / "message-examples.json").read_text())
    sendable = {name: ex for name, ex in examples.items() if "status" not in ex}  # the read receipt is refused
    assert len(sendable) == 49
    ids = {queue(db, to="+16505551234", message=ex)[0]: name for name, ex in sendable.items()}
    # One recipient: pair pacing would spread them over minutes (as Meta's pair limit wants); bodies are the point.
    with running_worker(worker_settings(settings, sim.base_url, rate_limit_mps=1000, pair_burst=len(ids))):
        wait_for(lambda: len(sim.messages()) == len(ids), what="every example sent")
    for received in sim.messages():
        nid = int(received["biz_opaque_callback_data"])
        example = sendable[ids[nid]]
        assert received["body"] == {**example, "to": "+16505551234", "biz_opaque_callback_data": str(nid),
                                    "messaging_product": "whatsapp", "recipient_type": "individual"}, ids[nid]


def test_two_workers_never_send_the_same_row(db, sender, sim, settings):
    sim.configure(webhook_url=None)  # the sends are the point: no status webhooks for the in-process web to answer
    ids = queue(db, 300)
    s = worker_settings(settings, sim.base_url, rate_limit_mps=10_000)
    with running_worker(s, worker_id="A"), running_worker(s, worker_id="B"):
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'queued' "
                                    "OR status = 'sending'").fetchone()[0] == 0, what="the queue to drain",
                 timeout=60)
    callbacks = [m["biz_opaque_callback_data"] for m in sim.messages()]
    assert len(callbacks) == 300 and set(callbacks) == {str(i) for i in ids}
    senders = dict(db.execute("SELECT e.detail->>'worker', count(*) FROM wa_outbox.notification_events e "
                              "WHERE event = 'sending' GROUP BY 1").fetchall())
    # Each claim was sent once, or given back unsent (a send whose slot slipped, re-slotted three times) and claimed
    # again.
    given_back = db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'released'"
                            ).fetchone()[0]
    assert set(senders) == {"A", "B"} and sum(senders.values()) == 300 + given_back


def test_5xx_then_success_ends_sent_after_backoff(db, sender, sim, settings):
    sim.set_faults([{"mode": "http_error", "status": 503, "count": 2}])
    [nid] = queue(db)
    started = time.monotonic()
    with running_worker(worker_settings(settings, sim.base_url, retry_base_seconds=0.5, retry_max_seconds=5)):
        wait_for(status_is(db, nid, "sent", "delivered", "read"), what="sent after retries")
    elapsed = time.monotonic() - started
    assert events(db, nid)[:6] == ["queued", "sending", "retry_scheduled", "sending", "retry_scheduled", "sending"]
    assert row(db, nid)["attempts"] == 3
    assert elapsed >= 0.25 + 0.5  # equal jitter: at least half of 0.5 s, then half of 1 s
    assert len(sim.messages()) == 1 and sim.stats()["requests"] == 3


@pytest.mark.parametrize("code, status, event", [
    (131026, "dead", "dead"), (131047, "dead", "dead"), (132001, "dead", "dead"), (10, "queued", "sender_paused"),
    (131000, "queued", "retry_scheduled"), (2, "queued", "retry_scheduled"),
    (130429, "queued", "throttled"), (80007, "queued", "throttled"),
    (131056, "queued", "pair_limited"),
    (190, "queued", "sender_paused"), (131031, "queued", "sender_paused"),
])
def test_each_error_class_ends_where_the_table_says(code, status, event, db, sender, sim, settings):
    sim.set_faults([{"mode": "error", "code": code}])
    [nid] = queue(db)
    s = worker_settings(settings, sim.base_url, retry_base_seconds=30, retry_max_seconds=60)
    with running_worker(s):
        wait_for(lambda: event in events(db, nid), what=event)
    r = row(db, nid)
    assert r["status"] == status
    assert r["last_error"]["code"] == code
    refunded = event in ("throttled", "pair_limited", "sender_paused")
    assert r["attempts"] == (0 if refunded else 1)
    paused = db.execute("SELECT paused_until > now(), pause_reason FROM wa_outbox.rate_limits "
                        "WHERE phone_number_id = %s", (SENDER,)).fetchone()
    assert bool(paused and paused[0]) == (event in ("throttled", "sender_paused"))
    if event == "pair_limited":
        strikes = db.execute("SELECT pair_strikes, pair_paused_until > now() FROM wa_outbox.contacts "
                             "WHERE wa_id = '5511987654321'").fetchone()
        assert strikes == (1, True)
    if status == "queued" and event != "pair_limited":  # the pair pause is applied by the next claim
        assert r["next_attempt_at"].timestamp() > time.time()  # not hammering


def test_an_auth_failure_pauses_the_sender_instead_of_killing_the_queue(db, sender, sim, settings):
    sim.set_faults([{"mode": "error", "code": 190}])
    ids = queue(db, 50)
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.notification_events "
                                    "WHERE event = 'sender_paused'").fetchone()[0] >= 1, what="a pause")
        # The worker keeps claiming while the sender is paused: three claims later it has had every chance to send
        # the other rows, had the pause not held.
        rounds = worker.sender.claim_rounds
        wait_for(lambda: worker.sender.claim_rounds >= rounds + 3, what="three claims after the pause")
    dead = db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'dead'").fetchone()[0]
    assert dead == 0
    assert sim.stats()["requests"] <= 8 + 1  # one claim's worth at most, not 50 doomed sends
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'queued' AND attempts = 0"
                      ).fetchone()[0] == len(ids)


def test_lost_response_is_unknown_then_settled_sent_by_the_status_webhook(db, sender, sim, settings):
    sim.set_faults([{"mode": "lost_response", "count": 1}])
    [nid] = queue(db)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(status_is(db, nid, "read"), what="settled by webhooks")
    assert len(sim.messages()) == 1 and sim.stats()["requests"] == 1  # never resent
    evs = events(db, nid)
    assert evs[:3] == ["queued", "sending", "unknown"] and "reconciled" in evs
    assert row(db, nid)["wamid"] == sim.messages()[0]["wamid"]


def test_read_timeout_after_acceptance_is_settled_without_a_resend(db, sender, sim, settings):
    sim.set_faults([{"mode": "latency", "ms": 2500, "count": 1}])
    [nid] = queue(db)
    with running_worker(worker_settings(settings, sim.base_url, send_timeout=1.0, lease_seconds=10)):
        wait_for(lambda: "unknown" in events(db, nid), what="unknown")
        assert "read timeout" in row(db, nid)["last_error"]["message"]
        wait_for(status_is(db, nid, "read"), what="settled by webhooks")
    assert sim.stats()["requests"] == 1 and len(sim.messages()) == 1


def test_unknown_past_the_window_is_resent_when_webhooks_flow(db, sender, sim, settings):
    sim.configure(webhook_url=None)  # Meta's statuses for this send never come
    sim.set_faults([{"mode": "timeout", "ms": 3000, "count": 1}])  # and it was not accepted
    [nid] = queue(db)
    # a status webhook arrived recently for this sender: webhooks are flowing
    db.execute("INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, phone_number_id, payload, status) "
               "VALUES ('s:x:sent', 'messages', 'status', %s, '{}', 'done')", (SENDER,))
    s = worker_settings(settings, sim.base_url, send_timeout=1.0, lease_seconds=10, unknown_window_seconds=1.0)
    with running_worker(s) as worker:
        wait_for(lambda: "unknown" in events(db, nid), what="unknown")
        time.sleep(1.1)  # the behaviour under test: the 1 s unknown window passes
        worker.maintain()
        wait_for(status_is(db, nid, "sent"), what="resent")
    assert events(db, nid)[:5] == ["queued", "sending", "unknown", "requeued", "sending"]
    assert len(sim.messages()) == 1


def test_unknown_past_the_window_is_dead_when_no_webhooks_arrive(db, sender, sim, settings):
    sim.configure(webhook_url=None)
    sim.set_faults([{"mode": "lost_response"}])
    [nid] = queue(db)
    s = worker_settings(settings, sim.base_url, unknown_window_seconds=1.0)
    with running_worker(s) as worker:
        wait_for(lambda: "unknown" in events(db, nid), what="unknown")
        time.sleep(1.1)  # the behaviour under test: the 1 s unknown window passes
        worker.maintain()
    r = row(db, nid)
    assert r["status"] == "dead"
    assert "no status webhooks are arriving" in r["last_error"]["message"]
    assert len(sim.messages()) == 1


def test_notify_wakes_an_idle_worker_long_before_its_poll(db, sender, sim, settings):
    with running_worker(worker_settings(settings, sim.base_url, poll_interval=30.0)) as worker:
        wait_for(lambda: worker.sender.stats is not None and db.execute(
            "SELECT count(*) FROM wa_outbox.workers").fetchone()[0] == 1, what="the worker up")
        assert worker.listening.wait(20), "the listener never registered its LISTEN"
        [nid] = queue(db)
        wait_for(status_is(db, nid, "sent", "delivered", "read"), timeout=10, what="a NOTIFY-driven send")


def test_heartbeat_row_while_running_and_gone_after(db, sender, sim, settings):
    with running_worker(worker_settings(settings, sim.base_url), worker_id="hb-1"):
        wait_for(lambda: db.execute("SELECT state FROM wa_outbox.workers WHERE id = 'hb-1'").fetchone(),
                 what="heartbeat")
    assert db.execute("SELECT count(*) FROM wa_outbox.workers WHERE id = 'hb-1'").fetchone()[0] == 0


def test_rate_limit_is_shared_and_paces_sends(db, sender, sim, settings):
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens) VALUES (%s, 20, 5, 5)",
               (SENDER,))
    queue(db, 60)
    s = worker_settings(settings, sim.base_url, poll_interval=0.05)
    started = time.monotonic()
    with running_worker(s, worker_id="A"), running_worker(s, worker_id="B"):
        wait_for(lambda: len(sim.messages()) == 60, what="all sent")
    times = sorted(m["received_at"] for m in sim.messages())
    span = times[-1] - times[0]
    # 5 at once, then 55 at 20/s: at least 2.75 s end to end, whatever the number of workers
    assert span >= 55 / 20 * 0.9, span
    assert time.monotonic() - started >= span


def test_inbound_messages_open_the_window_and_reach_the_handlers(db, sender, sim, settings):
    seen, fail_once = [], {"left": 1}

    def handler(event):
        if fail_once["left"]:
            fail_once["left"] -= 1
            raise RuntimeError("app database busy")
        seen.append(event)

    with running_worker(worker_settings(settings, sim.base_url), handlers=[handler]):
        wamid = sim.inbound("+5511912345678", "Oi, meu pedido?")
        wait_for(lambda: len(seen) == 1, what="the handler to succeed on its retry")
    assert seen[0]["wamid"] == wamid and seen[0]["kind"] == "message"
    assert seen[0]["payload"]["value"]["messages"][0]["text"]["body"] == "Oi, meu pedido?"
    window = db.execute("SELECT last_inbound_at > now() - interval '1 minute' FROM wa_outbox.contacts "
                        "WHERE wa_id = '5511912345678'").fetchone()
    assert window == (True,)
    assert db.execute("SELECT status, attempts FROM wa_outbox.webhook_events WHERE wamid = %s",
                      (wamid,)).fetchone() == ("done", 2)


def test_a_handler_that_keeps_failing_ends_dead(db, sender, sim, settings):
    def broken(event):
        raise ValueError("bug in the app")

    # Two attempts by the policy (WA_OUTBOX_MAX_ATTEMPTS=2), not by changing the table: a column default left behind
    # used to give every later test's webhook events max_attempts = 10.
    with running_worker(dataclasses.replace(worker_settings(settings, sim.base_url), max_attempts=2),
                        handlers=[broken]):
        wamid = sim.inbound("+5511912345678", "hello")
        wait_for(lambda: db.execute("SELECT status FROM wa_outbox.webhook_events WHERE wamid = %s",
                                    (wamid,)).fetchone() == ("dead",), what="dead")
    assert db.execute("SELECT attempts, max_attempts FROM wa_outbox.webhook_events WHERE wamid = %s",
                      (wamid,)).fetchone() == (2, None)
    assert "bug in the app" in db.execute("SELECT last_error FROM wa_outbox.webhook_events WHERE wamid = %s",
                                          (wamid,)).fetchone()[0]


def test_failed_status_after_acceptance(db, sender, sim, settings):
    sim.set_faults([{"mode": "failed_status", "code": 131026}])
    [nid] = queue(db)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(status_is(db, nid, "failed"), what="failed")
    r = row(db, nid)
    assert r["last_error"]["errors"][0]["code"] == 131026


def test_statuses_in_any_order_never_move_a_message_back(db, sender, sim, settings):
    sim.configure(reorder_rate=1.0, duplicate_rate=1.0)
    ids = queue(db, 10)
    with running_worker(worker_settings(settings, sim.base_url)):
        for nid in ids:
            wait_for(status_is(db, nid, "read"), what=f"{nid} read")
        assert sim.wait_for_webhooks_idle(10)
        # Every status webhook is stored once the simulator is idle (the receiver answers after its INSERT):
        # wait until the worker has applied them all, duplicates and stale ones included.
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.webhook_events "
                                    "WHERE status IN ('queued', 'processing')").fetchone()[0] == 0,
                 what="every status webhook applied")
    assert {row(db, nid)["status"] for nid in ids} == {"read"}


def test_handlers_are_loaded_by_dotted_path_and_bad_paths_are_config_errors(db, sender, sim, settings):
    from tests import inbound_handlers
    from wa_outbox.config import ConfigError
    from wa_outbox.worker._inbound import load_handlers

    for bad, fragment in (("tests.nope:f", "cannot load"), ("tests.inbound_handlers:missing", "cannot load"),
                          ("tests.inbound_handlers:not_callable", "not callable")):
        with pytest.raises(ConfigError, match=fragment):
            load_handlers((bad,))
    s = worker_settings(settings, sim.base_url, inbound_handlers=("tests.inbound_handlers:on_event",))
    with running_worker(s):
        wamid = sim.inbound("+5511912345678", "por dotted path")
        wait_for(lambda: any(e["wamid"] == wamid for e in inbound_handlers.received), what="the handler called")
