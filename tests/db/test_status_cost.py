"""Applying a batch of Meta status webhooks stays O(batch) whatever the size of the outbox and its timeline: each
status finds its message by one probe of an index (wamid, or the outbox id), the lock takes those messages by key,
and the check that an event was not applied already reads that message's own timeline. As plain joins on the
batch's JSON (which the planner guesses at 100 rows), these were a hash of the whole notifications table, three
times per batch, and one of the whole timeline, at the sizes below."""

from __future__ import annotations

import json

import pytest

from wa_outbox import db as wdb

SENDER = "100000000000001"
MESSAGES = 10_000
BATCH = 16
BIG = ("notifications", "notification_events")


def fill(db) -> list[int]:
    """MESSAGES sent messages with their wamids and two timeline events each; both tables analyzed."""
    ids = [r[0] for r in db.execute(
        "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, wamid, "
        "attempts, sent_at) SELECT %s, (5511900000000 + i)::text, '{\"type\": \"text\", \"text\": {\"body\": \"x\"}}', "
        "'', 'sent', 'wamid.' || i, 1, now() FROM generate_series(1, %s) i RETURNING id", (SENDER, MESSAGES))]
    db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt) "
               "SELECT id, e, 1 FROM wa_outbox.notifications, unnest(ARRAY['queued', 'sent']) e")
    db.execute("ANALYZE wa_outbox.notifications")
    db.execute("ANALYZE wa_outbox.notification_events")
    return ids


def plan(db, statuses: list[dict]) -> dict:
    with db.transaction(force_rollback=True):
        return db.cursor().execute("EXPLAIN (ANALYZE, FORMAT JSON) " + wdb.query("apply_statuses"),
                                   {"statuses": json.dumps(statuses)}).fetchone()[0][0]


def scans(node: dict):
    if node.get("Relation Name") in BIG:
        yield node["Node Type"], node["Relation Name"], node.get("Index Name")
    for child in node.get("Plans", []):
        yield from scans(child)


@pytest.mark.parametrize("by", ["wamid", "outbox id"])
def test_a_status_batch_reads_its_messages_by_key(db, by):
    ids = fill(db)
    statuses = [{"event_id": 1000 + i, "wamid": f"wamid.{i}" if by == "wamid" else None, "status": "delivered",
                 "notification_id": ids[i - 1], "errors": None, "ts": 1_700_000_000} for i in range(1, BATCH + 1)]
    explained = plan(db, statuses)
    found = list(scans(explained["Plan"]))
    assert not [s for s in found if s[0] == "Seq Scan"], found
    # one disposition per status
    assert explained["Plan"]["Actual Rows"] == BATCH


def test_the_statuses_still_apply(db):
    """What the probes find still decides: a known wamid moves its message, an outbox id without a wamid finds its
    message, an unknown wamid is unmatched, and an event applied again writes no second timeline entry."""
    ids = fill(db)
    db.execute("UPDATE wa_outbox.notifications SET wamid = NULL WHERE id = %s", (ids[1],))
    statuses = [{"event_id": 1, "wamid": "wamid.1", "status": "read", "notification_id": None, "errors": None,
                 "ts": 1_700_000_000},
                {"event_id": 2, "wamid": "wamid.late", "status": "delivered", "notification_id": ids[1],
                 "errors": None, "ts": 1_700_000_000},
                {"event_id": 3, "wamid": "wamid.nobody", "status": "delivered", "notification_id": None,
                 "errors": None, "ts": 1_700_000_000}]
    cursor = db.cursor()
    first = {r[0]: r[3] for r in cursor.execute(wdb.query("apply_statuses"), {"statuses": json.dumps(statuses)})}
    assert first == {1: "applied", 2: "applied", 3: "unmatched"}
    again = {r[0]: r[3] for r in cursor.execute(wdb.query("apply_statuses"), {"statuses": json.dumps(statuses)})}
    assert again == first
    rows = dict(db.execute("SELECT id, status FROM wa_outbox.notifications WHERE id = ANY(%s)",
                           (ids[:2],)).fetchall())
    assert rows == {ids[0]: "read", ids[1]: "delivered"}
    assert db.execute("SELECT wamid FROM wa_outbox.notifications WHERE id = %s", (ids[1],)).fetchone()[0] == \
        "wamid.late"
    timeline = db.execute("SELECT notification_id, event FROM wa_outbox.notification_events "
                          "WHERE detail ? 'webhook_event_id' ORDER BY 1").fetchall()
    assert timeline == [(ids[0], "read"), (ids[1], "delivered")]
