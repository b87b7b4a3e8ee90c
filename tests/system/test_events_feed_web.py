"""GET /v1/events through the real web (gunicorn as the Procfile starts it): a long poll (wait=5) answers with an
event that commits while it waits, and a client following next_cursor (small pages, long polls) while writers
commit concurrently sees each event exactly once.

The delay from a commit to the long poll's answer is measured and printed (`pytest -s`): the issue says "within a
second of a new event"; on a loaded machine it is reported, never asserted.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import psycopg
import requests

from tests.conftest import API_TOKEN
from tests.endpoint_rows import add_events
from tests.live import wait_for
from tests.processes import gunicorn
from wa_outbox.events import event_id

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def get(web: str, **params) -> dict:
    answer = requests.get(f"{web}/v1/events", params=params, headers=AUTH, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_long_poll_answers_with_an_event_committed_while_it_waits(database_url, db):
    delays = []
    with gunicorn(database_url) as (port, _):
        web = f"http://127.0.0.1:{port}"
        cursor = get(web)["next_cursor"]
        idle = time.monotonic()
        assert get(web, after=cursor, wait=1)["data"] == []  # nothing new: it waits, then answers empty
        waited_empty = time.monotonic() - idle
        for _ in range(5):
            answers: list[dict] = []
            poll = threading.Thread(target=lambda into=answers, after=cursor: into.append(get(web, after=after,
                                                                                               wait=5)))
            poll.start()
            # Give the poll a moment to park before the commit, so that the delay measured is the wake-up's (the
            # assertions hold whether or not it parked in time).
            threading.Event().wait(1.0)
            [seq] = add_events(db, 1)
            committed = time.monotonic()
            poll.join(timeout=60)
            assert not poll.is_alive()
            delays.append(time.monotonic() - committed)
            [page] = answers
            assert [e["id"] for e in page["data"]] == [event_id(seq)]
            cursor = page["next_cursor"]
    print("\nlong poll (wait=5): empty answer after", round(waited_empty, 3), "s; commit to answer (s):",
          json.dumps([round(d, 3) for d in delays]), "median", round(statistics.median(delays), 3))


def test_following_next_cursor_sees_each_event_once_while_writers_commit(database_url, db):
    writers, transactions, per_transaction = 4, 40, 3
    expected = writers * transactions * per_transaction
    seen: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    with gunicorn(database_url) as (port, _):
        web = f"http://127.0.0.1:{port}"
        start = get(web)["next_cursor"]

        def follow() -> None:
            cursor = start
            try:
                while not stop.is_set():
                    page = get(web, after=cursor, limit=7, wait=2)
                    seen.extend(e["id"] for e in page["data"])
                    cursor = page["next_cursor"]
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        def write() -> None:
            with psycopg.connect(database_url, autocommit=True) as conn:
                for _ in range(transactions):
                    inserted.extend(add_events(conn, per_transaction))

        inserted: list[int] = []
        follower = threading.Thread(target=follow)
        follower.start()
        try:
            threads = [threading.Thread(target=write) for _ in range(writers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
            wait_for(lambda: errors or len(seen) >= expected, timeout=120, interval=0.2, what="every event followed")
        finally:
            stop.set()
            follower.join(timeout=60)
    assert not errors, errors
    assert len(inserted) == expected
    assert len(seen) == len(set(seen)) == expected  # none repeated
    assert set(seen) == {event_id(s) for s in inserted}  # none skipped
