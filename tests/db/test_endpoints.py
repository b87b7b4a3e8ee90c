"""Endpoints' operations (wa_outbox/endpoints.py) and `wa-outbox endpoints …` against real Postgres: the secret is
shown once and stored encrypted, bad input changes nothing, replay is set-based and starts nothing twice."""

from __future__ import annotations

import dataclasses
import json

import psycopg
import pytest
from click.testing import CliRunner
from standardwebhooks import Webhook

from wa_outbox import cli, endpoints, queries
from wa_outbox.db import create_engine
from wa_outbox.secret_box import SecretBox, SecretKeyMissing, fingerprint, generate_key

KEY = generate_key()
URL = "https://receiver.example.com/hooks"


@pytest.fixture
def ep_settings(settings):
    return dataclasses.replace(settings, secret_keys=(KEY,))


@pytest.fixture
def engine(database_url):
    engine = create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def ep_run(database_url, monkeypatch):
    """The CLI in-process with WA_OUTBOX_SECRET_KEY set (or `key=None`: unset)."""
    monkeypatch.setattr(cli.logs, "configure", lambda *args, **kwargs: None)
    monkeypatch.delenv("WA_OUTBOX_SECRET_KEY", raising=False)
    monkeypatch.delenv("WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE", raising=False)

    def invoke(*args: str, key: str | None = KEY, allow_private: bool = False):
        env = {"DATABASE_URL": database_url}
        if key:
            env["WA_OUTBOX_SECRET_KEY"] = key
        if allow_private:
            env["WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE"] = "true"
        return CliRunner().invoke(cli.main, list(args), env=env, catch_exceptions=False)
    return invoke


def add_event(db, type_: str = "message.received", *, phone_number_id: str = "100000000000001",
              wa_id: str = "5511987654321", minutes_ago: float = 0) -> int:
    return db.execute(
        "INSERT INTO wa_outbox.events (type, occurred_at, phone_number_id, wa_id, data) "
        "VALUES (%s, now() - make_interval(secs => %s), %s, %s, '{\"schema_version\": 1}') RETURNING seq",
        (type_, minutes_ago * 60, phone_number_id, wa_id)).fetchone()[0]


def endpoint_rows(db) -> list[tuple]:
    return db.execute("SELECT * FROM wa_outbox.endpoints ORDER BY id").fetchall()


def test_add_stores_the_secret_encrypted_and_returns_it_once(engine, ep_settings, db):
    made = endpoints.add(engine, ep_settings, url=URL, event_types="message.received, message.status",
                         ordered=True, description="the CRM")
    assert endpoints.is_endpoint_id(made.endpoint.id)
    assert made.secret.startswith("whsec_")
    Webhook(made.secret)  # the reference library takes it as it is
    assert made.endpoint.event_types == ["message.received", "message.status"] and made.endpoint.ordered
    stored, fp = db.execute("SELECT secret_enc, secret_fingerprint FROM wa_outbox.endpoints").fetchone()
    assert made.secret.encode() not in bytes(stored)
    assert SecretBox([KEY]).decrypt(stored) == made.secret and fp == fingerprint(made.secret)
    assert made.secret not in repr(endpoints.show(engine, made.endpoint.id))
    assert made.secret not in json.dumps(endpoints.public(made.endpoint), default=str)


def ahead_of_cursor(db, endpoint_id: str) -> list[int]:
    return [r[0] for r in db.execute(
        "SELECT seq FROM wa_outbox.events ev, wa_outbox.endpoints e WHERE e.id = %s "
        "AND (ev.txid, ev.seq) > (e.cursor_txid, e.cursor_seq) ORDER BY seq", (endpoint_id,))]


def test_a_new_endpoint_starts_at_the_feed_present(engine, ep_settings, db):
    """Its cursor is the feed's horizon: events committed after it was added are ahead, never skipped, even one whose
    transaction began before the endpoint was added and commits after. (Events committed just before by a
    transaction above the horizon may be ahead too: at least once. On a server shared with other work the horizon
    can be lower still, so "before" is not asserted to be behind.)"""
    with psycopg.connect(ep_settings.database_url) as slow:  # a writer whose transaction spans the add
        slow_seq = add_event(slow)
        made = endpoints.add(engine, ep_settings, url=URL)
        after = add_event(db)
        slow.commit()
    ahead = ahead_of_cursor(db, made.endpoint.id)
    assert slow_seq in ahead and after in ahead
    cursor_txid, cursor_seq, horizon = db.execute(
        "SELECT cursor_txid::text::bigint, cursor_seq, wa_outbox.events_horizon()::text::bigint "
        "FROM wa_outbox.endpoints").fetchone()
    assert cursor_seq == 0 and cursor_txid <= horizon


