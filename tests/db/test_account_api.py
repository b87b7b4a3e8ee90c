"""/v1/apps and /v1/senders on the real app and real Postgres: list, show, create, update (rotate a secret, set a
token), delete; bad input answered 4xx JSON with nothing changed; every answer matches openapi.json; no answer and
no log line holds a secret."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tests.conftest import API_TOKEN
from tests.db.test_openapi import _Checker
from wa_outbox.secret_box import fingerprint, generate_key

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
KEY = generate_key()
SECRET_A, SECRET_A2, SECRET_B = "api-app-secret-0001", "api-app-secret-0002", "api-app-secret-0003"
TOKEN_1, TOKEN_2, TOKEN_3 = "EAAGapi-token-0001", "EAAGapi-token-0002", "EAAGapi-token-0003"
USED = {"SECRET_A": SECRET_A, "SECRET_A2": SECRET_A2, "SECRET_B": SECRET_B, "TOKEN_1": TOKEN_1, "TOKEN_2": TOKEN_2,
        "TOKEN_3": TOKEN_3, "KEY": KEY}
TABLES = ("meta_apps", "app_secrets", "business_accounts", "senders", "rate_limits")


@pytest.fixture(scope="module")
def keyed_app(settings):
    from wa_outbox.web import create_app
    app = create_app(dataclasses.replace(settings, secret_keys=(KEY,)), metrics=False)
    app.testing = True
    yield app
    app.extensions["wa_outbox.registry"].stop()  # its listener, before the session's database is dropped
    app.extensions["wa_outbox.engine"].dispose()


@pytest.fixture
def api(keyed_app, database_url, monkeypatch, caplog):
    """A client whose every answer is checked against openapi.json and kept for the grep."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("TOKEN_2", TOKEN_2)
    monkeypatch.setenv("SECRET_B", SECRET_B)
    client, check, answers = keyed_app.test_client(), _Checker(keyed_app), []

    def call(method: str, path: str, status: int, json=None, headers=AUTH):
        response = getattr(client, method)(path, json=json, headers=headers)
        answers.append(response.get_data(as_text=True))
        return check(response, status)
    call.answers = answers  # type: ignore[attr-defined]
    call.check = check  # type: ignore[attr-defined]
    return call


def snapshot(db):
    return [db.execute(f"SELECT * FROM wa_outbox.{t} ORDER BY 1").fetchall() for t in TABLES]


def register(api):
    api("post", "/v1/apps", 201, {"app_id": "111", "secret": SECRET_A, "name": "Brand A"})
    api("post", "/v1/apps", 201, {"app_id": "222", "secret_ref": "SECRET_B"})
    api("post", "/v1/senders", 201, {"phone_number_id": "5001", "waba_id": "901", "app_id": "111", "token": TOKEN_1,
                                     "portfolio_id": "77", "mps": 20, "alias": "brand-a"})
    api("post", "/v1/senders", 201, {"phone_number_id": "5002", "waba_id": "902", "app_id": "222",
                                     "token_ref": "TOKEN_2"})


def test_apps_and_senders_over_http(api, db, caplog, settings):
    register(api)
    assert api("post", "/v1/apps", 200, {"app_id": "111", "secret": SECRET_A})["secret_fingerprint"] == \
        fingerprint(SECRET_A)  # the same secret again: unchanged
    apps = api("get", "/v1/apps", 200)["apps"]
    assert [(a["app_id"], a["secret_ref"], a["business_accounts"]) for a in apps] == [
        ("111", None, ["901"]), ("222", "SECRET_B", ["902"])]
    rotated = api("patch", "/v1/apps/111", 200, {"secret": SECRET_A2, "overlap_hours": 1.5})
    assert rotated["secret_fingerprint"] == fingerprint(SECRET_A2)
    assert rotated["previous_fingerprint"] == fingerprint(SECRET_A)
    assert api("get", "/v1/apps/111", 200)["senders"] == 1

    senders = {s["phone_number_id"]: s for s in api("get", "/v1/senders", 200)["senders"]}
    assert senders[settings.phone_number_id]["from_environment"] is True
    assert (senders["5001"]["token_source"], senders["5001"]["mps"], senders["5001"]["alias"]) == (
        "encrypted", 20, "brand-a")
    assert senders["5002"]["token_source"] == "env:TOKEN_2"
    updated = api("post", "/v1/senders", 200, {"phone_number_id": "5001", "waba_id": "901", "app_id": "111",
                                               "token": TOKEN_1, "display_phone_number": "+1 555 0100"})
    assert updated["alias"] == "brand-a" and updated["display_phone_number"] == "+1 555 0100"
    replaced = api("patch", "/v1/senders/5002", 200, {"token": TOKEN_3})
    assert replaced["token_source"] == "encrypted" and replaced["token_fingerprint"] == fingerprint(TOKEN_3)
    assert api("get", "/v1/senders/5002", 200)["waba_id"] == "902"
    assert api("delete", "/v1/senders/5002", 200) == {"phone_number_id": "5002", "removed": True,
                                                      "business_account_removed": "902"}
    assert api("delete", "/v1/apps/222", 200) == {"app_id": "222", "removed": True}
    assert api.check.seen >= {("/v1/apps", "get"), ("/v1/apps", "post"), ("/v1/apps/{app_id}", "get"),
                              ("/v1/apps/{app_id}", "patch"), ("/v1/apps/{app_id}", "delete"),
                              ("/v1/senders", "get"), ("/v1/senders", "post"),
                              ("/v1/senders/{phone_number_id}", "get"), ("/v1/senders/{phone_number_id}", "patch"),
                              ("/v1/senders/{phone_number_id}", "delete")}

    text = "\n".join(api.answers) + "\n" + caplog.text
    leaked = [name for name, value in USED.items() if value in text]
    assert not leaked, f"in an answer or a log line: {leaked}"


