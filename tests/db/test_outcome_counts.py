"""Every count of outcomes agrees with the timeline (issue 23, the first hour): sends whose answer was lost (`unknown`)
and that a status webhook settled (`reconciled`) are sent, for the worker's wa_outbox_sends_total, the ops page's
charts and `wa-outbox status` alike; and a message that ended `read` after a transient error shows its outcome first
and that error as history. The real worker, the simulator on a real socket posting signed status webhooks to the
real web app, real Postgres."""

from __future__ import annotations

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import API_TOKEN
from tests.live import running_worker, wait_for, worker_settings
from wa_outbox import db as wa_db, ops
from wa_outbox.enqueue import enqueue
from wa_outbox.states import SENT_EVENTS

TEXT = {"type": "text", "text": {"body": "Seu pedido saiu"}}
SENT = ("wa_outbox_sends_total", (("code", "none"), ("outcome", "sent")))
UNKNOWN = ("wa_outbox_sends_total", (("code", "none"), ("outcome", "unknown")))


def scrape(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True)) for s in family.samples}


def timeline_count(db, *events: str) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = ANY(%s)",
                      (list(events),)).fetchone()[0]


def login(client) -> None:
    page = client.get("/ops/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert client.post("/ops/login", data={"token": API_TOKEN, "csrf_token": csrf, "next": "/ops"}).status_code == 302


def test_unknown_then_reconciled_sends_are_counted_sent_everywhere(db, sender, sim, settings, client, run):
    # The sends to +5511900000001 and 02 reach Meta but their answers are lost (unknown, then reconciled by their status
    # webhooks); the message to +5511900000005 meets one transient error first, and is sent on its next attempt.
    sim.set_faults([{"mode": "lost_response", "count": 1, "match": {"to": "5511900000001"}},
                    {"mode": "lost_response", "count": 1, "match": {"to": "5511900000002"}},
                    {"mode": "error", "code": 131000, "count": 1, "match": {"to": "5511900000005"}}])
    ids = [enqueue(db, to=f"+55119000000{n:02d}", message=TEXT, correlation_id="first-hour") for n in range(1, 6)]
    retried = ids[-1]
    before = scrape(client)
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'read'"
                                    ).fetchone()[0] == len(ids), timeout=60, what="every message read")
        worker.maintain()  # a heartbeat: the worker's counters are written where /metrics sums them
        after = scrape(client)

    # the timeline: each message has exactly one of the events that count it sent, two of them reconciled
    assert timeline_count(db, "unknown") == 2 and timeline_count(db, "reconciled") == 2
    per_message = dict(db.execute("SELECT notification_id, count(*) FROM wa_outbox.notification_events "
                                  "WHERE event = ANY(%s) GROUP BY 1", ([str(e) for e in SENT_EVENTS],)).fetchall())
    assert per_message == {nid: 1 for nid in ids}
    sent = timeline_count(db, *SENT_EVENTS)
    assert sent == len(ids)

    # the worker's counter (through the web app's /metrics): every send Meta accepted, the two unknown ones too
    assert after[SENT] - before.get(SENT, 0) == sent
    assert after[UNKNOWN] - before.get(UNKNOWN, 0) == 2

    # the ops page's charts
    engine = wa_db.create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        assert sum(minute.sent for minute in ops.throughput(engine)) == sent
    finally:
        engine.dispose()

    # `wa-outbox status`: every message of the correlation id read, each with its sent time
    listed = run("status", "--json", "first-hour")
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert sorted(r["id"] for r in rows if r["status"] == "read") == ids
    for nid in ids:
        shown = run("status", str(nid)).output
        assert f"message {nid}: read" in shown and re.search(r"\n  sent \S+ \S+ · delivered \S+ \S+ · read ", shown)

    # the message read after a transient error: its outcome first, the error as history, never as its last error
    shown = run("status", str(retried)).output
    assert "last error" not in shown
    assert shown.index(" read ") < shown.index("error history: ") and "131000" in shown
    assert "it is read now" in shown
    login(client)
    page = client.get(f"/ops/messages/{retried}").get_data(as_text=True)
    assert "<dt>last error</dt>" not in page
    assert page.index("sent · delivered · read") < page.index("<dt>error history</dt>")
    assert "131000" in page[page.index('id="error-history"'):]


def test_a_dead_message_still_shows_its_last_error(db, sender, sim, settings, run):
    sim.set_faults([{"mode": "error", "code": 131026}])
    [nid] = [enqueue(db, to="+5511900000003", message=TEXT)]
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s",
                                    (nid,)).fetchone()[0] == "dead", what="dead")
    shown = run("status", str(nid)).output
    assert "  last error: " in shown and "131026" in shown and "error history" not in shown
