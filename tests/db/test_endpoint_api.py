"""/v1/endpoints on the real app and real Postgres: every answer matches wa_outbox/web/openapi.json, the secret is in
the 201 (and rotate-secret's answer) only, never in a GET, a list or a log line, and every 4xx changes nothing."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tests.conftest import API_TOKEN
from tests.db.test_endpoints import add_event, make_delivery
from tests.db.test_openapi import _Checker
from wa_outbox.secret_box import generate_key

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
URL = "https://receiver.example.com/hooks"


@pytest.fixture(scope="module")
def ep_app(settings):
    from wa_outbox.web import create_app
    app = create_app(dataclasses.replace(settings, secret_keys=(generate_key(),)), metrics=False)
    app.testing = True
    yield app
    app.extensions["wa_outbox.registry"].stop()  # its listener, before the session's database is dropped


@pytest.fixture
def api(ep_app, database_url):
    return ep_app.test_client()


@pytest.fixture
def check(ep_app):
    return _Checker(ep_app)


def rows(db):
    return db.execute("SELECT * FROM wa_outbox.endpoints ORDER BY id").fetchall()


def test_the_whole_life_of_an_endpoint(api, check, db, caplog):
    caplog.set_level(logging.DEBUG)
    made = check(api.post("/v1/endpoints", json={"url": URL, "events": ["message.received"], "ordered": True,
                                                 "description": "crm"}, headers=AUTH), 201)
    secret, eid = made["secret"], made["id"]
    assert secret.startswith("whsec_") and made["events"] == ["message.received"] and made["ordered"] is True
    answers = [
        check(api.get("/v1/endpoints", headers=AUTH), 200),
        check(api.get(f"/v1/endpoints/{eid}", headers=AUTH), 200),
        check(api.post(f"/v1/endpoints/{eid}/disable", headers=AUTH), 200),
        check(api.get(f"/v1/endpoints/{eid}", headers=AUTH), 200),
        check(api.post(f"/v1/endpoints/{eid}/enable", headers=AUTH), 200),
    ]
    assert [e["id"] for e in answers[0]["endpoints"]] == [eid]
    assert answers[2]["state"] == "disabled" and answers[3]["disabled_reason"] == "operator"
    assert answers[4] == {**answers[4], "state": "enabled", "previous_state": "disabled"}

    seq = add_event(db)
    make_delivery(db, eid, seq, "failed", [(500, 4.5), (503, 2.0)])
    shown = check(api.get(f"/v1/endpoints/{eid}/deliveries?failed=true&limit=5", headers=AUTH), 200)
    assert [a["status_code"] for a in shown["deliveries"][0]["attempt_log"]] == [500, 503]
    assert check(api.post(f"/v1/endpoints/{eid}/replay", json={"failed_only": True}, headers=AUTH), 200) == {
        "id": eid, "requeued": 1, "inserted": 0}
    check(api.post(f"/v1/endpoints/{eid}/replay", json={"since": "2h"}, headers=AUTH), 200)

    rotated = check(api.post(f"/v1/endpoints/{eid}/rotate-secret", json={"overlap_hours": 1}, headers=AUTH), 200)
    assert rotated["secret"] != secret
    check(api.post(f"/v1/endpoints/{eid}/rotate-secret", headers=AUTH), 200)  # no body: the default overlap
    gets = [api.get("/v1/endpoints", headers=AUTH), api.get(f"/v1/endpoints/{eid}", headers=AUTH),
            api.get(f"/v1/endpoints/{eid}/deliveries", headers=AUTH)]
    for answer in gets:
        text = answer.get_data(as_text=True)
        assert "whsec_" not in text and secret not in text and rotated["secret"] not in text
    assert check(api.delete(f"/v1/endpoints/{eid}", headers=AUTH), 200) == {"id": eid, "removed": True}
    check(api.get(f"/v1/endpoints/{eid}", headers=AUTH), 404)
    assert rows(db) == []
    logged = caplog.text
    assert secret not in logged and rotated["secret"] not in logged and secret[6:] not in logged


@pytest.mark.parametrize("method, path, body, status", [
    ("post", "/v1/endpoints", {"url": "http://receiver.example.com/"}, 400),
    ("post", "/v1/endpoints", {"url": "https://10.1.2.3/"}, 400),
    ("post", "/v1/endpoints", {"url": "https://[::1]/"}, 400),
    ("post", "/v1/endpoints", {"url": URL, "events": ["message.nope"]}, 400),
    ("post", "/v1/endpoints", {"url": URL, "events": "message.received"}, 400),
    ("post", "/v1/endpoints", {"url": URL, "events": []}, 400),
    ("post", "/v1/endpoints", {"url": URL, "ordered": "yes"}, 400),
    ("post", "/v1/endpoints", {"url": URL, "secret": "whsec_mine"}, 400),
    ("post", "/v1/endpoints", {}, 400),
    ("post", "/v1/endpoints", [URL], 400),
    ("post", "/v1/endpoints", b"{not json", 400),
    ("get", "/v1/endpoints/ep_nope12345", None, 404),
    ("get", "/v1/endpoints/nope", None, 404),
    ("delete", "/v1/endpoints/ep_nope12345", None, 404),
    ("post", "/v1/endpoints/ep_nope12345/disable", None, 404),
    ("post", "/v1/endpoints/ep_nope12345/enable", None, 404),
    ("post", "/v1/endpoints/ep_nope12345/rotate-secret", None, 404),
    ("post", "/v1/endpoints/{id}/rotate-secret", {"overlap_hours": -1}, 400),
    ("post", "/v1/endpoints/{id}/rotate-secret", {"overlap_hours": "24"}, 400),
    ("get", "/v1/endpoints/ep_nope12345/deliveries", None, 404),
    ("get", "/v1/endpoints/{id}/deliveries?limit=0", None, 400),
    ("get", "/v1/endpoints/{id}/deliveries?limit=x", None, 400),
    ("get", "/v1/endpoints/{id}/deliveries?failed=maybe", None, 400),
    ("post", "/v1/endpoints/ep_nope12345/replay", {"failed_only": True}, 404),
    ("post", "/v1/endpoints/{id}/replay", {}, 400),
    ("post", "/v1/endpoints/{id}/replay", {"since": "last tuesday"}, 400),
    ("post", "/v1/endpoints/{id}/replay", {"failed_only": "yes"}, 400),
])
def test_bad_requests_answer_4xx_and_change_nothing(api, check, db, method, path, body, status):
    existing = check(api.post("/v1/endpoints", json={"url": URL}, headers=AUTH), 201)
    before = rows(db)
    kwargs = {"data": body, "content_type": "application/json"} if isinstance(body, bytes) else (
        {"json": body} if body is not None else {})
    answer = getattr(api, method)(path.format(id=existing["id"]), headers=AUTH, **kwargs)
    check(answer, status)
    assert answer.json["error"]["message"]
    assert rows(db) == before and existing["secret"] not in answer.get_data(as_text=True)


def test_without_a_token(api, db):
    assert api.post("/v1/endpoints", json={"url": URL}).status_code == 401
    assert api.get("/v1/endpoints").status_code == 401
    assert rows(db) == []


def test_without_the_secret_key_nothing_is_stored(app, db):
    """The suite's app has no WA_OUTBOX_SECRET_KEY: the endpoint is refused (503, the service lacks it)."""
    answer = app.test_client().post("/v1/endpoints", json={"url": URL}, headers=AUTH)
    assert answer.status_code == 503 and "WA_OUTBOX_SECRET_KEY is not set" in answer.json["error"]["message"]
    assert rows(db) == []
    bad_first = app.test_client().post("/v1/endpoints", json={"url": "http://x.example/"}, headers=AUTH)
    assert bad_first.status_code == 400  # bad input is named before the missing key
