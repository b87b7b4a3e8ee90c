"""Sends from many numbers: the sender chosen at enqueue (a phone number id or an alias, the default when there is
one) in every path, and the worker sending each message with its own sender's token through the simulator, which
accepts only each number's own token; rotation, revocation and a missing token pause or spare only that sender."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import psycopg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from tests.conftest import API_TOKEN, APP_SECRET
from tests.live import running_worker, wait_for, worker_settings
from wa_outbox import cli, db as wa_db, enqueue, enqueue_many
from wa_outbox.config import ConfigError
from wa_outbox.secret_box import SecretBox, fingerprint, generate_key
from wa_outbox.simulator import SimulatorServer
from wa_outbox.worker import Worker

KEY = generate_key()
BOX = SecretBox([KEY])
TEXT = {"type": "text", "text": {"body": "Olá"}}
TO = "+5511987654321"
A, B = "5001", "5002"
TOKENS = {A: "token-of-5001-aaaa", B: "token-of-5002-bbbb"}
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def register(db, *numbers: str, aliases: dict[str, str] | None = None, refs: dict[str, str] | None = None) -> None:
    """Apps 111 and 222, WABAs 901 (app 111) and 902 (app 222); each number in its own WABA, its token encrypted
    (or, for `refs`, the name of the variable holding it)."""
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111'), ('222') ON CONFLICT DO NOTHING")
    # Both apps sign with the test app secret (as the simulator below does), read from a variable by the web app,
    # which holds no WA_OUTBOX_SECRET_KEY: a body for an app's WABA must verify under that app's own secret.
    os.environ["WA_OUTBOX_TEST_APP_SECRET"] = APP_SECRET
    db.execute("INSERT INTO wa_outbox.app_secrets (app_id, secret_ref, fingerprint) SELECT a, "
               "'WA_OUTBOX_TEST_APP_SECRET', %s FROM unnest(ARRAY['111', '222']) a "
               "WHERE NOT EXISTS (SELECT FROM wa_outbox.app_secrets s WHERE s.app_id = a)", (fingerprint(APP_SECRET),))
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES ('901', '111'), ('902', '222') "
               "ON CONFLICT DO NOTHING")
    for i, number in enumerate(numbers):
        alias = (aliases or {}).get(number)
        waba = "901" if i % 2 == 0 else "902"
        if number in (refs or {}):
            db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, alias, token_ref) "
                       "VALUES (%s, %s, %s, %s)", (number, waba, alias, refs[number]))
        else:
            db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, alias, token_enc, token_fingerprint) "
                       "VALUES (%s, %s, %s, %s, %s)", (number, waba, alias, BOX.encrypt(TOKENS[number]),
                                                       fingerprint(TOKENS[number])))


def set_token(db, number: str, token: str, *, notify: bool) -> None:
    """What `wa-outbox senders set-token` does: the new token and its time, and (in the same transaction) the
    registry's NOTIFY (the registry tables' trigger sends it). notify=False: a change the workers did not hear of
    (a listener reconnecting), made with the session's triggers off."""
    with db.transaction():
        if not notify:
            db.execute("SET LOCAL session_replication_role = replica")  # no trigger fires: no NOTIFY
        db.execute("UPDATE wa_outbox.senders SET token_enc = %s, token_fingerprint = %s, token_updated_at = now() "
                   "WHERE phone_number_id = %s", (BOX.encrypt(token), fingerprint(token), number))
        if notify:
            db.execute("SELECT pg_notify('wa_outbox_registry', '')")


def sim_numbers(tokens: dict[str, str | None]) -> dict:
    return {number: {"token": token, "app": "111" if number == A else "222", "waba": "901" if number == A else "902"}
            for number, token in tokens.items()}


@pytest.fixture
def accounts_sim(receiver_url):
    """The simulator with numbers A and B of their own (apps signing with the test app secret, which the web app
    verifies today)."""
    with SimulatorServer(access_token="test-access-token", app_secret=APP_SECRET,
                         webhook_url=f"{receiver_url}/webhooks/whatsapp", status_delays_ms=(20, 40, 60), seed=7,
                         apps={"111": {"secret": APP_SECRET}, "222": {"secret": APP_SECRET}},
                         numbers=sim_numbers(TOKENS)) as server:
        yield server


@pytest.fixture
def keyed(settings):
    """The worker's settings with the secret key and no single-number environment at all."""
    return dataclasses.replace(settings, secret_keys=(KEY,), access_token=None, phone_number_id=None)


