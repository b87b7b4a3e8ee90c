"""Retention of the events feed: `wa-outbox prune` deletes events older than WA_OUTBOX_EVENT_RETENTION_DAYS with
their deliveries, in batches, and a cursor older than what is kept is told so (410, a CLI error, SQLSTATE WA410)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import API_TOKEN
from tests.db.test_events_feed import emit, feed_sql
from wa_outbox import events as ev

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def aged(db, days: float) -> None:
    """Every event so far happened `days` ago."""
    db.execute("UPDATE wa_outbox.events SET occurred_at = now() - make_interval(days => %s)", (days,))


def endpoint_with_deliveries(db, seqs: list[int]) -> None:
    db.execute("INSERT INTO wa_outbox.endpoints (id, url, secret_enc, secret_fingerprint) "
               "VALUES ('ep_abcdefgh', 'https://example.com/hook', '\\x00', 'fp')")
    for seq in seqs:
        [(delivery,)] = db.execute("INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq) VALUES "
                                   "('ep_abcdefgh', %s) RETURNING id", (seq,)).fetchall()
        db.execute("INSERT INTO wa_outbox.delivery_attempts (delivery_id, attempt, endpoint_id, status_code) "
                   "VALUES (%s, 1, 'ep_abcdefgh', 500)", (delivery,))


def seqs(db) -> list[int]:
    return [s for (s,) in db.execute("SELECT seq FROM wa_outbox.events ORDER BY txid, seq")]


@pytest.fixture
def retention(monkeypatch):
    monkeypatch.setenv("WA_OUTBOX_EVENT_RETENTION_DAYS", "7")


def test_prune_deletes_old_events_with_their_deliveries_and_old_cursors_get_410(app, client, db, run, retention):
    emit(db, 5)
    aged(db, 8)
    old_cursors = [r[0] for r in feed_sql(db)]
    emit(db, 2)  # this week's
    kept = seqs(db)[5:]
    endpoint_with_deliveries(db, seqs(db))
    r = run("prune", "--batch-size", "2", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert (summary["feed_events"], summary["deliveries"]) == (5, 5) and summary["batches"] >= 3
    assert seqs(db) == kept
    assert sorted(s for (s,) in db.execute("SELECT event_seq FROM wa_outbox.deliveries")) == kept
    assert db.execute("SELECT count(*) FROM wa_outbox.delivery_attempts").fetchone()[0] == 2
    assert db.execute("SELECT value FROM wa_outbox.settings WHERE key = 'events_pruned_through'"
                      ).fetchone()[0] == old_cursors[-1]

    gone = client.get(f"/v1/events?after={old_cursors[0]}", headers=AUTH)
    assert gone.status_code == 410
    assert "pruned" in gone.json["error"]["message"] and "7 days" in gone.json["error"]["message"]
    # the newest pruned cursor lost nothing; without a cursor, from the oldest kept
    assert [e["id"] for e in client.get(f"/v1/events?after={old_cursors[-1]}", headers=AUTH).json["data"]] == [
        ev.event_id(s) for s in kept]
    assert [e["id"] for e in client.get("/v1/events", headers=AUTH).json["data"]] == [ev.event_id(s) for s in kept]
    tail = run("events", "tail", "--after", old_cursors[0])
    assert tail.exit_code != 0 and "pruned" in tail.stderr

    again = run("prune", "--json")  # nothing more is old enough
    assert json.loads(again.output)["feed_events"] == 0 and seqs(db) == kept


def test_prune_deletes_a_prefix_of_the_feed_only(db, run, retention):
    emit(db, 2)
    aged(db, 8)
    emit(db, 1)  # a recent one ...
    db.execute("INSERT INTO wa_outbox.events (type, occurred_at, data) "
               "VALUES ('call', now() - interval '9 days', '{\"schema_version\": 1}')")  # ... then an old one
    [_, _, recent, late_old] = seqs(db)
    assert json.loads(run("prune", "--json").output)["feed_events"] == 2
    assert seqs(db) == [recent, late_old]  # kept until everything before it goes: no cursor may step over a gap


def test_the_retention_setting(monkeypatch):
    from wa_outbox.config import ConfigError, Settings
    assert Settings.from_env({}).event_retention_days == 30
    assert Settings.from_env({"WA_OUTBOX_EVENT_RETENTION_DAYS": "90"}).event_retention_days == 90
    with pytest.raises(ConfigError, match="WA_OUTBOX_EVENT_RETENTION_DAYS"):
        Settings.from_env({"WA_OUTBOX_EVENT_RETENTION_DAYS": "0"})
