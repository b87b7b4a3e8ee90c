"""The registry's administration (wa_outbox/accounts.py) on real Postgres: each operation, each refusal changing
nothing, the notification every change sends at commit, and re-encrypting every stored secret under a new key."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from wa_outbox import accounts, db as wa_db, registry
from wa_outbox.accounts import AccountConflict, AccountNotFound, InvalidAccount, Secret
from wa_outbox.secret_box import SecretBox, SecretKeyMissing, SecretUnreadable, fingerprint, generate_key

KEY, NEW_KEY = generate_key(), generate_key()
SECRET_A, SECRET_A2, SECRET_B = "app-secret-aaaa-1111", "app-secret-aaaa-2222", "app-secret-bbbb-3333"
TOKEN_1, TOKEN_2 = "EAAG-token-one-111111", "EAAG-token-two-222222"
TABLES = ("meta_apps", "app_secrets", "business_accounts", "senders", "rate_limits")


@pytest.fixture
def engine(settings):
    engine = wa_db.create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def keyed(settings):
    return dataclasses.replace(settings, secret_keys=(KEY,))


@pytest.fixture
def secrets_env(monkeypatch):
    for name, value in (("SECRET_A", SECRET_A), ("SECRET_A2", SECRET_A2), ("SECRET_B", SECRET_B),
                        ("TOKEN_1", TOKEN_1), ("TOKEN_2", TOKEN_2)):
        monkeypatch.setenv(name, value)


def snapshot(db) -> dict[str, list[tuple]]:
    return {t: db.execute(f"SELECT * FROM wa_outbox.{t} ORDER BY 1").fetchall() for t in TABLES}


def two_apps(engine, keyed) -> None:
    accounts.add_app(engine, keyed, app_id="111", secret=Secret.from_env("SECRET_A"), name="Brand A")
    accounts.add_app(engine, keyed, app_id="222", secret=Secret.reference("SECRET_B"))
    accounts.add_sender(engine, keyed, phone_number_id="5001", waba_id="901", app_id="111",
                        token=Secret.from_env("TOKEN_1"), portfolio_id="77", mps=20, alias="brand-a",
                        display_phone_number="+1 555-0100")
    accounts.add_sender(engine, keyed, phone_number_id="5002", waba_id="902", app_id="222",
                        token=Secret.reference("TOKEN_2"))


def test_apps_and_senders_registered_are_what_the_registry_loads(engine, keyed, secrets_env, db):
    two_apps(engine, keyed)
    loaded = registry.load(engine, dataclasses.replace(keyed, phone_number_id=None))
    assert {(s.app_id, s.secret) for s in loaded.app_secrets if s.app_id} == {("111", SECRET_A), ("222", SECRET_B)}
    assert loaded.resolve_sender("brand-a") == "5001" and loaded.app_of_waba("902") == "222"
    assert registry.token_of(engine, keyed, "5001") == TOKEN_1 and registry.token_of(engine, keyed, "5002") == TOKEN_2
    # at rest: encrypted, or only the variable's name
    stored = db.execute("SELECT phone_number_id, token_enc, token_ref FROM wa_outbox.senders ORDER BY 1").fetchall()
    assert stored[0][1] is not None and TOKEN_1.encode() not in bytes(stored[0][1]) and stored[0][2] is None
    assert stored[1][1] is None and stored[1][2] == "TOKEN_2"
    assert db.execute("SELECT mps, burst FROM wa_outbox.rate_limits WHERE phone_number_id = '5001'").fetchone() \
        == (20, None)

    app = accounts.app(engine, "111")
    assert (app.name, app.secret_fingerprint, app.secret_ref, app.business_accounts, app.senders) == \
        ("Brand A", fingerprint(SECRET_A), None, ["901"], 1)
    assert accounts.app(engine, "222").secret_ref == "SECRET_B"
    listed = {s.phone_number_id: s for s in accounts.senders(engine, keyed)}
    assert set(listed) == {"5001", "5002", keyed.phone_number_id}
    one, two, env = listed["5001"], listed["5002"], listed[keyed.phone_number_id]
    assert (one.alias, one.waba_id, one.app_id, one.portfolio_id, one.token_source, one.token_fingerprint, one.mps,
            one.display_phone_number) == ("brand-a", "901", "111", "77", "encrypted", fingerprint(TOKEN_1), 20,
                                          "+1 555-0100")
    assert two.token_source == "env:TOKEN_2" and two.mps is None and not two.from_environment
    assert env.from_environment and env.token_source == "env:WHATSAPP_ACCESS_TOKEN" and env.waba_id is None


def test_adding_again_is_an_update_and_the_same_app_secret_changes_nothing(engine, keyed, secrets_env, db):
    two_apps(engine, keyed)
    before = snapshot(db)
    _, created = accounts.add_app(engine, keyed, app_id="111", secret=Secret.reference("SECRET_A"))
    assert not created and snapshot(db) == before
    row, created = accounts.add_sender(engine, keyed, phone_number_id="5001", waba_id="901", app_id="111",
                                       token=Secret.reference("TOKEN_2"))
    assert not created and (row.alias, row.portfolio_id, row.token_source) == ("brand-a", "77", "env:TOKEN_2")
    # moved to another WABA of the same app: the emptied one goes
    accounts.add_sender(engine, keyed, phone_number_id="5001", waba_id="903", app_id="111", token=Secret.given("t-x"))
    assert [r[0] for r in db.execute("SELECT waba_id FROM wa_outbox.business_accounts ORDER BY 1")] == ["902", "903"]


def test_rotating_an_app_secret_keeps_the_previous_one_for_the_overlap(engine, keyed, secrets_env, db):
    two_apps(engine, keyed)
    rotated = accounts.rotate_app_secret(engine, keyed, app_id="111", secret=Secret.from_env("SECRET_A2"),
                                         overlap_hours=2)
    assert rotated.secret_fingerprint == fingerprint(SECRET_A2)
    assert rotated.previous_fingerprint == fingerprint(SECRET_A)
    verifying = {s.secret for s in registry.load(engine, keyed).app_secrets if s.app_id == "111"}
    assert verifying == {SECRET_A, SECRET_A2}
    # rotating again: the one rotated out first stops at once (at most two verify)
    accounts.rotate_app_secret(engine, keyed, app_id="111", secret=Secret.given("app-secret-aaaa-3333"))
    verifying = {s.secret for s in registry.load(engine, keyed).app_secrets if s.app_id == "111"}
    assert verifying == {SECRET_A2, "app-secret-aaaa-3333"}
    # no overlap: only the new one
    accounts.rotate_app_secret(engine, keyed, app_id="111", secret=Secret.given(SECRET_A), overlap_hours=0)
    assert {s.secret for s in registry.load(engine, keyed).app_secrets if s.app_id == "111"} == {SECRET_A}
    assert db.execute("SELECT count(*) FROM wa_outbox.app_secrets WHERE app_id = '111'").fetchone()[0] == 1


def test_a_referenced_secret_rotates_through_another_variable(engine, keyed, secrets_env, db, monkeypatch):
    """Both secrets of an overlap must verify: rotating to the variable the current one is read from would leave
    only the new value (refused, unless the overlap is 0)."""
    two_apps(engine, keyed)
    monkeypatch.setenv("SECRET_B", "app-secret-bbbb-changed")
    before = snapshot(db)
    with pytest.raises(AccountConflict, match="another variable"):
        accounts.rotate_app_secret(engine, keyed, app_id="222", secret=Secret.reference("SECRET_B"))
    assert snapshot(db) == before
    accounts.rotate_app_secret(engine, keyed, app_id="222", secret=Secret.reference("SECRET_B"), overlap_hours=0)
    monkeypatch.setenv("SECRET_B2", "app-secret-bbbb-next")
    accounts.rotate_app_secret(engine, keyed, app_id="222", secret=Secret.reference("SECRET_B2"))
    verifying = {s.secret for s in registry.load(engine, keyed).app_secrets if s.app_id == "222"}
    assert verifying == {"app-secret-bbbb-changed", "app-secret-bbbb-next"}


def test_set_token_and_remove(engine, keyed, secrets_env, db):
    two_apps(engine, keyed)
    accounts.set_token(engine, keyed, phone_number_id="5002", token=Secret.from_env("TOKEN_1"))
    assert registry.token_of(engine, keyed, "5002") == TOKEN_1
    assert accounts.sender(engine, keyed, "5002").token_source == "encrypted"
    assert accounts.remove_sender(engine, phone_number_id="5002") == "902"  # its WABA went with it
    accounts.remove_app(engine, app_id="222")
    assert [r[0] for r in db.execute("SELECT app_id FROM wa_outbox.meta_apps")] == ["111"]
    assert db.execute("SELECT count(*) FROM wa_outbox.app_secrets WHERE app_id = '222'").fetchone()[0] == 0


REFUSALS = [
    # (what, call, error, message fragment)
    ("bad app id", lambda e, s: accounts.add_app(e, s, app_id="12a", secret=Secret.given("x1")), InvalidAccount,
     "digits"),
    ("app already registered with another secret",
     lambda e, s: accounts.add_app(e, s, app_id="111", secret=Secret.given("other-secret")), AccountConflict,
     "rotate-secret"),
    ("rotate an unknown app", lambda e, s: accounts.rotate_app_secret(e, s, app_id="333", secret=Secret.given("x1")),
     AccountNotFound, "no app 333"),
    ("rotate to the current secret", lambda e, s: accounts.rotate_app_secret(e, s, app_id="111",
                                                                           secret=Secret.given(SECRET_A)),
     AccountConflict, "current secret"),
    ("a negative overlap", lambda e, s: accounts.rotate_app_secret(e, s, app_id="111", secret=Secret.given("x1"),
                                                                 overlap_hours=-1), InvalidAccount, "overlap"),
    ("remove an app with business accounts", lambda e, s: accounts.remove_app(e, app_id="111"), AccountConflict,
     "901"),
    ("remove an unknown app", lambda e, s: accounts.remove_app(e, app_id="999"), AccountNotFound, "999"),
    ("a WABA of another app", lambda e, s: accounts.add_sender(e, s, phone_number_id="5003", waba_id="901",
                                                             app_id="222", token=Secret.given("t1")),
     AccountConflict, "belongs to app 111"),
    ("an unknown app", lambda e, s: accounts.add_sender(e, s, phone_number_id="5003", waba_id="909", app_id="333",
                                                      token=Secret.given("t1")), AccountNotFound, "apps add"),
    ("an alias taken", lambda e, s: accounts.add_sender(e, s, phone_number_id="5003", waba_id="901", app_id="111",
                                                      token=Secret.given("t1"), alias="brand-a"),
     AccountConflict, "5001"),
    ("a bad alias", lambda e, s: accounts.add_sender(e, s, phone_number_id="5003", waba_id="901", app_id="111",
                                                   token=Secret.given("t1"), alias="9lives"), InvalidAccount, "alias"),
    ("a bad portfolio", lambda e, s: accounts.add_sender(e, s, phone_number_id="5003", waba_id="901", app_id="111",
                                                       token=Secret.given("t1"), portfolio_id="x"), InvalidAccount,
     "portfolio"),
    ("a rate of 0", lambda e, s: accounts.add_sender(e, s, phone_number_id="5003", waba_id="901", app_id="111",
                                                   token=Secret.given("t1"), mps=0), InvalidAccount, "mps"),
    ("set-token of an unknown sender",
     lambda e, s: accounts.set_token(e, s, phone_number_id="5999", token=Secret.given("t1")), AccountNotFound, "5999"),
    ("remove an unknown sender", lambda e, s: accounts.remove_sender(e, phone_number_id="5999"), AccountNotFound,
     "5999"),
    ("an unset variable", lambda e, s: accounts.add_app(e, s, app_id="333", secret=Secret.from_env("NOT_SET_VAR")),
     InvalidAccount, "NOT_SET_VAR"),
    ("an empty variable", lambda e, s: accounts.set_token(e, s, phone_number_id="5001",
                                                        token=Secret.reference("EMPTY_VAR")), InvalidAccount,
     "EMPTY_VAR"),
    ("a bad variable name", lambda e, s: accounts.add_app(e, s, app_id="333", secret=Secret.from_env("1; rm")),
     InvalidAccount, "variable"),
    ("an empty secret", lambda e, s: accounts.add_app(e, s, app_id="333", secret=Secret.given(" \n")),
     InvalidAccount, "empty"),
]


@pytest.mark.parametrize("what,call,error,fragment", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_each_refusal_changes_nothing_and_sends_no_notification(engine, keyed, secrets_env, db, monkeypatch,
                                                                what, call, error, fragment):
    monkeypatch.setenv("EMPTY_VAR", "  ")
    two_apps(engine, keyed)
    before = snapshot(db)
    with psycopg.connect(keyed.database_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {registry.CHANNEL}")
        with pytest.raises(error, match=fragment):
            call(engine, keyed)
        listener.execute("NOTIFY wa_outbox_registry, 'marker'")  # delivered after anything the call sent
        heard = [n.payload for n in listener.notifies(timeout=30, stop_after=1)]
    assert heard == ["marker"]
    assert snapshot(db) == before


def test_every_change_notifies_at_commit(engine, keyed, secrets_env, database_url):
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {registry.CHANNEL}")
        accounts.add_app(engine, keyed, app_id="111", secret=Secret.from_env("SECRET_A"))
        heard = list(listener.notifies(timeout=30, stop_after=1))
    assert [(n.channel, n.payload) for n in heard] == [("wa_outbox_registry", "")]


def test_storing_a_secret_without_the_key_is_refused_and_changes_nothing(engine, settings, secrets_env, db):
    assert not settings.secret_keys
    with pytest.raises(SecretKeyMissing, match="WA_OUTBOX_SECRET_KEY"):
        accounts.add_app(engine, settings, app_id="111", secret=Secret.from_env("SECRET_A"))
    assert snapshot(db) == {t: [] for t in TABLES}
    # a reference stores no secret: no key needed
    accounts.add_app(engine, settings, app_id="111", secret=Secret.reference("SECRET_A"))
    with pytest.raises(SecretKeyMissing):
        accounts.add_sender(engine, settings, phone_number_id="5001", waba_id="901", app_id="111",
                            token=Secret.from_env("TOKEN_1"))
    assert db.execute("SELECT count(*) FROM wa_outbox.business_accounts").fetchone()[0] == 0


def _endpoint(db, box: SecretBox, ident: str, secret: str, previous: str | None) -> None:
    db.execute("INSERT INTO wa_outbox.endpoints (id, url, secret_enc, secret_fingerprint, previous_secret_enc, "
               "previous_secret_until) VALUES (%s, 'https://example.com/hook', %s, %s, %s, now() + interval '1 h')",
               (ident, box.encrypt(secret), fingerprint(secret), previous and box.encrypt(previous)))


def test_rotate_key_re_encrypts_everything_under_the_new_key(engine, keyed, secrets_env, db):
    """The documented procedure: old key alone; new key added in front; rotate-key; old key dropped; everything
    still decrypts."""
    two_apps(engine, keyed)
    accounts.rotate_app_secret(engine, keyed, app_id="111", secret=Secret.from_env("SECRET_A2"))  # two secrets
    old = SecretBox([KEY])
    _endpoint(db, old, "ep_aaaaaaaa", "whsec_one", "whsec_zero")
    _endpoint(db, old, "ep_bbbbbbbb", "whsec_two", None)
    fingerprints = db.execute("SELECT fingerprint FROM wa_outbox.app_secrets ORDER BY id").fetchall()

    both = dataclasses.replace(keyed, secret_keys=(NEW_KEY, KEY))
    done = accounts.rotate_key(engine, both)
    assert (done.app_secrets, done.senders, done.endpoints) == (2, 1, 2)  # SECRET_B and TOKEN_2 are references

    new_only = dataclasses.replace(keyed, secret_keys=(NEW_KEY,))
    assert {s.secret for s in registry.load(engine, new_only).app_secrets if s.app_id} == {SECRET_A, SECRET_A2,
                                                                                           SECRET_B}
    assert registry.token_of(engine, new_only, "5001") == TOKEN_1
    new = SecretBox([NEW_KEY])
    endpoints = db.execute("SELECT secret_enc, previous_secret_enc FROM wa_outbox.endpoints ORDER BY id").fetchall()
    assert [(new.decrypt(e), p and new.decrypt(p)) for e, p in endpoints] == [("whsec_one", "whsec_zero"),
                                                                             ("whsec_two", None)]
    with pytest.raises(SecretUnreadable):
        old.decrypt(endpoints[0][0])
    assert db.execute("SELECT fingerprint FROM wa_outbox.app_secrets ORDER BY id").fetchall() == fingerprints


def test_rotate_key_without_the_old_key_changes_nothing(engine, keyed, secrets_env, db):
    two_apps(engine, keyed)
    before = snapshot(db)
    with pytest.raises(SecretUnreadable, match="app_secrets"):
        accounts.rotate_key(engine, dataclasses.replace(keyed, secret_keys=(NEW_KEY,)))
    assert snapshot(db) == before
    with pytest.raises(SecretKeyMissing):
        accounts.rotate_key(engine, dataclasses.replace(keyed, secret_keys=()))


def test_a_pg_dump_holds_no_secret(engine, keyed, secrets_env, database_url):
    import subprocess

    from tests.processes import pg_dump_for
    pg_dump = pg_dump_for(database_url)
    if pg_dump is None:
        pytest.skip("no pg_dump as new as the server is installed")
    two_apps(engine, keyed)
    accounts.rotate_app_secret(engine, keyed, app_id="111", secret=Secret.from_env("SECRET_A2"))
    dumped = subprocess.run([pg_dump, "--data-only", "--schema", "wa_outbox", database_url], capture_output=True,
                            text=True, timeout=120, check=True).stdout
    assert "5001" in dumped and "TOKEN_2" in dumped  # the rows are there, a reference by its name
    assert not [v for v in (SECRET_A, SECRET_A2, SECRET_B, TOKEN_1, TOKEN_2, KEY) if v in dumped]