BAD = [
    ("post", "/v1/apps", {"app_id": "111"}, 400, "exactly one of 'secret'"),
    ("post", "/v1/apps", {"app_id": "111", "secret": "s", "secret_ref": "SECRET_B"}, 400, "exactly one"),
    ("post", "/v1/apps", {"app_id": 111, "secret": "s-1"}, 400, "digits"),
    ("post", "/v1/apps", {"app_id": "333", "secret": "s-1", "colour": "red"}, 400, "unknown field"),
    ("post", "/v1/apps", {"secret": "s-1"}, 400, "missing field"),
    ("post", "/v1/apps", ["not", "an", "object"], 400, "JSON object"),
    ("post", "/v1/apps", {"app_id": "333", "secret": ""}, 400, "empty"),
    ("post", "/v1/apps", {"app_id": "333", "secret_ref": "UNSET_VARIABLE_X"}, 400, "UNSET_VARIABLE_X"),
    ("post", "/v1/apps", {"app_id": "111", "secret": "another-secret"}, 409, "rotate-secret"),
    ("patch", "/v1/apps/111", {"secret": "s-2", "overlap_hours": "soon"}, 400, "overlap"),
    ("patch", "/v1/apps/111", {"secret": SECRET_A}, 409, "current secret"),
    ("patch", "/v1/apps/999", {"secret": "s-2"}, 404, "no app 999"),
    ("get", "/v1/apps/999", None, 404, "no app 999"),
    ("get", "/v1/apps/abc", None, 400, "digits"),
    ("delete", "/v1/apps/111", None, 409, "901"),
    ("post", "/v1/senders", {"phone_number_id": "5003", "waba_id": "901", "app_id": "222", "token": "t-1"}, 409,
     "belongs to app 111"),
    ("post", "/v1/senders", {"phone_number_id": "5003", "waba_id": "909", "app_id": "111", "token": "t-1",
                             "alias": "brand-a"}, 409, "5001"),
    ("post", "/v1/senders", {"phone_number_id": "5003", "waba_id": "909", "app_id": "111", "token": "t-1",
                             "mps": True}, 400, "mps"),
    ("post", "/v1/senders", {"phone_number_id": "5003", "waba_id": "909", "app_id": "999", "token": "t-1"}, 404,
     "no app 999"),
    ("patch", "/v1/senders/5999", {"token": "t-1"}, 404, "no sender 5999"),
    ("patch", "/v1/senders/5001", {"token": "t 1"}, 400, "single word"),
    ("delete", "/v1/senders/5999", None, 404, "no sender 5999"),
    ("get", "/v1/senders/5999", None, 404, "no sender 5999"),
]


@pytest.mark.parametrize("method,path,body,status,fragment", BAD, ids=[f"{b[0]} {b[1]} {b[3]}" for b in BAD])
def test_bad_input_is_a_4xx_and_changes_nothing(api, db, method, path, body, status, fragment):
    register(api)
    before = snapshot(db)
    answer = api(method, path, status, body)
    assert fragment in answer["error"]["message"]
    assert snapshot(db) == before


def test_without_the_key_a_secret_is_refused_409(client, db):
    """The suite's app has no WA_OUTBOX_SECRET_KEY: a secret in the body is refused, a reference is not."""
    r = client.post("/v1/apps", json={"app_id": "111", "secret": SECRET_A}, headers=AUTH)
    assert r.status_code == 409 and "WA_OUTBOX_SECRET_KEY is not set" in r.json["error"]["message"]
    assert db.execute("SELECT count(*) FROM wa_outbox.meta_apps").fetchone()[0] == 0
    assert SECRET_A not in r.get_data(as_text=True)


def test_a_bearer_token_is_needed(api):
    api("get", "/v1/senders", 401, headers={})
    api("post", "/v1/apps", 401, {"app_id": "111", "secret": SECRET_A}, headers={})
