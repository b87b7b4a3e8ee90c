"""WA_OUTBOX_VALIDATE=meta: /v1/messages, Python enqueue() and `wa-outbox send` refuse what Meta's schema refuses,
naming the field, and write nothing; off (the default) queues it as before. The schema is the simulator's, its
checker in wa_outbox/meta_validation.py: the enqueue path never imports the simulator."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from tests.conftest import API_TOKEN
from tests.db.test_simulator_corpus import INVALID, VALID
from wa_outbox import cli, meta_schema
from wa_outbox.config import ConfigError, Settings
from wa_outbox.enqueue import enqueue
from wa_outbox.messages import InvalidMessage, check_request

NO_COORDINATES = {"type": "location", "location": {"name": "Store"}}
WHY = "The parameter location['latitude'] is required."
REFUSED = {name: case["body"] for name, case in INVALID.items() if case["expect"] == "refused"}


def _count(db) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0]


def _message(body: dict) -> dict:
    return {k: v for k, v in body.items() if k != "to"}


@pytest.fixture
def meta(monkeypatch):
    monkeypatch.setenv("WA_OUTBOX_VALIDATE", "meta")


def test_off_by_default_queues_what_meta_would_refuse(db, sender, monkeypatch):
    monkeypatch.delenv("WA_OUTBOX_VALIDATE", raising=False)
    assert Settings.from_env({}).validate == "off"
    enqueue(db, to="+5511987654321", message=NO_COORDINATES)
    assert _count(db) == 1


def test_python_enqueue_refuses_naming_the_field_and_writes_nothing(db, sender, meta):
    with pytest.raises(InvalidMessage) as refused:
        enqueue(db, to="+5511987654321", message=NO_COORDINATES)
    assert WHY in str(refused.value)
    assert _count(db) == 0
    enqueue(db, to="+5511987654321", message={"type": "location", "location": {"latitude": 1.5, "longitude": 2}})
    assert _count(db) == 1


def test_the_api_answers_400_naming_the_field(client, db, sender, meta):
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    r = client.post("/v1/messages", json={"to": "+5511987654321", "message": NO_COORDINATES}, headers=auth)
    assert r.status_code == 400 and WHY in r.json["error"]["message"]
    assert _count(db) == 0
    ok = client.post("/v1/messages",
                     json={"to": "+5511987654321", "message": _message(VALID["pywa:template_copy_code"])},
                     headers=auth)
    assert ok.status_code == 202


def test_the_cli_send_exits_nonzero_naming_the_field(database_url, db, sender, monkeypatch):
    monkeypatch.setattr(cli.logs, "configure", lambda *args, **kwargs: None)
    env = {"DATABASE_URL": database_url, "WHATSAPP_PHONE_NUMBER_ID": "100000000000001", "WA_OUTBOX_VALIDATE": "meta"}
    r = CliRunner().invoke(cli.main, ["send", "--to", "+5511987654321", "--json", json.dumps(NO_COORDINATES)], env=env)
    assert r.exit_code != 0 and WHY in r.output
    assert _count(db) == 0


@pytest.mark.parametrize("name", sorted(VALID))
def test_meta_accepts_every_valid_corpus_body(meta, name):
    check_request(to="+16505551234", message=_message(VALID[name]))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_meta_refuses_every_refused_corpus_body_with_meta_details(meta, name):
    with pytest.raises(InvalidMessage) as refused:
        check_request(to="+16505551234", message=_message(REFUSED[name]))
    assert str(refused.value).endswith(INVALID[name]["details"])


def test_a_bad_value_is_a_config_error_at_start_up():
    with pytest.raises(ConfigError, match="WA_OUTBOX_VALIDATE='strict' is not valid: expected off or meta"):
        Settings.from_env({"WA_OUTBOX_VALIDATE": "strict"})
    assert Settings.from_env({"WA_OUTBOX_VALIDATE": "META"}).validate == "meta"


def test_meta_without_jsonschema_is_a_config_error_at_start_up(monkeypatch):
    """jsonschema is only in the `simulator` extra: `meta` must say so when the process starts."""
    meta_schema._checker.cache_clear()
    for name in [m for m in sys.modules if m == "jsonschema" or m.startswith("jsonschema.")
                 or m in ("wa_outbox.meta_validation", "wa_outbox.simulator.validation")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema -> ImportError
    try:
        with pytest.raises(ConfigError, match=r"WA_OUTBOX_VALIDATE=meta needs the jsonschema package.*simulator"):
            Settings.from_env({"WA_OUTBOX_VALIDATE": "meta"})
        assert Settings.from_env({}).validate == "off"  # off never needs it
    finally:
        meta_schema._checker.cache_clear()
