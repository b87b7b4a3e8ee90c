"""The /ops page without a browser: login, logout, the session cookie, CSRF, what the page shows, its actions, and
the EXPLAIN of every query it runs (each one served by an index, so it stays fast on 10 million rows)."""

from __future__ import annotations

import datetime
import re

import psycopg
import pytest

from tests.conftest import API_TOKEN
from wa_outbox import db as wa_db, ops, queries
from wa_outbox.queries import MinuteFlows
from wa_outbox.states import SENT_EVENTS
from wa_outbox.web.ops_views import session_key, token_matches

SENDER = "100000000000001"
THROUGHPUT = {"sent_events": [str(e) for e in SENT_EVENTS]}  # ops_throughput.sql's parameter (queries.ops_throughput)


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def _login(client, token: str = API_TOKEN):
    page = client.get("/ops/login")
    return client.post("/ops/login", data={"token": token, "csrf_token": _csrf(page.get_data(as_text=True)),
                                           "next": "/ops"})


def _insert(db, *, recipient="5511987654321", status="queued", code=None, correlation_id=None, wamid=None,
            message="boom", sender=SENDER) -> int:
    last_error = None if status != "dead" else psycopg.types.json.Jsonb(
        {"message": message, **({"code": code} if code is not None else {})})
    row = db.execute(
        "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, last_error, "
        "correlation_id, wamid, attempts) VALUES (%s, %s, '{\"type\": \"text\", \"text\": {\"body\": \"hi\"}}', 'h', "
        "%s, %s, %s, %s, 3) RETURNING id", (sender, recipient, status, last_error, correlation_id, wamid)).fetchone()
    db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail) "
               "VALUES (%s, 'queued', 0, '{}')", (row[0],))
    if status == "dead":
        db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail) "
                   "VALUES (%s, 'dead', 3, %s)", (row[0], psycopg.types.json.Jsonb({"reason": message})))
    return row[0]


@pytest.fixture
def logged_in(client):
    response = _login(client)
    assert response.status_code == 302 and response.headers["Location"] == "/ops"
    return client


def _page_csrf(client) -> str:
    return _csrf(client.get("/ops").get_data(as_text=True))


# --- login, session, CSRF -------------------------------------------------------------------------------------------

def test_the_page_asks_for_a_login_first(client):
    response = client.get("/ops?q=5511987654321")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/ops/login?next=")
    assert "q%3D5511987654321" in response.headers["Location"] or "q=5511987654321" in response.headers["Location"]


def test_a_wrong_token_is_refused_and_sets_no_login(client):
    response = _login(client, token="not-the-token-0123456789")
    assert response.status_code == 401
    assert "not one of WA_OUTBOX_API_TOKENS" in response.get_data(as_text=True)
    assert client.get("/ops").status_code == 302


