"""The /ops page's endpoints section: state, failing since, recent attempts with status and latency, the disabled
banner, and the replay and enable actions behind the page's session and CSRF token (as the other ops actions)."""

from __future__ import annotations

import re

import pytest

from tests.db.test_endpoints import add_event, make_delivery
from tests.db.test_ops import _login, _page_csrf
from wa_outbox import db as wa_db

EP = "ep_opspage0001"


@pytest.fixture
def logged_in(client):
    assert _login(client).status_code == 302
    return client


def add_endpoint(db, endpoint_id: str = EP, *, state: str = "enabled", reason: str | None = None) -> None:
    db.execute("INSERT INTO wa_outbox.endpoints (id, url, event_types, secret_enc, secret_fingerprint, state, "
               "disabled_reason, disabled_at, failing_since) VALUES (%s, 'https://crm.example.com/hook', "
               "'{message.received}', 'not a real token', 'sha256:0123456789ab', %s, %s, "
               "CASE WHEN %s = 'disabled' THEN now() END, CASE WHEN %s = 'failing' THEN now() - interval '5 days' END)",
               (endpoint_id, state, reason, state, reason))


def test_the_section_shows_state_failing_since_and_recent_attempts(logged_in, db):
    add_endpoint(db)
    make_delivery(db, EP, add_event(db), "delivered", [(503, 1200.4), (200, 35.2)])
    html = logged_in.get("/ops").get_data(as_text=True)
    assert 'id="endpoints"' in html and EP in html and "https://crm.example.com/hook" in html
    assert "message.received" in html and ">enabled</span>" in html
    assert re.search(r">200</span> 35 ms", html) and re.search(r">503</span> 1200 ms", html)
    assert html.index(">200</span>") < html.index(">503</span>")  # newest first
    assert 'class="banner"' not in html and "sha256:" not in html
    assert "<script>" not in html and " style=" not in html  # the CSP allows neither


def test_no_endpoints_no_section(logged_in):
    assert 'id="endpoints"' not in logged_in.get("/ops").get_data(as_text=True)


@pytest.mark.parametrize("reason, words", [("gone", "answered 410"), ("failing", "failed continuously since"),
                                           ("operator", "by an operator")])
def test_a_disabled_endpoint_gets_a_banner_and_can_be_enabled(logged_in, db, reason, words):
    add_endpoint(db, state="disabled", reason=reason)
    html = logged_in.get("/ops").get_data(as_text=True)
    banner = re.search(r'<div class="banner" role="alert"[^>]*>(.*?)</div>', html, re.S)
    assert banner and EP in banner.group(1) and words in banner.group(1) and ">Enable</button>" in banner.group(1)
    forged = logged_in.post("/ops/endpoints/enable", data={"csrf_token": "forged", "endpoint_id": EP})
    assert forged.status_code == 403
    assert db.execute("SELECT state FROM wa_outbox.endpoints").fetchone()[0] == "disabled"
    done = logged_in.post("/ops/endpoints/enable", data={"csrf_token": _page_csrf(logged_in), "endpoint_id": EP})
    assert done.status_code == 302
    assert db.execute("SELECT state, failing_since FROM wa_outbox.endpoints").fetchone() == ("enabled", None)
    assert 'class="banner"' not in logged_in.get("/ops").get_data(as_text=True)


def test_replay_from_the_page(logged_in, db):
    add_endpoint(db)
    ok = make_delivery(db, EP, add_event(db), "delivered", [(200, 5.0)])
    bad = make_delivery(db, EP, add_event(db), "failed", [(500, 5.0)])
    html = logged_in.get("/ops").get_data(as_text=True)
    assert ">Replay</button>" in html and 'value="failed"' in html

    def statuses():
        return dict(db.execute("SELECT id, status FROM wa_outbox.deliveries").fetchall())

    assert logged_in.post("/ops/endpoints/replay", data={"csrf_token": "forged", "endpoint_id": EP,
                                                         "what": "failed"}).status_code == 403
    assert statuses() == {ok: "delivered", bad: "failed"}
    done = logged_in.post("/ops/endpoints/replay", data={"csrf_token": _page_csrf(logged_in), "endpoint_id": EP,
                                                         "what": "failed"})
    assert done.status_code == 302 and statuses() == {ok: "delivered", bad: "queued"}
    assert "1 deliveries queued (failed deliveries)" in logged_in.get("/ops").get_data(as_text=True)
    since = logged_in.post("/ops/endpoints/replay", data={"csrf_token": _page_csrf(logged_in), "endpoint_id": EP,
                                                          "what": "24h"})
    assert since.status_code == 302 and statuses() == {ok: "queued", bad: "queued"}


def test_actions_without_a_session_change_nothing(client, db):
    add_endpoint(db, state="disabled", reason="gone")
    assert client.post("/ops/endpoints/enable", data={"endpoint_id": EP}).status_code == 401
    assert db.execute("SELECT state FROM wa_outbox.endpoints").fetchone()[0] == "disabled"


@pytest.mark.parametrize("form", [{"endpoint_id": "nope", "what": "failed"}, {"endpoint_id": EP, "what": "1y"},
                                  {"endpoint_id": EP}, {"what": "failed"}])
def test_a_bad_replay_form_is_a_400(logged_in, db, form):
    add_endpoint(db)
    answer = logged_in.post("/ops/endpoints/replay", data={"csrf_token": _page_csrf(logged_in), **form})
    assert answer.status_code == 400


def test_an_unknown_endpoint_is_said_on_the_page(logged_in, db):
    answer = logged_in.post("/ops/endpoints/replay", data={"csrf_token": _page_csrf(logged_in),
                                                           "endpoint_id": "ep_gone00000", "what": "failed"})
    assert answer.status_code == 302 and "no endpoint ep_gone00000" in logged_in.get("/ops").get_data(as_text=True)


def test_the_page_query_is_index_backed(db):
    """As tests/db/test_ops.py checks every page query: no scan of deliveries or attempts, however many."""
    db.execute("SET enable_seqscan = off")
    try:
        plan = "\n".join(row[0] for row in db.execute(
            "EXPLAIN " + wa_db.query("ops_endpoints"), {"limit": 50, "attempts": 5, "cap": 10_000}))
    finally:
        db.execute("RESET enable_seqscan")
    used = set(re.findall(r"(?:Index|Index Only|Bitmap Index) Scan(?: Backward)? (?:using|on) (\w+)", plan))
    wanted = {"endpoints_pkey", "deliveries_conversation", "deliveries_failed", "delivery_attempts_endpoint"}
    assert wanted <= used, plan
    assert "Seq Scan" not in plan, plan
