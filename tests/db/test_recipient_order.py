"""Per recipient: order (one line per sender and recipient, one send in flight), pair pacing, the 24-hour window rule
and claim priority; against real Postgres, and the simulator for the live cases."""

from __future__ import annotations

import json

import pytest

from tests.conftest import API_TOKEN
from tests.live import SENDER, running_worker, wait_for, worker_settings
from wa_outbox import db as wdb
from wa_outbox.config import Settings
from wa_outbox.enqueue import enqueue
from wa_outbox.messages import InvalidMessage
from wa_outbox.worker._reconciler import release_stalled_lines
from wa_outbox.worker._sender import claim_pacing

A, B = "+5511987650001", "+5511987650002"


def text(body: str) -> dict:
    return {"type": "text", "text": {"body": body}}


TEMPLATE = {"type": "template", "template": {"name": "hello_world", "language": {"code": "en_US"}}}


@pytest.fixture
def auto(database_url):
    engine = wdb.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def claim(engine, worker: str = "W", limit: int = 10, **settings) -> list[int]:
    rows = wdb.fetch(engine, "claim_notifications", {"limit": limit, "worker_id": worker, "lease_seconds": 60,
                                                     "default_mps": 1000, **claim_pacing(Settings(**settings))})
    return [r["id"] for r in rows]


def record(engine, nid: int, status: str = "sent", worker: str = "W", delay: float | None = None) -> None:
    outcome = {"id": nid, "status": status, "event": "sent" if status == "sent" else "retry_scheduled",
               "wamid": f"wamid.{nid}" if status == "sent" else None, "error": None, "delay": delay,
               "refund": False, "detail": {}}
    wdb.execute(engine, "record_outcomes", {"worker_id": worker, "outcomes": json.dumps([outcome])})