def test_login_sets_a_signed_httponly_strict_cookie_and_logout_ends_it(client):
    response = _login(client)
    assert response.status_code == 302
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("wa_outbox_ops=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ops" in cookie
    assert "Secure" not in cookie  # plain HTTP here
    assert API_TOKEN not in cookie  # the cookie proves the login; it never carries the token
    page = client.get("/ops")
    assert page.status_code == 200 and "Dead letters" in page.get_data(as_text=True)
    assert page.headers["Cache-Control"] == "no-store"
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert client.post("/ops/logout", data={"csrf_token": _csrf(page.get_data(as_text=True))}).status_code == 302
    assert client.get("/ops").status_code == 302


def test_the_cookie_is_secure_over_https(client):
    page = client.get("/ops/login", base_url="https://ops.example")
    response = client.post("/ops/login", base_url="https://ops.example",
                           data={"token": API_TOKEN, "csrf_token": _csrf(page.get_data(as_text=True))})
    assert "Secure" in response.headers["Set-Cookie"]
    behind_proxy = client.get("/ops/login", headers={"X-Forwarded-Proto": "https"})
    assert "Secure" in behind_proxy.headers["Set-Cookie"]


def test_no_token_reaches_the_logs(app, client, caplog):
    from wa_outbox.web import auth_throttle
    caplog.set_level("DEBUG")
    _login(client, token="wrong-token-abcdefghijkl")
    _login(client)
    auth_throttle.of(app).flush()  # the failure's summary line (test_auth_throttle.py)
    assert "1 failed logins" in caplog.text and "ops login" in caplog.text
    assert API_TOKEN not in caplog.text and "wrong-token-abcdefghijkl" not in caplog.text


def test_everything_the_page_loads_is_served_by_the_page(logged_in):
    html = logged_in.get("/ops").get_data(as_text=True)
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/ops") for a in assets), assets
    for asset in (a for a in assets if "/static/" in a):
        response = logged_in.get(asset)
        assert response.status_code == 200 and response.content_length > 0
        response.close()


def test_every_page_is_under_a_strict_policy_it_needs_no_exception_from(logged_in, db):
    """The policy allows nothing inline and nothing from elsewhere, and no page relies on what it refuses: no inline
    script, style element, style attribute or event handler attribute (each would be blocked in the browser)."""
    nid = _insert(db, status="dead", code=131026)
    paths = ("/ops", "/ops?q=5511987654321", f"/ops/messages/{nid}", "/ops/messages/999999999", "/ops/nowhere")
    for response in [logged_in.get(path) for path in paths] + [logged_in.get("/ops/login")]:
        policy = dict(part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";"))
        assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'", policy
        assert all(source in ("'self'", "'none'", "data:") for sources in policy.values() for source in sources.split()
                   ), policy  # never 'unsafe-inline', 'unsafe-eval', a host or a scheme wildcard
        html = response.get_data(as_text=True)
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=|\son[a-z]+=", html, re.I), html


def test_other_paths_never_get_the_session_cookie(logged_in):
    assert "Set-Cookie" not in logged_in.get("/healthz").headers


def test_login_without_its_csrf_token_is_refused(client):
    client.get("/ops/login")
    response = client.post("/ops/login", data={"token": API_TOKEN})
    assert response.status_code == 403
    assert client.get("/ops").status_code == 302


def test_a_forged_cookie_is_not_a_session(app, client):
    client.set_cookie("wa_outbox_ops", "eyJsb2dnZWRfaW4iOnRydWV9.forged.signature", path="/ops")
    assert client.get("/ops").status_code == 302


def test_an_action_without_a_session_is_refused_and_changes_nothing(client, db):
    dead = _insert(db, status="dead", code=131026)
    response = client.post(f"/ops/messages/{dead}/retry", data={"csrf_token": "anything"})
    assert response.status_code == 401
    assert "log in" in response.get_data(as_text=True).lower()
    assert db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (dead,)).fetchone()[0] == "dead"


@pytest.mark.parametrize("token", [None, "", "wrong-token"])
def test_an_action_without_the_csrf_token_is_refused_and_changes_nothing(logged_in, db, token):
    dead = _insert(db, status="dead", code=131026)
    data = {} if token is None else {"csrf_token": token}
    response = logged_in.post(f"/ops/messages/{dead}/retry", data=data)
    assert response.status_code == 403
    assert "CSRF" in response.get_data(as_text=True)
    assert db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (dead,)).fetchone()[0] == "dead"


def test_a_session_from_another_key_is_refused(app, client):
    """Rotating WHATSAPP_APP_SECRET changes the signing key: an old cookie is no longer a session."""
    _login(client)
    assert client.get("/ops").status_code == 200
    original = app.secret_key
    try:
        app.secret_key = b"another key after a token rotation"
        assert client.get("/ops").status_code == 302
    finally:
        app.secret_key = original


def test_session_key_depends_on_the_app_secret_only(settings):
    """Not on the API tokens: adding or removing one ends no other token's session (test_ops_sessions.py)."""
    import dataclasses
    key = session_key(settings)
    assert session_key(dataclasses.replace(settings, api_tokens=settings.api_tokens + ("x" * 16,))) == key
    assert session_key(dataclasses.replace(settings, app_secret="another secret")) != key
    assert session_key(dataclasses.replace(settings)) == key
    assert API_TOKEN.encode() not in key