@pytest.fixture
def engine(settings):
    engine = wa_db.create_engine(settings.database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def rows(db) -> list[tuple]:
    return db.execute("SELECT phone_number_id, status FROM wa_outbox.notifications ORDER BY id").fetchall()


def count(db, sql: str, params=()) -> int:
    return db.execute(sql, params).fetchone()[0]


def cli_run(database_url, *args: str, env: dict | None = None):
    """The CLI without WHATSAPP_PHONE_NUMBER_ID (several senders, no environment sender)."""
    return CliRunner().invoke(cli.main, list(args), env={"DATABASE_URL": database_url,
                                                         "WHATSAPP_PHONE_NUMBER_ID": None, **(env or {})},
                              catch_exceptions=False)


# --- the sender at enqueue --------------------------------------------------------------------------------------------

def every_path(db, client, database_url, tmp_path, engine, sender):
    """Queue one message from `sender` (None: none named) by each path; the outcome of each, in order."""
    outcomes = []
    extra = {} if sender is None else {"phone_number_id": sender}

    def attempt(name, action):
        try:
            action()
            outcomes.append((name, None))
        except (psycopg.Error, sa.exc.DBAPIError, AssertionError) as exc:
            outcomes.append((name, str(exc).splitlines()[0]))

    def sql_one():
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb, phone_number_id => %s)",
                         (TO, json.dumps(TEXT), sender))

    def sql_many():
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps([{"to": TO, "message": TEXT,
                                                                                    **extra}]),))

    def python_one():
        with engine.begin() as conn:
            enqueue(conn, to=TO, message=TEXT, phone_number_id=sender)

    def python_many():
        with psycopg.connect(database_url) as conn:
            enqueue_many(conn, [{"to": TO, "message": TEXT, **extra}] * 2)

    def http():
        r = client.post("/v1/messages", json={"to": TO, "message": TEXT, **extra}, headers=AUTH)
        assert r.status_code == 202, r.json["error"]["message"]

    def command():
        r = cli_run(database_url, "send", "--to", TO, "--text", "Olá", *(["--phone-number-id", sender] if sender
                                                                          else []))
        assert r.exit_code == 0, r.output.strip().splitlines()[-1]

    def campaign():
        path = tmp_path / "c.csv"
        path.write_text("to,body.1\n+5511987654322,Ana\n")
        r = cli_run(database_url, "campaign", "import", str(path), "--name", f"c-{sender}", "--template", "promo",
                    "--lang", "pt_BR", *(["--phone-number-id", sender] if sender else []))
        assert r.exit_code == 0, r.output.strip().splitlines()[-1]

    for name, action in (("sql enqueue", sql_one), ("sql enqueue_many", sql_many), ("python enqueue", python_one),
                         ("python enqueue_many", python_many), ("http", http), ("cli send", command),
                         ("campaign", campaign)):
        attempt(name, action)
    return outcomes


def test_an_alias_stands_for_its_number_in_every_path(db, client, database_url, tmp_path, engine):
    register(db, A, B, aliases={A: "brand-a"})
    assert [problem for _, problem in every_path(db, client, database_url, tmp_path, engine, "brand-a")] == \
        [None] * 7
    assert {number for number, _ in rows(db)} == {A}
    assert count(db, "SELECT count(*) FROM wa_outbox.notifications") == 8
    assert count(db, "SELECT count(*) FROM wa_outbox.campaigns WHERE phone_number_id = %s", (A,)) == 1
    # a phone number id is taken as given, registered or not (an unregistered one sends with WHATSAPP_ACCESS_TOKEN)
    assert [p for _, p in every_path(db, client, database_url, tmp_path, engine, "100000000000009")] == [None] * 7


def test_an_unknown_alias_is_refused_in_every_path_and_nothing_is_written(db, client, database_url, tmp_path,
                                                                           engine):
    register(db, A, B, aliases={A: "brand-a"})
    for name, problem in every_path(db, client, database_url, tmp_path, engine, "brand-z"):
        assert problem and "no sender has the alias brand-z" in problem, (name, problem)
    assert rows(db) == [] and count(db, "SELECT count(*) FROM wa_outbox.campaigns") == 0


