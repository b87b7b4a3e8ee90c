"""The claim and record statements stay O(batch) however many recipients were ever paced: their plans read contacts
(one row per recipient ever sent to) by primary key, never by a scan of the whole table."""

from __future__ import annotations

import json

from wa_outbox import db as wdb
from wa_outbox.config import Settings
from wa_outbox.worker._sender import claim_pacing

SENDER = "100000000000001"
CONTACTS = 20_000  # enough that a scan of contacts and a hash join look cheaper to the planner than 128 probes
BATCH = 128


def fill(db) -> None:
    """CONTACTS recipients paced an hour ago, the first BATCH of them with a due message; both tables analyzed."""
    db.execute("INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, pair_paced_until) "
               "SELECT %s, (5511900000000 + i)::text, now() - interval '1 hour' FROM generate_series(0, %s) i",
               (SENDER, CONTACTS - 1))
    db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
               "SELECT %s, (5511900000000 + i)::text, '{\"type\": \"text\", \"text\": {\"body\": \"x\"}}', '' "
               "FROM generate_series(0, %s) i", (SENDER, BATCH - 1))
    db.execute("ANALYZE wa_outbox.contacts")
    db.execute("ANALYZE wa_outbox.notifications")


def plan(db, name: str, params: dict) -> str:
    cursor = db.cursor()
    return "\n".join(row[0] for row in cursor.execute("EXPLAIN " + wdb.query(name), params))


def test_the_claim_reads_contacts_by_key(db):
    fill(db)
    text = plan(db, "claim_notifications", {
        "limit": BATCH, "worker_id": "w", "lease_seconds": 60, "default_mps": 80,
        **claim_pacing(Settings(pair_rate_seconds=6.0, pair_burst=3, service_window="enforce"))})
    assert "Seq Scan on contacts" not in text, text
    assert "contacts_pkey" in text, text


def test_the_claim_still_paces_and_judges_the_window_from_contacts(db):
    """What the claim reads from contacts still decides: a recipient paced into the future waits, one who wrote
    recently may get a free-form text, one who never wrote may not (the window rule)."""
    for recipient, paced, inbound in (("5511900000001", "now() + interval '1 hour'", "now()"),
                                      ("5511900000002", "NULL", "now()"),
                                      ("5511900000003", "NULL", "NULL")):
        db.execute(f"INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, pair_paced_until, last_inbound_at) "
                   f"VALUES (%s, %s, {paced}, {inbound})", (SENDER, recipient))
        db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
                   "VALUES (%s, %s, '{\"type\": \"text\", \"text\": {\"body\": \"x\"}}', '')", (SENDER, recipient))
    cursor = db.cursor()
    claimed = cursor.execute(wdb.query("claim_notifications"), {
        "limit": 10, "worker_id": "w", "lease_seconds": 60, "default_mps": 80,
        **claim_pacing(Settings(pair_rate_seconds=6.0, pair_burst=1, service_window="enforce"))}).fetchall()
    assert [row[2] for row in claimed] == ["5511900000002"]
    states = dict(db.execute("SELECT recipient, status FROM wa_outbox.notifications").fetchall())
    assert states == {"5511900000001": "queued", "5511900000002": "sending", "5511900000003": "dead"}


def test_recording_reads_contacts_by_key(db):
    fill(db)
    outcomes = [{"id": i, "status": "sent", "event": "sent", "wamid": f"wamid.{i}", "error": None, "delay": None,
                 "refund": False, "detail": {}} for i in range(1, BATCH + 1)]
    text = plan(db, "record_outcomes", {"worker_id": "w", "outcomes": json.dumps(outcomes)})
    assert "Seq Scan on contacts" not in text, text


def test_the_wait_after_a_short_claim_reads_the_due_index_and_only_claimable_rows(db):
    """next_claim_in runs after every claim that could not fill a worker's threads: it reads the first row of each
    priority from the claim's index (notifications_due), never the whole queue, and a row parked behind an earlier
    one of its line (blocked), due long ago, does not make it answer "at once"."""
    db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, "
               "next_attempt_at, priority, blocked) "
               "SELECT %s, (5511900000000 + i)::text, '{\"type\": \"text\", \"text\": {\"body\": \"x\"}}', '', "
               "now() + interval '1 hour' + make_interval(secs => i), i %% 2, false "
               "FROM generate_series(0, %s) i", (SENDER, CONTACTS - 1))
    db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, "
               "next_attempt_at, blocked) VALUES (%s, '5511988887777', '{\"type\": \"text\", \"text\": "
               "{\"body\": \"x\"}}', '', now() - interval '1 day', true)", (SENDER,))
    db.execute("ANALYZE wa_outbox.notifications")
    text = plan(db, "next_claim_in", {"horizon": 0.25})
    assert "Seq Scan on notifications" not in text, text
    assert "notifications_due" in text, text
    wait = db.execute(wdb.query("next_claim_in"), {"horizon": 0.25}).fetchone()[0]
    assert 3500 < wait <= 3600, wait  # the first claimable row, due in an hour (priority 0 or 1 alike)
    db.execute("UPDATE wa_outbox.notifications SET next_attempt_at = now() - interval '1 minute' "
               "WHERE recipient = '5511900000001'")  # a campaign row (priority 1) due now
    assert db.execute(wdb.query("next_claim_in"), {"horizon": 0.25}).fetchone()[0] <= 0