def test_token_matches_only_a_configured_token():
    assert token_matches("a" * 16, ("b" * 16, "a" * 16))
    assert not token_matches("a" * 15, ("a" * 16,))
    assert not token_matches("", ("a" * 16,))


def test_next_never_leaves_the_ops_page(client):
    page = client.get("/ops/login")
    response = client.post("/ops/login", data={"token": API_TOKEN, "csrf_token": _csrf(page.get_data(as_text=True)),
                                               "next": "//evil.example/ops"})
    assert response.headers["Location"] == "/ops"


# --- what the page shows --------------------------------------------------------------------------------------------

def test_the_page_shows_queues_workers_senders_dead_letters_and_campaigns(logged_in, db):
    _insert(db, status="queued")
    _insert(db, status="dead", code=131026, message="receiver incapable")
    _insert(db, status="dead", message="no code here")
    db.execute("INSERT INTO wa_outbox.workers (id, hostname, pid, info) VALUES "
               "('host:1:abc', 'host', 1, '{\"in_flight\": 7, \"sent\": 42}')")
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, paused_until, pause_reason) "
               "VALUES (%s, 80, 80, 0, now() + interval '1 hour', 'auth: 190 token expired')", (SENDER,))
    db.execute("INSERT INTO wa_outbox.campaigns (name, phone_number_id) VALUES ('spring-sale', %s)", (SENDER,))
    try:
        html = logged_in.get("/ops").get_data(as_text=True)
    finally:
        db.execute("DELETE FROM wa_outbox.campaigns")
    assert '<div class="big" id="waiting">1</div>' in html
    assert "host:1:abc" in html and "outbound messages</span> 7 in flight · 42 sent" in html
    assert "in_flight" not in html  # the counters in words, not their names
    assert "auth: 190 token expired" in html and ">Resume</button>" in html
    assert "code 131026" in html and "receiver incapable" in html and "code (none)" in html
    assert "spring-sale" in html
    assert html.count("<svg") == 6 + 1  # the six charts, and the one sender's sparkline (its dead letters)
    assert all(f"{name} / min" in html for name in ("sent", "delivered", "read", "failed", "dead"))
    queues = re.search(r'<table id="queues">(.*?)</table>', html, re.S).group(1)
    assert ">outbound<" in queues and ">inbound<" in queues
    shown = re.sub(r"<[^>]+>", " ", html)  # what a reader sees: the operator's words, not the tables' names
    assert "notifications" not in shown and "webhook_events" not in shown
    assert "<script>" not in html and " style=" not in html  # the CSP allows neither


def test_campaigns_are_paused_resumed_and_cancelled_from_the_page(logged_in, db, settings):
    from wa_outbox import campaigns
    from wa_outbox.db import create_engine
    engine = create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        campaigns.import_items(engine, name="spring-sale", phone_number_id=SENDER, items=[
            {"to": f"+55119000000{i:02d}", "message": {"type": "text", "text": {"body": f"hi {i}"}},
             "idempotency_key": f"spring-{i}"} for i in range(3)])
    finally:
        engine.dispose()

    def steer(action: str, csrf: str | None = None):
        return logged_in.post(f"/ops/campaigns/{action}", data={
            "csrf_token": _page_csrf(logged_in) if csrf is None else csrf, "name": "spring-sale"})

    def state():
        return db.execute("SELECT c.status, count(*) FILTER (WHERE n.next_attempt_at = 'infinity'), "
                          "count(*) FILTER (WHERE n.status = 'cancelled') FROM wa_outbox.campaigns c "
                          "JOIN wa_outbox.notifications n ON n.campaign_id = c.id GROUP BY c.status").fetchone()

    assert ">Pause</button>" in logged_in.get("/ops").get_data(as_text=True)
    assert steer("pause", csrf="forged").status_code == 403 and state() == ("active", 0, 0)  # CSRF first
    assert steer("pause").status_code == 302 and state() == ("paused", 3, 0)
    assert ">Resume</button>" in logged_in.get("/ops").get_data(as_text=True)
    assert steer("resume").status_code == 302 and state() == ("active", 0, 0)
    assert steer("cancel").status_code == 302 and state() == ("cancelled", 0, 3)
    assert steer("resume").status_code == 302 and state() == ("cancelled", 0, 3)  # refused, said on the page
    assert "cancelled" in logged_in.get("/ops").get_data(as_text=True)


