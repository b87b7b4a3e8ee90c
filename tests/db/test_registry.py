"""The registry as load() and token_of() read it: the environment's registry of one, registered apps, business
accounts and senders, secrets encrypted or referenced."""

from __future__ import annotations

import dataclasses

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