def test_several_senders_and_no_default_refuse_a_message_without_one(db, client, database_url, tmp_path, engine):
    register(db, A, B)
    for name, problem in every_path(db, client, database_url, tmp_path, engine, None):
        assert problem and "several senders are registered and no default is set: give phone_number_id or an " \
                           "alias" in problem, (name, problem)
    assert rows(db) == [] and count(db, "SELECT count(*) FROM wa_outbox.campaigns") == 0
    r = client.post("/v1/messages", json={"to": TO, "message": TEXT}, headers=AUTH)
    assert r.status_code == 400 and "several senders" in r.json["error"]["message"]


def test_the_recorded_default_wins_over_several_senders(db, client, database_url, tmp_path, engine, sender):
    register(db, A, B)
    assert [p for _, p in every_path(db, client, database_url, tmp_path, engine, None)] == [None] * 7
    assert {number for number, _ in rows(db)} == {"100000000000001"}


def test_the_only_registered_sender_is_the_default(db, client, database_url, tmp_path, engine):
    register(db, B)
    assert [p for _, p in every_path(db, client, database_url, tmp_path, engine, None)] == [None] * 7
    assert {number for number, _ in rows(db)} == {B}


def test_resolve_sender_is_the_one_rule(db):
    register(db, A, B, aliases={B: "brand-b"})
    resolve = "SELECT wa_outbox.resolve_sender(%s)"
    assert db.execute(resolve, ("brand-b",)).fetchone()[0] == B
    assert db.execute(resolve, ("42",)).fetchone()[0] == "42"
    for bad, words in ((None, "several senders"), ("nope", "no sender has the alias nope"),
                       ("12a", "must be the numeric id")):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=words):
            db.execute(resolve, (bad,))


# --- the token per sender at send -------------------------------------------------------------------------------------

def sent_by(sim, number: str) -> int:
    return len(sim.messages(phone_number_id=number))


def test_each_sender_sends_with_its_own_token(db, accounts_sim, keyed, monkeypatch):
    monkeypatch.setenv("TOKEN_OF_B", TOKENS[B])
    register(db, A, B, aliases={A: "brand-a"}, refs={B: "TOKEN_OF_B"})
    with db.transaction():
        for i in range(3):
            enqueue(db, to=f"+55119876543{i:02d}", message=TEXT, phone_number_id="brand-a")
            enqueue(db, to=f"+55119876543{i:02d}", message=TEXT, phone_number_id=B)
    with running_worker(worker_settings(keyed, accounts_sim.base_url)):  # no WHATSAPP_ACCESS_TOKEN at all
        wait_for(lambda: count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'read'") == 6,
                 what="every message read")
    assert (sent_by(accounts_sim, A), sent_by(accounts_sim, B)) == (3, 3)
    outcomes = accounts_sim.stats()["outcomes"]
    assert "unauthorized" not in outcomes and "no_access" not in outcomes  # each number saw only its own token


def test_a_token_rotated_mid_run_is_used_from_the_next_send_without_a_dead_letter(db, accounts_sim, keyed):
    register(db, A)
    with running_worker(worker_settings(keyed, accounts_sim.base_url)) as worker:
        enqueue(db, to=TO, message=TEXT, phone_number_id=A)
        wait_for(lambda: sent_by(accounts_sim, A) == 1, what="the first send")
        # Meta now takes only the new token; the worker still holds the old one (no NOTIFY yet): the send is
        # refused with 190, the worker finds the token changed, and sends again with the new one.
        accounts_sim.configure(numbers=sim_numbers({A: "rotated-token-1"}))
        set_token(db, A, "rotated-token-1", notify=False)
        enqueue(db, to="+5511987654322", message=TEXT, phone_number_id=A)
        wait_for(lambda: sent_by(accounts_sim, A) == 2, what="the send after the rotation")
        assert accounts_sim.stats()["outcomes"]["unauthorized"] == 1
        # A rotation announced by NOTIFY: the next send already carries the new token.
        accounts_sim.configure(numbers=sim_numbers({A: "rotated-token-2"}))
        set_token(db, A, "rotated-token-2", notify=True)
        wait_for(lambda: not worker.sender.tokens.cached(A), what="the cached token dropped")
        enqueue(db, to="+5511987654323", message=TEXT, phone_number_id=A)
        wait_for(lambda: sent_by(accounts_sim, A) == 3, what="the send after the announced rotation")
    assert accounts_sim.stats()["outcomes"]["unauthorized"] == 1  # no refusal this time
    assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'dead'") == 0
    assert count(db, "SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'sender_paused'") == 0
    assert count(db, "SELECT max(attempts) FROM wa_outbox.notifications") == 1