def test_charts_count_the_last_hour_of_the_timeline(logged_in, db):
    dead = _insert(db, status="dead", code=131026)
    html = logged_in.get("/ops").get_data(as_text=True)
    assert re.search(r"dead / min <span class=\"sub\">1 in the last hour", html)
    assert "<title>" in html and dead


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo", "Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns"])
def test_charts_count_each_minute_of_the_hour_in_any_time_zone(db, zone):
    """Each event counts in its minute (as the session's time zone reads the clock: the page's labels come from
    date_trunc), at both ends of the hour; events outside it and events that are no flow count nowhere."""
    with db.transaction(force_rollback=True):  # one now() for the inserts and the query
        db.execute("SELECT set_config('TimeZone', %s, true)", (zone,))
        message = db.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) VALUES (%s, "
            "'5511987654321', '{\"type\": \"text\", \"text\": {\"body\": \"hi\"}}', '') RETURNING id",
            (SENDER,)).fetchone()[0]
        start = "date_trunc('minute', now()) - interval '59 minutes'"
        for event, at in (("queued", f"{start}"), ("requeued", f"{start} + interval '59.999 seconds'"),
                          ("sent", f"{start} + interval '1 minute'"),
                          ("reconciled", f"{start} + interval '1 minute'"),
                          ("failed", f"{start} + interval '30 minutes'"),
                          ("dead", "now()"), ("cancelled", "date_trunc('minute', now())"),
                          ("queued", f"{start} - interval '1 millisecond'"), ("sending", "now()"),
                          ("delivered", "now()")):
            db.execute(f"INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, created_at) "
                       f"VALUES (%s, %s, 0, {at})", (message, event))
        rows = db.execute(wa_db.query("ops_throughput"), THROUGHPUT).fetchall()
        minutes = [r[0] for r in rows]
        first = db.execute(f"SELECT {start}").fetchone()[0]
    assert len(rows) == 60 and minutes[0] == first and minutes == sorted(minutes)
    counts = {i: r[1:] for i, r in enumerate(rows) if any(r[1:])}
    # minute: (entered, sent, failed, dead, cancelled)
    # a `reconciled` is a send too (states.SENT_EVENTS): Meta accepted it, its answer was lost
    assert counts == {0: (2, 0, 0, 0, 0), 1: (0, 2, 0, 0, 0), 30: (0, 0, 1, 0, 0), 59: (0, 0, 0, 1, 1)}, counts


def test_charts_read_a_few_pages_for_an_event_that_landed_among_old_ones(db):
    """A new event is not always at the timeline's end (it may fill space in an old page): the chart's query then
    reads that event's BRIN range, 16 pages, not the 128 of a default range."""
    message = _insert(db)
    old = ("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, created_at) "
           "SELECT %s, 'sent', 1, now() - interval '2 days' + i * interval '1 ms' FROM generate_series(1, 20000) i")
    db.execute(old, (message,))
    db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt) VALUES (%s, 'sent', 1)",
               (message,))
    db.execute(old, (message,))
    db.execute("SELECT brin_summarize_new_values('wa_outbox.notification_events_created_at')")
    db.execute("ANALYZE wa_outbox.notification_events")
    pages = db.execute("SELECT pg_relation_size('wa_outbox.notification_events') / 8192").fetchone()[0]
    assert pages > 300
    plan = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + wa_db.query("ops_throughput"),
                      THROUGHPUT).fetchone()[0][0]["Plan"]
    scans = [n for n in _plan_nodes(plan) if n["Node Type"] == "Bitmap Heap Scan"]
    assert scans, plan
    read = sum(n.get("Lossy Heap Blocks", 0) + n.get("Exact Heap Blocks", 0) for n in scans)
    assert read <= 2 * 16, f"{read} pages read for 2 events in the last hour"  # their ranges: the first, a middle one
    rows = db.execute(wa_db.query("ops_throughput"), THROUGHPUT).fetchall()
    assert sum(r[2] for r in rows) == 1 and sum(r[1] for r in rows) == 1  # that `sent`, and _insert's `queued`