def state(db, nid: int) -> tuple:
    return db.execute("SELECT status, blocked FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()


# --- order, in the claim ---------------------------------------------------------------------------------------------


def test_followers_are_parked_and_released_one_by_one_in_enqueue_order(auto, db, sender):
    ids = [enqueue(db, to=A, message=text(str(i))) for i in range(3)]
    other = enqueue(db, to=B, message=text("b"))
    assert sorted(claim(auto, pair_burst=10)) == [ids[0], other]  # one per line; the others parked
    assert [state(db, i) for i in ids[1:]] == [("queued", True), ("queued", True)]
    assert claim(auto, pair_burst=10) == []  # parked rows are out of the claim's way
    record(auto, ids[0])
    assert state(db, ids[1]) == ("queued", False) and state(db, ids[2]) == ("queued", True)
    assert claim(auto, pair_burst=10) == [ids[1]]
    record(auto, ids[1])
    assert claim(auto, pair_burst=10) == [ids[2]]


def test_a_retry_or_an_unknown_keeps_the_line_waiting(auto, db, sender):
    first, second = enqueue(db, to=A, message=text("1")), enqueue(db, to=A, message=text("2"))
    assert claim(auto, pair_burst=10) == [first]
    record(auto, first, status="queued", delay=0)  # a retry: due again at once, still first in line
    assert claim(auto, pair_burst=10) == [first]
    assert state(db, second) == ("queued", True)
    db.execute("UPDATE wa_outbox.notifications SET status = 'unknown', locked_by = NULL, locked_until = NULL, "
               "unknown_since = now() - interval '1 hour' WHERE id = %s", (first,))
    assert claim(auto, pair_burst=10) == []
    # the unknown send goes dead by policy: the next one goes
    wdb.fetch(auto, "settle_unknown", {"window_seconds": 60, "policy": "dead", "limit": 10, "max_attempts": 10})
    assert state(db, first)[0] == "dead" and state(db, second) == ("queued", False)
    assert claim(auto, pair_burst=10) == [second]


def test_a_status_webhook_settling_the_head_releases_the_next(auto, db, sender):
    first, second = enqueue(db, to=A, message=text("1")), enqueue(db, to=A, message=text("2"))
    claim(auto, pair_burst=10)
    db.execute("UPDATE wa_outbox.notifications SET status = 'unknown', locked_by = NULL, locked_until = NULL, "
               "unknown_since = now() WHERE id = %s", (first,))
    rows = wdb.fetch(auto, "apply_statuses", {"statuses": json.dumps([
        {"event_id": 1, "wamid": "wamid.X", "status": "sent", "notification_id": first, "errors": None,
         "ts": 1749416383}])})
    assert [r["disposition"] for r in rows] == ["applied"]
    assert state(db, first)[0] == "sent" and state(db, second) == ("queued", False)


def test_unordered_messages_neither_wait_nor_make_others_wait(auto, db, sender):
    first = enqueue(db, to=A, message=text("1"))
    loose = enqueue(db, to=A, message=text("2"), ordered=False)
    assert sorted(claim(auto, pair_burst=10)) == [first, loose]


def test_a_stalled_line_is_released_by_the_sweep(auto, db, sender):
    first, second = enqueue(db, to=A, message=text("1")), enqueue(db, to=A, message=text("2"))
    claim(auto, pair_burst=10)
    # as if the release had been missed: the head finished without releasing its follower
    db.execute("UPDATE wa_outbox.notifications SET status = 'sent', locked_by = NULL, locked_until = NULL "
               "WHERE id = %s", (first,))
    assert state(db, second) == ("queued", True)
    assert release_stalled_lines(auto) == [second]
    assert release_stalled_lines(auto) == []
    assert claim(auto, pair_burst=10) == [second]


def test_a_line_waiting_on_a_parked_head_with_one_going_is_not_released(auto, db, sender):
    ids = [enqueue(db, to=A, message=text(str(i))) for i in range(3)]
    claim(auto, pair_burst=10)
    assert release_stalled_lines(auto) == []  # ids[0] is going: its followers stay parked
    assert [state(db, i)[1] for i in ids] == [False, True, True]


# --- pair pacing, priority, the window ---------------------------------------------------------------------------


def test_pair_pacing_lets_a_burst_go_then_one_per_interval(auto, db, sender):
    ids = [enqueue(db, to=A, message=text(str(i)), ordered=False) for i in range(5)]
    assert sorted(claim(auto, pair_burst=2, pair_rate_seconds=6)) == ids[:2]
    waits = [r[0] for r in db.execute(
        "SELECT extract(epoch FROM next_attempt_at - now()) FROM wa_outbox.notifications WHERE status = 'queued' "
        "ORDER BY id")]
    assert [round(w / 6) for w in waits] == [1, 2, 3]  # 6, 12, 18 s: one per interval after the burst
    assert db.execute("SELECT sum(attempts) FROM wa_outbox.notifications WHERE status = 'queued'").fetchone()[0] == 0


def test_pair_pacing_off_lets_every_message_go_and_writes_no_pacing_state(auto, db, sender):
    ids = [enqueue(db, to=A, message=text(str(i)), ordered=False) for i in range(5)]
    assert sorted(claim(auto, pair_burst=2, pair_rate_seconds=0)) == ids
    assert db.execute("SELECT count(*) FROM wa_outbox.contacts WHERE pair_paced_until IS NOT NULL").fetchone()[0] == 0


def test_transactional_messages_go_before_campaign_messages(auto, db, sender):
    campaign = [enqueue(db, to=f"+55119{i:08d}", message=text("c")) for i in range(3)]
    db.execute("UPDATE wa_outbox.notifications SET priority = 1, next_attempt_at = now() - interval '1 hour'")
    order_confirmation = enqueue(db, to=B, message=text("your order"))
    assert claim(auto, limit=1) == [order_confirmation]
    assert sorted(claim(auto, limit=5)) == campaign


@pytest.mark.parametrize("enforce", [True, False])
def test_the_24_hour_window_kills_free_form_messages_only_when_enforced(auto, db, sender, enforce):
    recent, stale, never = "+5511987650011", "+5511987650012", "+5511987650013"
    db.execute("INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, last_inbound_at) VALUES "
               "(%s, '5511987650011', now() - interval '1 hour'), (%s, '5511987650012', now() - interval '25 hours')",
               (SENDER, SENDER))
    ok = enqueue(db, to=recent, message=text("in the window"))
    late = enqueue(db, to=stale, message=text("too late"))
    cold = enqueue(db, to=never, message=text("never wrote"), ordered=False)
    template = enqueue(db, to=never, message=TEMPLATE, ordered=False)
    claimed = claim(auto, service_window="enforce" if enforce else "off")
    if not enforce:
        assert sorted(claimed) == [ok, late, cold, template]
        return
    assert sorted(claimed) == [ok, template]
    for nid in (late, cold):
        status, error = db.execute("SELECT status, last_error FROM wa_outbox.notifications WHERE id = %s",
                                   (nid,)).fetchone()
        assert status == "dead" and error["reason"] == "outside_service_window"
        assert db.execute("SELECT detail->>'reason' FROM wa_outbox.notification_events WHERE notification_id = %s "
                          "AND event = 'dead'", (nid,)).fetchone() == ("outside_service_window",)


def test_a_message_dead_outside_the_window_lets_its_line_go_on(auto, db, sender):
    first = enqueue(db, to=A, message=text("free form"))
    second = enqueue(db, to=A, message=TEMPLATE)
    assert claim(auto, service_window="enforce", pair_burst=10) == [second]
    assert state(db, first)[0] == "dead"


# --- the ordered field at every entry point ------------------------------------------------------------------------


def test_ordered_is_stored_from_sql_python_and_http(auto, db, sender, client):
    by_sql = db.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb, ordered => false)",
                        (A, json.dumps(text("x")))).fetchone()[0]
    by_old_signature = db.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb, NULL, NULL, NULL)",
                                  (A, json.dumps(text("y")))).fetchone()[0]
    by_python = enqueue(db, to=A, message=text("z"), ordered=False)
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    by_http = client.post("/v1/messages", json={"to": A, "message": text("w"), "ordered": False},
                          headers=headers).get_json()["id"]
    ordered = dict(db.execute("SELECT id, ordered FROM wa_outbox.notifications").fetchall())
    assert ordered == {by_sql: False, by_old_signature: True, by_python: False, by_http: False}
    refused = client.post("/v1/messages", json={"to": A, "message": text("v"), "ordered": "no"}, headers=headers)
    assert refused.status_code == 400 and "ordered" in refused.get_json()["error"]["message"]
    with pytest.raises(InvalidMessage, match="ordered"):
        enqueue(db, to=A, message=text("u"), ordered="no")
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 4


