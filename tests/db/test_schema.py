"""Database-enforced rules: the append-only timeline, the enqueue() SQL function, the support views."""

from __future__ import annotations

import psycopg
import pytest

TEXT = '{"type": "text", "text": {"body": "hi"}}'


@pytest.fixture
def sender(db):
    db.execute("INSERT INTO wa_outbox.settings VALUES ('default_phone_number_id', '100000000000001')")


def enqueue(db, to="+5511987654321", message=TEXT, key=None, correlation_id=None, phone=None) -> int:
    return db.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb, %s, %s, %s)",
                      (to, message, key, correlation_id, phone)).fetchone()[0]


def test_timeline_refuses_update_delete_and_truncate(db, sender):
    nid = enqueue(db)
    for statement in ("UPDATE wa_outbox.notification_events SET event = 'sent'",
                      "DELETE FROM wa_outbox.notification_events",
                      "TRUNCATE wa_outbox.notification_events CASCADE"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            db.execute(statement)
    assert db.execute("SELECT event FROM wa_outbox.notification_events WHERE notification_id = %s",
                      (nid,)).fetchall() == [("queued",)]


def test_retention_pruning_may_delete_when_it_says_so(db, sender):
    enqueue(db)
    with db.transaction():
        db.execute("SET LOCAL wa_outbox.allow_prune = 'on'")
        assert db.execute("DELETE FROM wa_outbox.notification_events").rowcount == 1
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # SET LOCAL ended with its transaction
        enqueue(db)
        db.execute("DELETE FROM wa_outbox.notification_events")


def test_enqueue_writes_the_row_and_its_queued_event(db, sender):
    nid = enqueue(db, to="+55 (11) 98765-4321", correlation_id="corr-1")
    row = db.execute("SELECT recipient, phone_number_id, message, status, attempts, correlation_id "
                     "FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()
    assert row == ("5511987654321", "100000000000001", {"type": "text", "text": {"body": "hi"}}, "queued", 0,
                   "corr-1")
    assert db.execute("SELECT event, correlation_id FROM wa_outbox.notification_timeline "
                      "WHERE notification_id = %s", (nid,)).fetchall() == [("queued", "corr-1")]


def test_enqueue_is_part_of_the_callers_transaction(database_url, db, sender):
    with psycopg.connect(database_url) as conn:
        enqueue(conn)
        conn.rollback()
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events").fetchone()[0] == 0


def test_enqueue_notifies_idle_workers_at_commit(database_url, db, sender):
    db.execute("LISTEN wa_outbox_notifications")
    with psycopg.connect(database_url) as conn:
        enqueue(conn)
    assert [n.channel for n in db.notifies(timeout=2, stop_after=1)] == ["wa_outbox_notifications"]


def test_idempotency_key_returns_the_same_id_and_refuses_a_different_message(db, sender):
    first = enqueue(db, key="order-42-confirmation")
    assert enqueue(db, key="order-42-confirmation") == first
    with pytest.raises(psycopg.errors.UniqueViolation, match="different message"):
        enqueue(db, key="order-42-confirmation", message='{"type": "text", "text": {"body": "other"}}')
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 1


@pytest.mark.parametrize("to, message, error", [
    ("12", TEXT, "invalid recipient"),
    ("+0011987654321", TEXT, "invalid recipient"),
    ("+5511abc", TEXT, "invalid recipient"),
    ("+5511987654321", '"text"', "JSON object"),
    ("+5511987654321", '{"type": "hologram", "hologram": {}}', "unknown message type"),
    ("+5511987654321", '{"type": "image"}', "needs a 'image' object"),
])
def test_enqueue_refuses_bad_input_and_writes_nothing(db, sender, to, message, error):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=error):
        enqueue(db, to=to, message=message)
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 0


def test_enqueue_without_any_sender_is_refused(db):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no sender"):
        enqueue(db)
    assert enqueue(db, phone="555000111") > 0


def test_queue_health_view(db, sender):
    enqueue(db)
    enqueue(db)
    rows = db.execute("SELECT queue, status, rows FROM wa_outbox.queue_health").fetchall()
    assert ("notifications", "queued", 2) in rows