def _plan_nodes(plan):
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def test_search_by_phone_number_opens_the_message_and_its_timeline(logged_in, db):
    notification_id = _insert(db, recipient="5511987654321", status="dead", code=131026)
    response = logged_in.get("/ops?q=%2B55 11 98765-4321")
    assert response.status_code == 302
    assert response.headers["Location"].startswith(f"/ops/messages/{notification_id}")
    html = logged_in.get(response.headers["Location"]).get_data(as_text=True)
    assert "5511987654321" in html and "event-queued" in html and "event-dead" in html


@pytest.mark.parametrize("field", ["id", "correlation_id", "wamid"])
def test_search_finds_a_message_by_id_correlation_id_and_wamid(logged_in, db, field):
    notification_id = _insert(db, correlation_id="req-abc-123", wamid="wamid.HBgXYZ")
    _insert(db, recipient="5511900000000")  # another message, never found by these
    q = {"id": str(notification_id), "correlation_id": "req-abc-123", "wamid": "wamid.HBgXYZ"}[field]
    response = logged_in.get("/ops", query_string={"q": q})
    assert response.headers["Location"].startswith(f"/ops/messages/{notification_id}")


def test_search_with_several_matches_lists_them(logged_in, db):
    first, second = _insert(db), _insert(db)
    html = logged_in.get("/ops?q=5511987654321").get_data(as_text=True)
    assert f"/ops/messages/{first}" in html and f"/ops/messages/{second}" in html


@pytest.mark.parametrize("q, status", [("nobody-at-all", 200), ("a\x00b", 400), ("x" * 600, 400),
                                        ("99999999999999999999999", 200)])
def test_search_without_a_match_or_with_bad_input_says_so(logged_in, q, status):
    response = logged_in.get("/ops", query_string={"q": q})
    assert response.status_code == status
    assert "wa-outbox ops" in response.get_data(as_text=True)


def test_an_unknown_message_is_a_404_page(logged_in):
    assert logged_in.get("/ops/messages/424242").status_code == 404
    assert logged_in.get("/ops/messages/99999999999999999999").status_code == 404


# --- actions --------------------------------------------------------------------------------------------------------

def test_retry_a_dead_message_requeues_it(logged_in, db):
    dead = _insert(db, status="dead", code=131026)
    response = logged_in.post(f"/ops/messages/{dead}/retry", data={"csrf_token": _page_csrf(logged_in)})
    assert response.status_code == 302
    assert db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (dead,)).fetchone()[0] == "queued"
    detail = db.execute("SELECT detail FROM wa_outbox.notification_events WHERE notification_id = %s "
                        "AND event = 'requeued'", (dead,)).fetchone()[0]
    assert detail == {"from": "dead", "by": "ops"}
    assert "requeued" in logged_in.get(response.headers["Location"]).get_data(as_text=True)


def test_purge_a_dead_message_deletes_it_and_never_a_live_one(logged_in, db):
    dead, live = _insert(db, status="dead", code=131026), _insert(db)
    csrf = _page_csrf(logged_in)
    logged_in.post(f"/ops/messages/{dead}/purge", data={"csrf_token": csrf})
    logged_in.post(f"/ops/messages/{live}/purge", data={"csrf_token": csrf})
    assert [r[0] for r in db.execute("SELECT id FROM wa_outbox.notifications ORDER BY id")] == [live]