def test_a_revoked_token_pauses_only_its_sender_with_an_alert_naming_it(db, accounts_sim, keyed, caplog):
    register(db, A, B)
    accounts_sim.configure(numbers=sim_numbers({A: None}))  # A's token revoked
    with db.transaction():
        for i in range(3):
            enqueue(db, to=f"+55119876543{i:02d}", message=TEXT, phone_number_id=A)
            enqueue(db, to=f"+55119876543{i:02d}", message=TEXT, phone_number_id=B)
    with caplog.at_level(logging.WARNING, logger="wa_outbox.worker"):
        with running_worker(worker_settings(keyed, accounts_sim.base_url)) as worker:
            wait_for(lambda: sent_by(accounts_sim, B) == 3, what="B's messages")
            wait_for(lambda: count(db, "SELECT count(*) FROM wa_outbox.rate_limits WHERE phone_number_id = %s "
                                       "AND paused_until > now()", (A,)), what="A paused")
            metrics = worker.metrics.snapshot()
    assert sent_by(accounts_sim, A) == 0
    paused = db.execute("SELECT phone_number_id, pause_reason FROM wa_outbox.rate_limits WHERE paused_until > now()"
                        ).fetchall()
    assert [p[0] for p in paused] == [A] and paused[0][1].startswith("190")
    alerts = [r for r in caplog.records if getattr(r, "alert", None) == "sender_paused"]
    assert alerts and {r.phone_number_id for r in alerts} == {A} and A in alerts[0].getMessage()
    assert metrics[("wa_outbox_sender_alerts_total", json.dumps({"phone_number_id": A}))] >= 1
    assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'dead'") == 0
    for record in caplog.records:  # no token in any line
        assert all(token not in record.getMessage() for token in TOKENS.values())


def test_another_numbers_token_is_refused_as_meta_does_and_pauses_that_sender(db, accounts_sim, keyed):
    register(db, A, B)
    set_token(db, A, TOKENS[B], notify=False)  # a misconfiguration: A registered with B's token
    enqueue(db, to=TO, message=TEXT, phone_number_id=A)
    with running_worker(worker_settings(keyed, accounts_sim.base_url)):
        wait_for(lambda: count(db, "SELECT count(*) FROM wa_outbox.notification_events WHERE event = "
                                   "'sender_paused'"), what="A paused")
    assert accounts_sim.stats()["outcomes"]["no_access"] == 1
    reason = db.execute("SELECT pause_reason FROM wa_outbox.rate_limits WHERE phone_number_id = %s",
                        (A,)).fetchone()[0]
    assert reason.startswith("100: ") and "missing permissions" in reason
    assert rows(db) == [(A, "queued")]


def test_a_sender_without_a_token_is_paused_with_the_reason_and_the_worker_goes_on(db, accounts_sim, keyed,
                                                                                     monkeypatch):
    monkeypatch.delenv("UNSET_TOKEN_VARIABLE", raising=False)
    register(db, A, B, refs={A: "UNSET_TOKEN_VARIABLE"})
    enqueue(db, to=TO, message=TEXT, phone_number_id=A)
    enqueue(db, to=TO, message=TEXT, phone_number_id=B)
    with running_worker(worker_settings(keyed, accounts_sim.base_url)):
        wait_for(lambda: sent_by(accounts_sim, B) == 1, what="B's message")
        wait_for(lambda: count(db, "SELECT count(*) FROM wa_outbox.rate_limits WHERE phone_number_id = %s "
                                   "AND paused_until > now()", (A,)), what="A paused")
    reason = db.execute("SELECT pause_reason FROM wa_outbox.rate_limits WHERE phone_number_id = %s",
                        (A,)).fetchone()[0]
    assert "no access token" in reason and "UNSET_TOKEN_VARIABLE is not set" in reason
    assert accounts_sim.stats()["requests"] == 1  # nothing was sent for A


def test_the_worker_starts_without_whatsapp_access_token_once_a_sender_is_registered(db, keyed):
    worker = Worker(keyed)
    try:
        with pytest.raises(ConfigError) as refused:
            worker.require_credentials()
        message = str(refused.value)
        assert "\n" not in message and "WHATSAPP_ACCESS_TOKEN" in message and "wa-outbox senders add" in message
        register(db, A)
        worker.require_credentials()
    finally:
        worker.engine.dispose()
