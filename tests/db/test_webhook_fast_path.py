"""The webhook fast path (WebhookFastPath, in front of Flask) against the Flask view it stands in for: the same bytes
for every answer, the same metrics, the same error handling — and Flask's request cycle really skipped."""

from __future__ import annotations

import json
import re

import psycopg
import pytest
from flask import request_started
from werkzeug.test import Client

from tests.conftest import meta_body, post_webhook
from tests.db.test_webhook_receiver import count, envelope, status, text_message
from wa_outbox.webhooks import sign


@pytest.fixture
def flask_only(app):
    """A client of the app without the fast path: Flask's own request cycle and the view."""
    return Client(app.wsgi_app.flask_wsgi_app)


@pytest.fixture
def flask_requests(app):
    """How many requests went through Flask's request cycle."""
    seen = []

    def started(sender, **extra):
        seen.append(1)
    request_started.connect(started, app)
    yield seen
    request_started.disconnect(started, app)


def answer(response) -> tuple:
    return response.status, sorted(response.headers.items()), response.get_data()


def test_a_stored_post_skips_flask_and_is_answered_byte_for_byte_as_the_view_answers(client, flask_only, db,
                                                                                      flask_requests):
    headers = {"X-Correlation-Id": "fast-1"}
    first = meta_body(envelope(messages=[text_message("wamid.F1")], statuses=[status("wamid.O1", "read")]))
    second = meta_body(envelope(messages=[text_message("wamid.F2")], statuses=[status("wamid.O2", "read")]))

    fast_new = post_webhook(client, first, headers=headers)
    assert flask_requests == []  # the fast path answered, Flask never ran
    flask_new = post_webhook(flask_only, second, headers=headers)
    assert flask_requests == [1]
    assert fast_new.json == {"received": 2, "new": 2, "duplicate": 0}
    assert answer(fast_new) == answer(flask_new)

    fast_again, flask_again = post_webhook(client, second, headers=headers), post_webhook(flask_only, first,
                                                                                          headers=headers)
    assert fast_again.json == {"received": 2, "new": 0, "duplicate": 2}
    assert answer(fast_again) == answer(flask_again)
    assert count(db) == 4
    assert {r[0] for r in db.execute("SELECT correlation_id FROM wa_outbox.webhook_events")} == {"fast-1"}


@pytest.mark.parametrize("case", ["no signature", "wrong signature", "not json", "not a webhook", "too large",
                                  "truncated"])
def test_every_refusal_is_the_views_own_answer(case, app, client, flask_only, db, flask_requests):
    body = meta_body(envelope(messages=[text_message("wamid.REFUSED")]))
    headers = {"X-Correlation-Id": "refused-1", "Content-Type": "application/json",
               "X-Hub-Signature-256": sign("another secret", body)}
    environ = {}
    if case == "no signature":
        del headers["X-Hub-Signature-256"]
    elif case == "not json":
        body = b"{not json"
    elif case == "not a webhook":
        body = json.dumps({"object": "page", "entry": []}).encode()
    elif case == "too large":
        body = b" " * (app.config["MAX_CONTENT_LENGTH"] + 1)
    elif case == "truncated":
        environ["CONTENT_LENGTH"] = str(len(body) + 10)
    if case in ("not json", "not a webhook", "too large", "truncated"):
        headers["X-Hub-Signature-256"] = sign(app.extensions["wa_outbox.settings"].app_secret, body)

    fast = client.post("/webhooks/whatsapp", data=body, headers=headers, environ_overrides=environ)
    flask = flask_only.post("/webhooks/whatsapp", data=body, headers=headers, environ_overrides=environ)
    assert fast.status_code in (400, 401, 403, 413)
    assert answer(fast) == answer(flask)
    assert fast.headers["X-Correlation-Id"] == "refused-1"
    assert flask_requests == [1, 1]  # the fast path handed it to the view
    assert count(db) == 0


def test_a_failed_insert_is_answered_by_the_views_error_handlers_under_the_same_correlation_id(app, client, db,
                                                                                               monkeypatch):
    store = app.extensions["wa_outbox.webhook_store"]

    def unreachable(*args, **kwargs):
        raise psycopg.OperationalError("connection refused for the test")
    monkeypatch.setattr(store, "store", unreachable)
    r = post_webhook(client, envelope(messages=[text_message("wamid.DOWN")]))
    assert r.status_code == 503 and r.json == {"error": {"status": 503, "message": "database unavailable; try again"}}
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Correlation-Id"])
    monkeypatch.undo()
    assert post_webhook(client, envelope(messages=[text_message("wamid.DOWN")])).json["new"] == 1


def _sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_fast_path_counts_the_request_metrics_the_exporter_counts(client, db, flask_requests):
    labels = {"method": "POST", "status": "200"}
    before = client.get("/metrics").get_data(as_text=True)
    for i in range(3):
        post_webhook(client, envelope(messages=[text_message(f"wamid.M{i}")]))
    post_webhook(client, envelope(messages=[text_message("wamid.M0")]))
    after = client.get("/metrics").get_data(as_text=True)
    assert flask_requests == [1, 1]  # only the two scrapes went through Flask
    assert _sample(after, "flask_http_request_total", **labels) - _sample(before, "flask_http_request_total",
                                                                          **labels) == 4
    histogram = ("flask_http_request_duration_seconds_count", {**labels, "url_rule": "/webhooks/whatsapp"})
    assert _sample(after, histogram[0], **histogram[1]) - _sample(before, histogram[0], **histogram[1]) == 4
    new, duplicate = ("wa_outbox_webhook_events_total", {"result": "new"}), ("wa_outbox_webhook_events_total",
                                                                            {"result": "duplicate"})
    assert _sample(after, new[0], **new[1]) - _sample(before, new[0], **new[1]) == 3
    assert _sample(after, duplicate[0], **duplicate[1]) - _sample(before, duplicate[0], **duplicate[1]) == 1


def test_other_routes_and_methods_still_go_through_flask(client, flask_requests):
    assert client.get("/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=test-verify-token"
                      "&hub.challenge=42").get_data() == b"42"
    assert client.post("/webhooks/whatsapp/").status_code in (308, 404)
    assert flask_requests == [1, 1]


def test_what_orjson_does_not_write_is_stored_as_json_writes_it(client, db):
    """Rows are serialized with orjson, which refuses ints past 64 bits: such a POST takes json's path, stored exact."""
    message = text_message("wamid.BIG")
    message["big"] = 123456789012345678901234567890
    r = post_webhook(client, envelope(messages=[message], statuses=[status("wamid.O9", "sent")]))
    assert r.json == {"received": 2, "new": 2, "duplicate": 0}
    stored = db.execute("SELECT payload #>> '{value,messages,0,big}' FROM wa_outbox.webhook_events "
                        "WHERE dedup_key = 'm:wamid.BIG'").fetchone()[0]
    assert stored == "123456789012345678901234567890"


def test_an_unforeseen_error_before_storing_is_the_views_json_500_not_a_bare_one(client, db, monkeypatch,
                                                                                  flask_requests):
    def broken(body):
        raise RuntimeError("a bug for the test")
    monkeypatch.setattr("wa_outbox.web.webhook_views.events_of_body", broken)
    r = post_webhook(client, envelope(messages=[text_message("wamid.BUG")]))
    assert r.status_code == 500 and r.json == {"error": {"status": 500, "message": "internal error"}}
    assert flask_requests == [1] and count(db) == 0