@pytest.mark.parametrize("kwargs, fragment", [
    ({"url": "http://receiver.example.com/"}, "must be https"),
    ({"url": "https://127.0.0.1/"}, "loopback"),
    ({"url": "https://10.0.0.5/"}, "private"),
    ({"url": "https://169.254.169.254/latest"}, "link-local"),
    ({"url": "https://user:pw@example.com/"}, "credentials"),
    ({"url": 42}, "string"),
    ({"url": URL, "event_types": "message.received,message.typo"}, "unknown event type"),
    ({"url": URL, "event_types": []}, "empty list"),
    ({"url": URL, "description": "x" * 501}, "description"),
])
def test_add_refuses_bad_input_and_changes_nothing(engine, ep_settings, db, kwargs, fragment):
    with pytest.raises(endpoints.EndpointError, match=fragment):
        endpoints.add(engine, ep_settings, **kwargs)
    assert endpoint_rows(db) == []


def test_add_without_the_secret_key_is_refused(engine, settings, db):
    with pytest.raises(SecretKeyMissing):
        endpoints.add(engine, dataclasses.replace(settings, secret_keys=()), url=URL)
    assert endpoint_rows(db) == []


def test_private_addresses_when_allowed(engine, ep_settings):
    allowed = dataclasses.replace(ep_settings, endpoints_allow_private=True)
    assert endpoints.add(engine, allowed, url="http://127.0.0.1:8123/").endpoint.url == "http://127.0.0.1:8123/"


def test_disable_enable_clears_the_failing_state(engine, ep_settings, db):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    db.execute("UPDATE wa_outbox.endpoints SET failing_since = now() - interval '1 day'")
    off = endpoints.disable(engine, ep.id)
    assert (off.state, off.previous_state, off.disabled_reason) == ("disabled", "enabled", "operator")
    assert endpoints.disable(engine, ep.id).disabled_at == off.disabled_at  # again: the same
    on = endpoints.enable(engine, ep.id)
    assert (on.state, on.disabled_reason, on.disabled_at) == ("enabled", None, None)
    assert endpoints.show(engine, ep.id).failing_since is None


def test_a_gone_endpoint_keeps_its_reason_when_disabled_again(engine, ep_settings, db):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    db.execute("UPDATE wa_outbox.endpoints SET state = 'disabled', disabled_reason = 'gone', disabled_at = now()")
    assert endpoints.disable(engine, ep.id).disabled_reason == "gone"


def test_rotate_secret_keeps_the_previous_one_for_the_overlap(engine, ep_settings, db):
    made = endpoints.add(engine, ep_settings, url=URL)
    rotated, secret = endpoints.rotate_secret(engine, ep_settings, made.endpoint.id, 2)
    assert secret != made.secret and rotated.secret_fingerprint == fingerprint(secret)
    current, previous, hours = db.execute(
        "SELECT secret_enc, previous_secret_enc, extract(epoch FROM previous_secret_until - now()) / 3600 "
        "FROM wa_outbox.endpoints").fetchone()
    box = SecretBox([KEY])
    assert box.decrypt(current) == secret and box.decrypt(previous) == made.secret
    assert 1.9 < float(hours) <= 2


@pytest.mark.parametrize("operation", ["show", "disable", "enable", "remove", "deliveries", "rotate", "replay"])
@pytest.mark.parametrize("endpoint_id", ["ep_doesnotexist", "not-an-id", "ep_" + "x" * 70, "ep_a'; --"])
def test_unknown_ids_are_refused(engine, ep_settings, db, operation, endpoint_id):
    endpoints.add(engine, ep_settings, url=URL)
    before = endpoint_rows(db)
    call = {"show": lambda: endpoints.show(engine, endpoint_id),
            "disable": lambda: endpoints.disable(engine, endpoint_id),
            "enable": lambda: endpoints.enable(engine, endpoint_id),
            "remove": lambda: endpoints.remove(engine, endpoint_id),
            "deliveries": lambda: endpoints.deliveries(engine, endpoint_id),
            "rotate": lambda: endpoints.rotate_secret(engine, ep_settings, endpoint_id),
            "replay": lambda: endpoints.replay(engine, endpoint_id, failed_only=True)}[operation]
    with pytest.raises(endpoints.EndpointNotFound):
        call()
    assert endpoint_rows(db) == before


