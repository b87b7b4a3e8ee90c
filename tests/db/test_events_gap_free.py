"""The feed never skips and never repeats: concurrent writers commit >= 100,000 events in many transactions, one of
them holding a transaction that wrote events early open until the others have written half of theirs, while a
reader follows next_cursor throughout (wa_outbox/events.py read_feed: the query GET /v1/events runs).

Beside it, a reader of the naive rule (`seq > last seq seen`) shows what the test guards against: it skips the held
transaction's events, which commit after later ones were read."""

from __future__ import annotations

import threading
import time

import psycopg

from tests.live import wait_for
from wa_outbox import db as wa_db, events as ev

WRITERS = 4
TRANSACTIONS = 250          # per writer
PER_TRANSACTION = 100       # events per transaction, one INSERT
HELD = 500                  # events of the transaction held open
TOTAL = WRITERS * TRANSACTIONS * PER_TRANSACTION + HELD
INSERT = ("INSERT INTO wa_outbox.events (type, phone_number_id, wa_id, data) "
          "SELECT 'call', %(w)s::text, g::text, "
          "       jsonb_build_object('schema_version', 1, 'w', %(w)s::text, 't', %(t)s::int, 'i', g) "
          "FROM generate_series(1, %(n)s) g")


def test_100k_events_from_concurrent_writers_none_skipped_none_repeated(database_url):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    held_open = threading.Event()
    naive_read_past_held = threading.Event()
    half_written = threading.Barrier(WRITERS + 1)
    writers_done = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []
    naive_seen: list[int] = []
    held_seqs: list[int] = []
    reader_before_commit = threading.Event()
    committed = threading.Event()

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                held_open.set(), naive_read_past_held.set(), writers_done.set(), committed.set()
                half_written.abort()
        return run

    @guard
    def held_writer():
        with psycopg.connect(database_url) as conn:
            held_seqs.extend(s for (s,) in conn.execute(INSERT + " RETURNING seq", {"w": "held", "t": 0, "n": HELD}))
            held_open.set()
            half_written.wait(timeout=300)  # the other writers have committed half of theirs meanwhile
            naive_read_past_held.wait(timeout=300)
            reader_before_commit.wait(timeout=300)
            conn.commit()
        committed.set()

    def writer(w: int):
        @guard
        def run():
            held_open.wait(timeout=300)
            with psycopg.connect(database_url) as conn:
                for t in range(TRANSACTIONS):
                    conn.execute(INSERT, {"w": f"w{w}", "t": t, "n": PER_TRANSACTION})
                    conn.commit()
                    if t == TRANSACTIONS // 2:
                        half_written.wait(timeout=300)
        return run

    @guard
    def reader():
        cursor = None
        while True:
            done = writers_done.is_set() and committed.is_set()
            # wait=1: an empty read waits a second before the next (a poll interval, as a client's long poll)
            page = ev.read_feed(engine, after=cursor, limit=ev.MAX_LIMIT, wait=0 if done else 1)
            seen.extend(int(e["id"].removeprefix("evt_")) for e in page.data)
            cursor = page.next_cursor
            if held_open.is_set() and not committed.is_set():
                reader_before_commit.set()  # it has read while the transaction was open
            if done and not page.data:  # every writer finished: once the horizon has passed all, one last read
                wait_for(lambda: _readable(database_url), timeout=120, what="the horizon past every event")
                last = ev.read_feed(engine, after=cursor, limit=ev.MAX_LIMIT)
                seen.extend(int(e["id"].removeprefix("evt_")) for e in last.data)
                cursor = last.next_cursor
                if not last.data:
                    return

    @guard
    def naive_reader():
        last = 0
        with psycopg.connect(database_url, autocommit=True) as conn:
            while not (writers_done.is_set() and committed.is_set()):
                rows = conn.execute("SELECT seq FROM wa_outbox.events WHERE seq > %s ORDER BY seq LIMIT 1000",
                                    (last,)).fetchall()
                naive_seen.extend(s for (s,) in rows)
                last = rows[-1][0] if rows else last
                if not rows:
                    time.sleep(0.05)  # a poll interval
                if held_seqs and last > max(held_seqs):
                    naive_read_past_held.set()

    threads = [threading.Thread(target=held_writer), threading.Thread(target=reader),
               threading.Thread(target=naive_reader)]
    writer_threads = [threading.Thread(target=writer(w)) for w in range(WRITERS)]
    for t in threads + writer_threads:
        t.start()
    for t in writer_threads:
        t.join(timeout=600)
    writers_done.set()
    for t in threads:
        t.join(timeout=600)
    engine.dispose()
    assert not errors, errors
    assert not any(t.is_alive() for t in threads + writer_threads)

    with psycopg.connect(database_url, autocommit=True) as conn:
        stored = [s for (s,) in conn.execute("SELECT seq FROM wa_outbox.events ORDER BY txid, seq")]
    assert len(stored) == TOTAL
    repeated = len(seen) - len(set(seen))
    skipped = len(set(stored) - set(seen))
    assert (skipped, repeated) == (0, 0)
    assert seen == stored  # in feed order, too
    assert set(held_seqs) <= set(seen)
    # the naive rule skipped the held transaction's events (they committed after later ones were read)
    assert set(held_seqs) - set(naive_seen)


def _readable(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT coalesce(wa_outbox.events_horizon() > max(txid), true) FROM wa_outbox.events"
                            ).fetchone()[0]