# --- live: the simulator with its limits and faults ----------------------------------------------------------------


def sending_spans(db, recipient: str) -> list[tuple]:
    """(id, first claim, final acceptance) per message to `recipient`, by id."""
    return db.execute(
        "SELECT n.id, min(e.created_at) FILTER (WHERE e.event = 'sending'), "
        "       max(e.created_at) FILTER (WHERE e.event IN ('sent', 'reconciled')) "
        "FROM wa_outbox.notifications n JOIN wa_outbox.notification_events e ON e.notification_id = n.id "
        "WHERE n.recipient = %s GROUP BY n.id ORDER BY n.id", (recipient.lstrip("+"),)).fetchall()


def test_order_per_recipient_holds_under_retries_and_unknown(db, sender, sim, settings):
    # The first send to A fails with 131000 (retried), the retry's answer is lost (unknown, settled by its status
    # webhook); A's later messages wait for it, in order, one at a time. B is not held up.
    sim.set_faults([{"mode": "error", "code": 131000, "count": 1, "match": {"to": A.replace("+", "\\+")}},
                    {"mode": "lost_response", "count": 1, "match": {"to": A.replace("+", "\\+")}}])
    to_a = [enqueue(db, to=A, message=text(f"a{i}")) for i in range(5)]
    to_b = [enqueue(db, to=B, message=text(f"b{i}")) for i in range(2)]
    with running_worker(worker_settings(settings, sim.base_url, pair_rate_seconds=0.2, pair_burst=2)):
        wait_for(lambda: db.execute(
            "SELECT count(*) FROM wa_outbox.notifications WHERE status IN ('sent', 'delivered', 'read')"
        ).fetchone()[0] == 7, timeout=60, what="every message sent")
    assert [m["body"]["text"]["body"] for m in sim.messages(to=A)] == [f"a{i}" for i in range(5)]
    assert [m["body"]["text"]["body"] for m in sim.messages(to=B)] == ["b0", "b1"]
    events = {e for (e,) in db.execute("SELECT event FROM wa_outbox.notification_events WHERE notification_id = %s",
                                       (to_a[0],))}
    assert {"retry_scheduled", "unknown", "reconciled"} <= events  # the faults did happen to the first one
    spans = sending_spans(db, A)
    for (_, _, done), (_, started, _) in zip(spans, spans[1:], strict=False):
        assert started > done  # the next one was claimed only after the previous one was accepted: never two at once
    assert to_b  # B's messages were not held up by A's line (both sent above)