def test_remove_takes_its_deliveries(engine, ep_settings, db):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    seq = add_event(db)
    db.execute("INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq) VALUES (%s, %s)", (ep.id, seq))
    endpoints.remove(engine, ep.id)
    assert db.execute("SELECT count(*) FROM wa_outbox.deliveries").fetchone()[0] == 0
    assert endpoint_rows(db) == []


def make_delivery(db, endpoint_id: str, seq: int, status: str, attempts: list[tuple[int | None, float]]) -> int:
    delivery_id = db.execute(
        "INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq, status, attempts, last_status_code, delivered_at) "
        "VALUES (%s, %s, %s, %s, %s, CASE WHEN %s = 'delivered' THEN now() END) RETURNING id",
        (endpoint_id, seq, status, len(attempts), attempts[-1][0] if attempts else None, status)).fetchone()[0]
    for n, (code, latency) in enumerate(attempts, 1):
        db.execute("INSERT INTO wa_outbox.delivery_attempts (delivery_id, attempt, endpoint_id, status_code, "
                   "latency_ms, response_head) VALUES (%s, %s, %s, %s, %s, 'ok')",
                   (delivery_id, n, endpoint_id, code, latency))
    return delivery_id


def test_deliveries_show_attempts_and_filter_failed(engine, ep_settings, db):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    ok = make_delivery(db, ep.id, add_event(db), "delivered", [(500, 12.5), (200, 8.0)])
    bad = make_delivery(db, ep.id, add_event(db, "message.status"), "failed", [(500, 3.0)])
    shown = endpoints.deliveries(engine, ep.id)
    assert [d.id for d in shown] == [bad, ok]
    assert [a["status_code"] for a in shown[1].attempt_log] == [500, 200] and shown[1].attempt_log[1]["latency_ms"] == 8
    assert shown[0].event_type == "message.status" and shown[0].event_id.startswith("evt_")
    assert [d.id for d in endpoints.deliveries(engine, ep.id, failed=True)] == [bad]
    assert endpoints.show(engine, ep.id).failed == 1


def test_replay_since_requeues_and_inserts_the_missing_set_based(engine, ep_settings, db):
    old = add_event(db, minutes_ago=120)                      # before --since
    early = add_event(db, minutes_ago=30)                     # before the endpoint: no delivery yet
    other_type = add_event(db, "template.status", minutes_ago=20)
    ep = endpoints.add(engine, ep_settings, url=URL, event_types="message.received,message.status").endpoint
    delivered_seq = add_event(db, minutes_ago=10)
    failed_seq = add_event(db, "message.status", minutes_ago=5)
    not_dispatched = add_event(db)                            # after the cursor: the dispatch's, not replay's
    # the dispatch moved the cursor past the two it delivered
    db.execute("UPDATE wa_outbox.endpoints SET (cursor_txid, cursor_seq) = "
               "(SELECT txid, seq FROM wa_outbox.events WHERE seq = %s)", (failed_seq,))
    delivered = make_delivery(db, ep.id, delivered_seq, "delivered", [(200, 5.0)])
    failed = make_delivery(db, ep.id, failed_seq, "failed", [(500, 5.0)])

    result = endpoints.replay(engine, ep.id, since="1h")
    assert (result.requeued, result.inserted) == (2, 1)
    rows = dict(db.execute("SELECT event_seq, status FROM wa_outbox.deliveries").fetchall())
    assert rows == {early: "queued", delivered_seq: "queued", failed_seq: "queued"}
    assert old not in rows and other_type not in rows and not_dispatched not in rows
    attempts = db.execute("SELECT attempts FROM wa_outbox.deliveries WHERE id = %s", (delivered,)).fetchone()[0]
    assert attempts == 1  # numbered on: the next attempt is 2
    again = endpoints.replay(engine, ep.id, since="1h")  # nothing twice
    assert again.inserted == 0 and db.execute("SELECT count(*) FROM wa_outbox.deliveries").fetchone()[0] == 3
    assert failed


def test_replay_failed_only(engine, ep_settings, db):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    ok = make_delivery(db, ep.id, add_event(db), "delivered", [(200, 5.0)])
    bad = make_delivery(db, ep.id, add_event(db), "failed", [(500, 5.0)])
    result = endpoints.replay(engine, ep.id, failed_only=True)
    assert (result.requeued, result.inserted) == (1, 0)
    assert dict(db.execute("SELECT id, status FROM wa_outbox.deliveries").fetchall()) == {ok: "delivered",
                                                                                          bad: "queued"}


@pytest.mark.parametrize("since", ["yesterday", "", "12x", "2026-13-01"])
def test_replay_refuses_a_bad_time(engine, ep_settings, db, since):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    with pytest.raises(endpoints.EndpointError):
        endpoints.replay(engine, ep.id, since=since)