def test_retry_and_purge_a_dead_letter_group_up_to_what_was_shown(logged_in, db, monkeypatch):
    monkeypatch.setattr(ops, "GROUP_BATCH", 2)  # several batches
    group = [_insert(db, status="dead", code=131026) for _ in range(5)]
    other = _insert(db, status="dead", code=100)
    newer = _insert(db, status="dead", code=131026)  # died after the operator loaded the page
    csrf = _page_csrf(logged_in)
    response = logged_in.post("/ops/dead/retry", data={"csrf_token": csrf, "code": "131026", "up_to_id": group[-1]})
    assert response.status_code == 302
    statuses = dict(db.execute("SELECT id, status FROM wa_outbox.notifications").fetchall())
    assert [statuses[i] for i in group] == ["queued"] * 5
    assert statuses[other] == "dead" and statuses[newer] == "dead"

    nameless = [_insert(db, status="dead") for _ in range(3)]
    logged_in.post("/ops/dead/purge", data={"csrf_token": csrf, "code": "", "up_to_id": nameless[-1]})
    remaining = {r[0] for r in db.execute("SELECT id FROM wa_outbox.notifications")}
    assert not remaining & set(nameless) and {other, newer} <= remaining


@pytest.mark.parametrize("form", [{}, {"code": "1", "up_to_id": "x"}, {"code": "1", "up_to_id": "0"},
                                  {"code": "1" * 200, "up_to_id": "5"}])
def test_a_bad_group_form_is_a_400(logged_in, form):
    response = logged_in.post("/ops/dead/retry", data={"csrf_token": _page_csrf(logged_in), **form})
    assert response.status_code == 400


def test_resume_lifts_a_pause_and_brings_held_messages_back(logged_in, db):
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, paused_until, pause_reason) "
               "VALUES (%s, 80, 80, 0, now() + interval '1 hour', 'blocked')", (SENDER,))
    held = _insert(db)
    backoff = _insert(db)
    other_sender = _insert(db, sender="200000000000002")
    db.execute("UPDATE wa_outbox.notifications SET next_attempt_at = now() + interval '1 hour' WHERE id IN (%s, %s)",
               (held, other_sender))
    db.execute("UPDATE wa_outbox.notifications SET next_attempt_at = now() + interval '3 hours' WHERE id = %s",
               (backoff,))
    response = logged_in.post("/ops/senders/resume", data={"csrf_token": _page_csrf(logged_in),
                                                            "phone_number_id": SENDER})
    assert response.status_code == 302
    assert db.execute("SELECT paused_until, pause_reason FROM wa_outbox.rate_limits").fetchone() == (None, None)
    due = dict(db.execute("SELECT id, next_attempt_at <= now() FROM wa_outbox.notifications").fetchall())
    assert due == {held: True, backoff: False, other_sender: False}
    assert "1 message(s) it held back" in logged_in.get("/ops").get_data(as_text=True)


def test_resume_sender_is_safe_to_repeat_and_unknown_senders_move_nothing(logged_in, settings, db):
    from wa_outbox.db import create_engine
    engine = create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        unknown = queries.resume_sender(engine, phone_number_id="999")
        assert unknown.was_paused_until is None and unknown.moved == 0
        db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, paused_until) "
                   "VALUES ('999', 1, 1, 0, now() + interval '1 minute')")
        assert queries.resume_sender(engine, phone_number_id="999").was_paused_until is not None
        assert queries.resume_sender(engine, phone_number_id="999").moved == 0
    finally:
        engine.dispose()
    assert wa_db.safe_to_repeat("resume_sender")
    assert logged_in.post("/ops/senders/resume", data={"csrf_token": _page_csrf(logged_in),
                                                       "phone_number_id": "x1"}).status_code == 400


# --- every query the page runs is served by an index ----------------------------------------------------------------