def test_unordered_messages_may_overtake_one_waiting_on_a_retry(db, sender, sim, settings):
    sim.set_faults([{"mode": "error", "code": 131000, "count": 1}])
    first = enqueue(db, to=A, message=text("first"))
    with running_worker(worker_settings(settings, sim.base_url, retry_base_seconds=5, retry_max_seconds=5,
                                        pair_burst=5)):
        wait_for(lambda: db.execute("SELECT 1 FROM wa_outbox.notification_events WHERE notification_id = %s "
                                    "AND event = 'retry_scheduled'", (first,)).fetchone(), what="first retried")
        enqueue(db, to=A, message=text("second"), ordered=False)  # while the first waits for its retry
        wait_for(lambda: len(sim.messages(to=A)) == 2, timeout=30, what="both sent")
    assert [m["body"]["text"]["body"] for m in sim.messages(to=A)] == ["second", "first"]


def test_pair_pacing_keeps_within_the_pair_limit_and_131056_delays_only_that_recipient(db, sender, sim, settings):
    # Meta's pair limit, as the simulator enforces it: at most 4 messages to one recipient in any 2 s.
    sim.configure(pair_limit={"messages": 4, "window_s": 2.0})
    to_a = [enqueue(db, to=A, message=text(f"a{i}")) for i in range(6)]
    with running_worker(worker_settings(settings, sim.base_url, pair_rate_seconds=1.0, pair_burst=2)):
        wait_for(lambda: len(sim.messages(to=A)) == len(to_a), timeout=60, what="every message to A")
    assert sim.stats()["outcomes"].get("error_131056", 0) == 0  # paced before Meta had to say so
    assert [m["body"]["text"]["body"] for m in sim.messages(to=A)] == [f"a{i}" for i in range(6)]

    # A 131056 for C pauses C (4 s), not D, enqueued after it.
    sim.reset()
    c, d = "+5511987650003", "+5511987650004"
    sim.set_faults([{"mode": "error", "code": 131056, "count": 1, "match": {"to": c.replace("+", "\\+")}}])
    enqueue(db, to=c, message=text("c"))
    for i in range(3):
        enqueue(db, to=d, message=text(f"d{i}"), ordered=False)
    with running_worker(worker_settings(settings, sim.base_url, pair_burst=5)):
        wait_for(lambda: len(sim.messages(to=c)) == 1, timeout=60, what="C's message, after its pause")
    assert len(sim.messages(to=d)) == 3
    assert max(m["received_at"] for m in sim.messages(to=d)) < sim.messages(to=c)[0]["received_at"]


def test_the_per_recipient_settings_are_read_and_checked():
    from wa_outbox.config import ConfigError
    settings = Settings.from_env({"WA_OUTBOX_PAIR_RATE_SECONDS": "2.5", "WA_OUTBOX_PAIR_BURST": "4",
                                  "WA_OUTBOX_SERVICE_WINDOW": "enforce"})
    assert (settings.pair_rate_seconds, settings.pair_burst, settings.service_window) == (2.5, 4, "enforce")
    assert Settings.from_env({}).service_window == "off"
    assert Settings.from_env({"WA_OUTBOX_PAIR_RATE_SECONDS": "0"}).pair_rate_seconds == 0  # pacing off
    for name, bad in (("WA_OUTBOX_PAIR_RATE_SECONDS", "-1"), ("WA_OUTBOX_PAIR_BURST", "1.5"),
                      ("WA_OUTBOX_SERVICE_WINDOW", "sometimes")):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: bad})