def test_replay_needs_since_or_failed_only(engine, ep_settings):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    with pytest.raises(endpoints.EndpointError, match="--since"):
        endpoints.replay(engine, ep.id)


# --- the CLI ---------------------------------------------------------------------------------------------------------

def test_cli_add_prints_the_secret_once_and_never_again(ep_run, db):
    r = ep_run("endpoints", "add", URL, "--events", "message.received", "--ordered", "--description", "crm",
               "--json")
    assert r.exit_code == 0, r.output
    made = json.loads(r.stdout)
    assert made["secret"].startswith("whsec_") and made["id"].startswith("ep_")
    assert made["url"] == URL and made["events"] == ["message.received"] and made["ordered"] is True
    outputs = [ep_run("endpoints", *args) for args in (
        ("list",), ("list", "--json"), ("show", made["id"]), ("show", made["id"], "--json"),
        ("disable", made["id"]), ("enable", made["id"], "--json"), ("deliveries", made["id"]),
        ("deliveries", made["id"], "--failed", "--json"))]
    for out in outputs:
        assert out.exit_code == 0, out.output
        assert made["secret"] not in out.output and made["secret"][6:] not in out.output
    assert made["id"] in outputs[0].output and json.loads(outputs[1].stdout)["id"] == made["id"]
    assert "message.received" in outputs[2].output and fingerprint(made["secret"]) in outputs[2].output
    assert "enabled → disabled" in outputs[4].output and json.loads(outputs[5].stdout)["state"] == "enabled"

    plain = ep_run("endpoints", "add", URL)
    assert plain.exit_code == 0 and "secret whsec_" in plain.stdout


def test_cli_rotate_replay_remove(ep_run, db):
    made = json.loads(ep_run("endpoints", "add", URL, "--json").stdout)
    rotated = ep_run("endpoints", "rotate-secret", made["id"], "--overlap", "1", "--json")
    assert rotated.exit_code == 0, rotated.output
    new = json.loads(rotated.stdout)
    assert new["secret"] != made["secret"] and new["secret_fingerprint"] == fingerprint(new["secret"])
    replayed = ep_run("endpoints", "replay", made["id"], "--since", "2026-01-01T00:00:00Z", "--json")
    assert replayed.exit_code == 0 and json.loads(replayed.stdout) == {"id": made["id"], "requeued": 0,
                                                                       "inserted": 0}
    assert "deliveries queued" in ep_run("endpoints", "replay", made["id"], "--failed-only").output
    assert ep_run("endpoints", "remove", made["id"]).exit_code == 0
    assert endpoint_rows(db) == []


@pytest.mark.parametrize("args, fragment", [
    (("add", "http://receiver.example.com/"), "must be https"),
    (("add", "https://192.168.1.10/"), "private address"),
    (("add", URL, "--events", "message.nope"), "unknown event type"),
    (("show", "ep_nope1234"), "no endpoint ep_nope1234"),
    (("disable", "ep_nope1234"), "no endpoint"),
    (("remove", "nope"), "no endpoint"),
    (("rotate-secret", "ep_nope1234"), "no endpoint"),
    (("deliveries", "ep_nope1234"), "no endpoint"),
    (("replay", "ep_nope1234", "--failed-only"), "no endpoint"),
])
def test_cli_refuses_bad_input_in_one_line_and_changes_nothing(ep_run, db, args, fragment):
    existing = json.loads(ep_run("endpoints", "add", URL, "--json").stdout)
    before = endpoint_rows(db)
    r = ep_run("endpoints", *args)
    assert r.exit_code != 0 and fragment in r.output, r.output
    assert r.output.startswith("wa-outbox: ") and r.output.count("\n") == 1 and "Traceback" not in r.output
    assert endpoint_rows(db) == before and existing["secret"] not in r.output


def test_cli_without_the_secret_key(ep_run, db):
    r = ep_run("endpoints", "add", URL, key=None)
    assert r.exit_code == 2 and "WA_OUTBOX_SECRET_KEY is not set" in r.output and r.output.count("\n") == 1
    assert endpoint_rows(db) == []


def test_cli_private_url_allowed_in_development(ep_run):
    r = ep_run("endpoints", "add", "http://127.0.0.1:9999/", "--json", allow_private=True)
    assert r.exit_code == 0 and json.loads(r.stdout)["url"] == "http://127.0.0.1:9999/"


def test_replay_row_is_typed(engine, ep_settings):
    ep = endpoints.add(engine, ep_settings, url=URL).endpoint
    assert isinstance(endpoints.replay(engine, ep.id, failed_only=True), queries.Replayed)