_PAGE_QUERIES = {
    # query: (params, indexes the plan must use)
    "ops_queue_depth": ({"cap": 10_000}, {"notifications_queued_age", "notifications_leased", "notifications_unknown",
                                          "webhook_events_due", "webhook_events_leased", "webhook_events_dead"}),
    "ops_throughput": (THROUGHPUT, {"notification_events_created_at"}),
    # the hour's outcome events by the BRIN index, their messages' senders by primary key: never a scan
    "ops_sender_outcomes": ({"since": None, **THROUGHPUT}, {"notification_events_created_at", "notifications_pkey"}),
    "ops_workers": ({}, {"workers_pkey"}),
    "ops_senders": ({"environment_sender": SENDER, "environment_token_source": "env:WHATSAPP_ACCESS_TOKEN",
                     "environment_token_fingerprint": None, "banned_states": ["DISABLE"]},
                    {"rate_limits_pkey", "senders_pkey"}),
    # Any partial index of the dead letters serves these (by code then id, by id filtering on the code, or by
    # status and age): the planner picks by the statistics of the moment, never a scan of the table.
    "ops_dead_groups": ({"groups": 50, "samples": 5},
                        [{"notifications_dead_code"}, {"notifications_dead_or_failed"},
                         {"notifications_dead_or_failed_age"}]),
    "ops_dead_group_ids": ({"code": "131026", "up_to_id": 10, "before_id": None, "limit": 1000},
                           [{"notifications_dead_code"}, {"notifications_dead_or_failed"},
                            {"notifications_dead_or_failed_age"}]),
    "ops_search": ({"id": 5511987654321, "recipient": "5511987654321", "term": "5511987654321", "limit": 50},
                   {"notifications_pkey", "notifications_recipient", "notifications_correlation_id",
                    "notifications_wamid"}),
    "ops_campaigns": ({"limit": 20}, {"campaigns_pkey", "notifications_campaign"}),
    "get_notification": ({"id": 1}, {"notifications_pkey", "notification_events_pkey"}),
    # Either index of queued rows serves it on these tiny tables (the planner picks by the statistics of the moment).
    "resume_sender": ({"phone_number_id": SENDER}, [{"rate_limits_pkey", "notifications_due"},
                                                    {"rate_limits_pkey", "notifications_queued_age"},
                                                    {"rate_limits_pkey", "notifications_sender_due"}]),
    "requeue": ({"ids": [1], "all": False, "code": None, "recipient": None, "actor": "ops"}, {"notifications_pkey"}),
    # Any index will do (here the planner picks a partial index of dead rows), never a scan of the table.
    "purge_dead": ({"ids": [1], "all": False, "older_than_days": 0}, set()),
    # every /ops request asks for its session; each login and `prune` delete the expired ones
    "ops_session_check": ({"id": b"\0" * 32}, {"ops_sessions_pkey"}),
    "ops_session_close": ({"id": b"\0" * 32}, {"ops_sessions_pkey"}),
    "ops_session_open": ({"id": b"\0" * 32, "token_fingerprint": b"\0" * 32, "lifetime_seconds": 60},
                         {"ops_sessions_expires_at"}),
    "prune_ops_sessions": ({}, {"ops_sessions_expires_at"}),
    # webhooks for unregistered numbers: only the partial index of unregistered changes, never the whole table
    "ops_unregistered": ({"limit": 20}, {"webhook_events_unregistered"}),
}


@pytest.mark.parametrize("name", sorted(_PAGE_QUERIES))
def test_every_page_query_is_index_backed(db, name):
    params, indexes = _PAGE_QUERIES[name]
    db.execute("SET enable_seqscan = off")  # the test tables are tiny: a scan would win without it
    try:
        plan = "\n".join(row[0] for row in db.execute("EXPLAIN " + wa_db.query(name), params))
    finally:
        db.execute("RESET enable_seqscan")
    used = set(re.findall(r"(?:Index|Index Only|Bitmap Index) Scan(?: Backward)? (?:using|on) (\w+)", plan))
    alternatives = indexes if isinstance(indexes, list) else [indexes]
    assert used and any(wanted <= used for wanted in alternatives), \
        f"{name} does not use {' or '.join(str(sorted(w)) for w in alternatives)}:\n{plan}"
    assert "Seq Scan" not in plan, plan


# --- pure parts ---------------------------------------------------------------------------------------------------

