"""The registry as load() and token_of() read it: the environment's registry of one, registered apps, business
accounts and senders, secrets encrypted or referenced."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from wa_outbox import db as wa_db, registry
from wa_outbox.secret_box import SecretBox, SecretKeyMissing, fingerprint, generate_key

KEY = generate_key()


@pytest.fixture
def engine(settings):
    engine = wa_db.create_engine(settings.database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def register(db, box: SecretBox) -> None:
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111'), ('222')")
    db.execute("INSERT INTO wa_outbox.app_secrets (app_id, secret_enc, fingerprint) VALUES ('111', %s, %s)",
               (box.encrypt("secret-of-111"), fingerprint("secret-of-111")))
    db.execute("INSERT INTO wa_outbox.app_secrets (app_id, secret_ref, fingerprint) VALUES ('222', 'APP_222', 'x')")
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id, portfolio_id) VALUES ('901', '111', '77'),"
               " ('902', '222', NULL)")
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, alias, token_enc, token_fingerprint) "
               "VALUES ('5001', '901', 'brand-a', %s, %s)", (box.encrypt("token-5001"), fingerprint("token-5001")))
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_ref) VALUES ('5002', '902', 'TOK_2')")


def test_the_environment_alone_is_a_registry_of_one(engine, settings):
    found = registry.load(engine, settings)
    assert found.default_sender == settings.phone_number_id
    assert [s.app_id for s in found.app_secrets] == [None]
    assert registry.token_of(engine, settings, "5001") == settings.access_token  # unregistered: the env's token
    assert found.resolve_sender(None) == settings.phone_number_id


def test_registered_apps_and_senders(engine, settings, db, monkeypatch):
    box = SecretBox([KEY])
    register(db, box)
    monkeypatch.setenv("APP_222", "secret-of-222")
    monkeypatch.setenv("TOK_2", "token-5002")
    mine = dataclasses.replace(settings, secret_keys=(KEY,), phone_number_id=None)
    found = registry.load(engine, mine)
    assert {(s.app_id, s.secret) for s in found.app_secrets} == {
        (None, settings.app_secret), ("111", "secret-of-111"), ("222", "secret-of-222")}
    assert found.default_sender is None  # two senders, no default
    assert found.resolve_sender("brand-a") == "5001"
    with pytest.raises(registry.UnknownSender):
        found.resolve_sender("brand-z")
    assert found.app_of_waba("902") == "222" and found.senders["5001"].portfolio_id == "77"
    assert registry.token_of(engine, mine, "5001") == "token-5001"
    assert registry.token_of(engine, mine, "5002") == "token-5002"
    assert "token-5001" not in repr(found) and "secret-of-111" not in repr(found)


def test_an_encrypted_secret_without_the_key_is_a_clear_error(engine, settings, db):
    register(db, SecretBox([KEY]))
    with pytest.raises(SecretKeyMissing, match="WA_OUTBOX_SECRET_KEY"):
        registry.load(engine, settings)


def test_a_load_sees_the_registry_of_one_moment(engine, settings, db, monkeypatch):
    """An app and its sender registered while a load runs (the web's reload on each NOTIFY): the load sees both or
    neither, never the sender without its app's secret (CI saw the web refuse a new number's webhooks so)."""
    from wa_outbox import queries

    box = SecretBox([KEY])
    read = queries.registry_app_secrets
    registered = []

    this_thread = threading.get_ident()  # a shared app's registry thread may read meanwhile: not its reads

    def then_register(conn):
        rows = read(conn)
        if threading.get_ident() == this_thread and not registered:
            register(db, box)  # the secrets are read: now register, committed, before the senders are read
            registered.append(True)
        return rows

    monkeypatch.setattr(queries, "registry_app_secrets", then_register)
    settings = dataclasses.replace(settings, secret_keys=(KEY,))
    found = registry.load(engine, settings)
    assert registered and "5001" not in found.senders and not found.business_accounts
    assert "5001" in registry.load(engine, settings).senders  # the next load sees all of it


def test_a_load_gives_way_to_a_statement_that_locks_the_registry(engine, settings, database_url):
    """A migration or TRUNCATE locking the registry's tables exclusively, in another order than the load reads them,
    would deadlock with the load's snapshot: the load gives way (LockNotAvailable, after a few tries) instead of
    holding its first lock while it waits, and loads once the lock is gone."""
    import psycopg

    with psycopg.connect(database_url) as locker:
        locker.execute("LOCK TABLE wa_outbox.business_accounts IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            registry.load(engine, settings)
    assert registry.load(engine, settings).default_sender == settings.phone_number_id
