"""The feed: wa_outbox.events_after() from SQL, GET /v1/events (params, long poll, 410) and `wa-outbox events tail`."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from tests.conftest import API_TOKEN
from tests.db.test_openapi import _Checker
from tests.live import wait_for
from wa_outbox import events as ev

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def emit(db, n: int = 1, type_: str = "call", *, readable: bool = True) -> None:
    """n events in one transaction, as a trigger writes them; then, unless told not to, wait until the feed's horizon
    has passed them (any transaction on the server that began before their commit has ended)."""
    db.execute("INSERT INTO wa_outbox.events (type, data) SELECT %s, jsonb_build_object('schema_version', 1, 'n', g) "
               "FROM generate_series(1, %s) g", (type_, n))
    if readable and not db.info.transaction_status:  # autocommit: committed
        wait_for(lambda: readable_now(db), timeout=120, what="the horizon past the events")


def readable_now(db) -> bool:
    return db.execute("SELECT coalesce(wa_outbox.events_horizon() > max(txid), true) FROM wa_outbox.events"
                      ).fetchone()[0]


def feed_sql(db, after=None, n=100, types=None) -> list[tuple]:
    return db.execute("SELECT * FROM wa_outbox.events_after(%s, %s, %s)", (after, n, types)).fetchall()


# --- SQL -----------------------------------------------------------------------------------------------------------

def test_sql_reads_in_order_with_ids_and_cursors_and_filters_types(db):
    emit(db, 3)
    emit(db, 1, "message.received")
    rows = feed_sql(db)
    seqs = [s for (s,) in db.execute("SELECT seq FROM wa_outbox.events ORDER BY txid, seq")]
    assert [r[1] for r in rows] == [ev.event_id(s) for s in seqs]
    assert [ev.decode_cursor(r[0])[1] for r in rows] == seqs
    assert [r[1] for r in feed_sql(db, rows[1][0])] == [r[1] for r in rows[2:]]
    assert [r[2] for r in feed_sql(db, types=["message.received"])] == ["message.received"]
    assert feed_sql(db, rows[-1][0]) == []


def test_sql_refuses_what_is_no_cursor(db):
    for bad in ("x", "1-", "-1", "1-2-3", "9" * 19 + "-1", "1-2 ", " 1-2"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a cursor"):
            feed_sql(db, bad)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_rows"):
        feed_sql(db, None, 0)


def test_a_transaction_still_open_holds_the_feed_back_and_is_never_skipped(db, database_url):
    emit(db)
    [(first,)] = [(r[0],) for r in feed_sql(db)]
    with psycopg.connect(database_url) as held:
        emit(held, readable=False)  # takes its sequence value and txid first, commits last
        emit(db, 2, readable=False)  # later writers commit meanwhile
        assert feed_sql(db, first) == []  # behind the open transaction: not yet
        held.commit()
    wait_for(lambda: readable_now(db), timeout=120, what="the horizon past the events")
    rows = feed_sql(db, first)
    assert len(rows) == 3
    # the held transaction's event comes first: its txid is the oldest
    held_seq = db.execute("SELECT min(seq) FROM wa_outbox.events WHERE seq > %s", (ev.decode_cursor(first)[1],)
                          ).fetchone()[0]
    assert rows[0][1] == ev.event_id(held_seq)


def test_python_cursors_are_the_sqls():
    assert ev.decode_cursor(ev.encode_cursor(741, 12)) == (741, 12)
    assert ev.encode_cursor(741, 12) == "741-12"


# --- GET /v1/events ------------------------------------------------------------------------------------------------

def test_pages_follow_next_cursor_with_has_more(app, client, db):
    emit(db, 5)
    check = _Checker(app)
    first = check(client.get("/v1/events?limit=2", headers=AUTH), 200)
    assert len(first["data"]) == 2 and first["has_more"] is True
    assert set(first["data"][0]) == {"id", "type", "timestamp", "data"}
    seen = [e["id"] for e in first["data"]]
    cursor = first["next_cursor"]
    while True:
        page = check(client.get(f"/v1/events?limit=2&after={cursor}", headers=AUTH), 200)
        seen += [e["id"] for e in page["data"]]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            break
    assert seen == [ev.event_id(s) for (s,) in db.execute("SELECT seq FROM wa_outbox.events ORDER BY txid, seq")]
    empty = check(client.get(f"/v1/events?after={cursor}", headers=AUTH), 200)
    assert empty == {"data": [], "next_cursor": cursor, "has_more": False}
    assert check(client.get("/v1/events?types=message.received,call&limit=1", headers=AUTH), 200)["data"]
    assert not check(client.get("/v1/events?types=message.status", headers=AUTH), 200)["data"]


@pytest.mark.parametrize("query, fragment", [
    ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"), ("limit=-1", "limit"),
    ("wait=31", "wait"), ("wait=1.5", "wait"), ("types=message.nope", "unknown event type"),
    ("after=garbage", "not a cursor"), ("after=1-2%00", "not a cursor"), ("after=" + "9" * 40 + "-1", "not a cursor"),
])
def test_bad_parameters_are_400_json(app, client, query, fragment):
    r = _Checker(app)(client.get(f"/v1/events?{query}", headers=AUTH), 400)
    assert fragment in r["error"]["message"]


def test_the_feed_needs_a_token(client):
    assert client.get("/v1/events").status_code == 401


def test_a_pruned_cursor_is_410_saying_so(app, client, db):
    emit(db, 3)
    cursors = [r[0] for r in feed_sql(db)]
    db.execute("INSERT INTO wa_outbox.settings (key, value) VALUES ('events_pruned_through', %s), "
               "('event_retention_days', '30')", (cursors[1],))
    r = _Checker(app)(client.get(f"/v1/events?after={cursors[0]}", headers=AUTH), 410)
    assert "pruned" in r["error"]["message"] and "30 days" in r["error"]["message"]
    assert client.get(f"/v1/events?after={cursors[1]}", headers=AUTH).status_code == 200  # the newest pruned: fine
    with pytest.raises(psycopg.Error) as raised:
        feed_sql(db, cursors[0])
    assert raised.value.sqlstate == ev.PRUNED_SQLSTATE


def test_a_long_poll_answers_when_an_event_arrives(app, client, db, database_url):
    emit(db)
    cursor = client.get("/v1/events", headers=AUTH).json["next_cursor"]
    answers: list = []
    poll = threading.Thread(target=lambda: answers.append(
        client.get(f"/v1/events?after={cursor}&wait=30", headers=AUTH)), daemon=True)
    poll.start()

    def waiting() -> bool:  # the poll holds its waiting slot and its listener is listening
        notices = app.extensions.get("wa_outbox.event_notices")
        return bool(notices and notices.listening and notices.waiting)
    wait_for(waiting, what="the long poll waiting")
    with psycopg.connect(database_url) as conn:  # as the triggers write events: with the wake-up
        emit(conn, 1, "message.received", readable=False)
        conn.execute("SELECT wa_outbox.notify_events()")
    poll.join(timeout=60)
    assert answers and answers[0].status_code == 200
    assert [e["type"] for e in answers[0].json["data"]] == ["message.received"]


# --- wa-outbox events tail -----------------------------------------------------------------------------------------

def test_tail_prints_json_lines_with_cursors_and_carries_on_after_one(db, run):
    emit(db, 3)
    result = run("events", "tail", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [set(line) for line in lines] == [{"cursor", "id", "type", "timestamp", "data"}] * 3
    later = run("events", "tail", "--json", "--after", lines[0]["cursor"])
    assert [json.loads(line)["id"] for line in later.stdout.splitlines()] == [line["id"] for line in lines[1:]]
    human = run("events", "tail", "--types", "call")
    assert human.exit_code == 0 and human.stdout.count("call") == 3 and "next cursor" in human.stderr


def test_tail_refuses_bad_cursors_and_pruned_ones(db, run):
    emit(db, 2)
    cursors = [r[0] for r in feed_sql(db)]
    bad = run("events", "tail", "--after", "nope")
    assert bad.exit_code != 0 and "not a cursor" in bad.stderr
    db.execute("INSERT INTO wa_outbox.settings (key, value) VALUES ('events_pruned_through', %s)", (cursors[1],))
    pruned = run("events", "tail", "--after", cursors[0])
    assert pruned.exit_code != 0 and "pruned" in pruned.stderr
    assert run("events", "tail", "--types", "nope").exit_code != 0