def test_search_terms_reads_ids_phone_numbers_and_text():
    assert ops.search_terms(" 42 ") == ops.SearchTerms(id=42, recipient=None, term="42")
    assert ops.search_terms("#42").id == 42
    assert ops.search_terms("+55 (11) 98765-4321") == ops.SearchTerms(id=None, recipient="5511987654321",
                                                                       term="+55 (11) 98765-4321")
    both = ops.search_terms("5511987654321")
    assert both.id == 5511987654321 and both.recipient == "5511987654321"
    assert ops.search_terms("99999999999999999999").id is None  # beyond bigint
    assert ops.search_terms("wamid.ABC") == ops.SearchTerms(id=None, recipient=None, term="wamid.ABC")
    for bad in ("", "  ", "a\x00", "x" * 513):
        with pytest.raises(ValueError):
            ops.search_terms(bad)


def _minute(entered: int, sent: int, dead: int, cancelled: int) -> MinuteFlows:
    return MinuteFlows(minute=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), entered=entered, sent=sent,
                       failed=0, dead=dead, cancelled=cancelled)


def test_depth_series_works_back_from_now():
    minutes = [_minute(5, 0, 0, 0), _minute(0, 3, 1, 0), _minute(2, 0, 0, 1)]
    assert ops.depth_series(4, minutes) == [7, 3, 4]
    assert ops.depth_series(0, [_minute(9, 0, 0, 0)] * 2) == [0, 0]


def test_bars_and_line_scale_to_the_largest_value():
    drawn = ops.bars([0, 5, 10], ["a", "b", "c"], width=30, height=10, gap=0)
    assert [(b.x, b.height, b.y) for b in drawn] == [(0, 0, 10), (10, 5, 5), (20, 10, 0)]
    assert [b.height for b in ops.bars([0, 0], ["a", "b"])] == [0, 0]
    assert ops.line_points([0, 10], width=10, height=10) == "0.0,10.0 10.0,0.0"
    assert ops.line_points([]) == "" and ops.bars([], []) == []


# --- the senders table: the registry (issue 19) ----------------------------------------------------------------------

def test_the_senders_table_shows_each_senders_account_token_source_pacing_and_pause(logged_in, db, settings):
    """Registered senders with alias, WABA, app, portfolio and token source (encrypted: its fingerprint; a
    reference: the variable's name), the environment's sender marked as such, an unregistered number with a pause;
    never a token."""
    from wa_outbox.secret_box import SecretBox, fingerprint, generate_key
    token = "EAAGops-page-token-0001"
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111')")
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id, portfolio_id) VALUES ('901', '111', '77')")
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, alias, token_enc, token_fingerprint) "
               "VALUES ('5001', '901', 'brand-a', %s, %s)", (SecretBox([generate_key()]).encrypt(token),
                                                             fingerprint(token)))
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_ref, token_fingerprint) "
               "VALUES ('5002', '901', 'TOKEN_OF_5002', NULL)")
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, tokens) VALUES ('5001', 20, 20)")
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, tokens, paused_until, pause_reason) "
               "VALUES ('7777', 80, 0, now() + interval '1 hour', 'auth: 190 token expired')")
    html = logged_in.get("/ops").get_data(as_text=True)
    rows = {m.group(1): m.group(2) for m in re.finditer(r'<tr data-sender="(\d+)">(.*?)</tr>', html, re.S)}
    assert list(rows) == [SENDER, "5001", "5002", "7777"]  # the environment's first
    assert "environment (WHATSAPP_PHONE_NUMBER_ID)" in rows[SENDER] and "env:WHATSAPP_ACCESS_TOKEN" in rows[SENDER]
    assert all(cell in rows["5001"] for cell in ("brand-a", "901", "111", "77", fingerprint(token), ">20<"))
    assert "env:TOKEN_OF_5002" in rows["5002"] and ">default<" in rows["5002"]
    assert "not registered" in rows["7777"] and "auth: 190 token expired" in rows["7777"] and "Resume" in rows["7777"]
    assert token not in html and settings.access_token not in html
