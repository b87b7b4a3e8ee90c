"""The /ops overview an operator reads first (issue 23): outcomes per minute and per sender with their delivery and
read rates, the operator's names for the queues, phone numbers as the CLI prints them, auto-refresh, and the login
page's hint under `wa-outbox dev`. The real app and a real Postgres."""

from __future__ import annotations

import dataclasses
import datetime
import re

import pytest

from tests.db.test_ops import SENDER, THROUGHPUT, _insert, _login
from wa_outbox import db as wa_db
from wa_outbox.config import DEV_API_TOKEN

OTHER = "200000000000002"


def _events(db, notification_id: int, *events: str, ago: str = "1 second") -> None:
    for event in events:
        db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, created_at) "
                   "VALUES (%s, %s, 1, now() - %s::interval)", (notification_id, event, ago))


@pytest.fixture
def logged_in(client):
    assert _login(client).status_code == 302
    return client


def _outcome_rows(html: str) -> dict[str, list[str]]:
    rows = {}
    for m in re.finditer(r'<tr data-sender-outcomes="(\d+)">(.*?)</tr>', html, re.S):
        rows[m.group(1)] = [re.sub(r"<[^>]+>", "", c).strip()
                            for c in re.findall(r'<td class="num[^"]*">(.*?)</td>', m.group(2), re.S)]
    return rows


def test_outcomes_per_sender_with_rates_and_charts_that_add_them_up(logged_in, db):
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111')")
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES ('901', '111')")
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, alias, display_phone_number, token_ref) "
               "VALUES (%s, '901', 'brand-b', '15550100', 'TOKEN_B')", (OTHER,))
    for _ in range(4):  # the environment's sender: 4 sent, 3 delivered, 1 read
        _events(db, _insert(db, status="sent"), "sent")
    delivered = [_insert(db, status="delivered") for _ in range(3)]
    for i, n in enumerate(delivered):
        _events(db, n, "delivered", *(["read"] if i == 0 else []))
    failed = _insert(db, sender=OTHER, status="failed")
    _events(db, failed, "sent", "failed")
    dead = _insert(db, sender=OTHER, status="dead", code=131026)  # _insert writes its `dead` event
    _events(db, _insert(db, sender=OTHER), "sent", ago="2 hours")  # before the hour: counted nowhere

    html = logged_in.get("/ops").get_data(as_text=True)
    rows = _outcome_rows(html)
    # sent, delivered, read, failed, dead, delivery rate, read rate
    assert rows[SENDER] == ["4", "3", "1", "0", "0", "75.0 %", "33.3 %"]
    assert rows[OTHER] == ["1", "0", "0", "1", "1", "0.0 %", "–"]
    labelled = re.search(rf'<tr data-sender-outcomes="{OTHER}">(.*?)</tr>', html, re.S).group(1)
    assert "<b>brand-b</b>" in labelled and "+15550100" in labelled  # the registry's names for the number
    for name, total in (("sent", 5), ("delivered", 3), ("read", 1), ("failed", 1), ("dead", 1)):
        assert re.search(rf'{name} / min <span class="sub">{total} in the last hour', html), name
    assert '<div class="big" id="delivery-rate">60.0 %</div>' in html  # 3 of 5
    assert '<div class="big" id="read-rate">33.3 %</div>' in html  # 1 of 3
    assert dead  # its dead-letter row shows the recipient as the CLI prints it
    assert "<td>+5511987654321</td>" in html


def test_the_query_counts_each_sender_per_minute_and_skips_what_is_no_outcome(db):
    message = _insert(db)
    _events(db, message, "sending", "sent", "delivered", "read", "retry_scheduled")
    _events(db, message, "read", ago="61 minutes")
    rows = db.execute(wa_db.query("ops_sender_outcomes"), {"since": None, **THROUGHPUT}).fetchall()
    assert [(r[0], r[4:]) for r in rows] == [(SENDER, (1, 1, 1, 0, 0))]
    later = db.execute(wa_db.query("ops_sender_outcomes"),
                       {"since": rows[0][3] + datetime.timedelta(minutes=1), **THROUGHPUT})
    assert later.fetchall() == []  # `since` narrows it to the minutes from then on
    assert wa_db.safe_to_repeat("ops_sender_outcomes")


def test_without_outcomes_the_page_says_so(logged_in):
    html = logged_in.get("/ops").get_data(as_text=True)
    assert 'id="no-outcomes"' in html and '<div class="big" id="delivery-rate">–</div>' in html


def test_phone_numbers_are_shown_as_the_cli_prints_them(logged_in, db):
    first, second = _insert(db, status="dead", code=131026), _insert(db)
    listing = logged_in.get("/ops?q=5511987654321").get_data(as_text=True)
    assert listing.count("<td>+5511987654321</td>") == 2
    message = logged_in.get(f"/ops/messages/{first}").get_data(as_text=True)
    assert '<dd id="recipient">+5511987654321</dd>' in message and second


def test_auto_refresh_is_on_by_default_and_can_be_paused(logged_in, db):
    html = logged_in.get("/ops").get_data(as_text=True)
    assert '<input type="checkbox" id="auto-refresh" checked>' in html
    # A page that answers a form (here a refused one) has none: a reload would post the form again.
    refused = logged_in.post(f"/ops/messages/{_insert(db)}/retry", data={"csrf_token": "forged"})
    assert refused.status_code == 403 and 'id="auto-refresh"' not in refused.get_data(as_text=True)
    script = logged_in.get("/ops/static/ops.js").get_data(as_text=True)
    # On unless this browser paused it; a pause is kept (localStorage) and stops the timer.
    assert 'localStorage.getItem(REFRESH_KEY) !== "off"' in script and "location.reload()" in script


@pytest.mark.parametrize("tokens, shown", [((DEV_API_TOKEN,), True), (("a-configured-token-0123456789",), False)])
def test_the_login_page_hints_at_the_token_under_wa_outbox_dev(app, client, monkeypatch, tokens, shown):
    from wa_outbox.web.app_state import settings_of
    plain = client.get("/ops/login").get_data(as_text=True)
    assert 'id="dev-hint"' not in plain and DEV_API_TOKEN not in plain  # not in development: no hint
    monkeypatch.setitem(app.extensions, "wa_outbox.settings",
                        dataclasses.replace(settings_of(app), dev=True, api_tokens=tokens))
    page = client.get("/ops/login").get_data(as_text=True)
    assert 'id="dev-hint"' in page
    assert (f"<code>{DEV_API_TOKEN}</code>" in page) is shown
    assert all(token not in page for token in tokens if token != DEV_API_TOKEN)  # never a configured token


def test_a_refresh_reads_only_the_last_minutes_and_keeps_the_ones_that_are_over(app, db):
    """The minutes before the last SETTLED_MINUTES are counted once per process: an event written into one of them
    afterwards (which the timeline never does: created_at is its insert's clock) no longer changes the page, while a
    new one counts at once."""
    from wa_outbox import ops
    from wa_outbox.web import engine_of
    engine = engine_of(app)
    message = _insert(db)
    _events(db, message, "sent", ago="30 minutes")

    def sent() -> int:
        return sum(s.total("sent") for s in ops.sender_outcomes(engine, ops.throughput(engine)))

    assert sent() == 1
    _events(db, message, "sent", ago="20 minutes")  # into a minute that is over: not read again
    _events(db, message, "sent")  # now: read at the next refresh
    assert sent() == 2
    ops.forget_settled_outcomes()
    assert sent() == 3  # the whole hour, read again
