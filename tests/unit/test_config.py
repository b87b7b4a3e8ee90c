"""Configuration parsing and validation. No database."""

from __future__ import annotations

import pytest

from wa_outbox.config import DEFAULT_GRAPH_API_BASE_URL, ConfigError, Settings, redact_url, scrub

WEB_ENV = {"DATABASE_URL": "postgres://u:p@db.example:5432/app", "WHATSAPP_APP_SECRET": "s",
           "WHATSAPP_VERIFY_TOKEN": "v", "WA_OUTBOX_API_TOKENS": "a" * 16 + ", " + "b" * 20}


def test_defaults_and_heroku_url():
    s = Settings.from_env(WEB_ENV).require_web()
    assert s.database_url == "postgresql://u:p@db.example:5432/app"
    assert s.api_tokens == ("a" * 16, "b" * 20)
    assert s.api_base_url == DEFAULT_GRAPH_API_BASE_URL and s.rate_limit_mps == 80 and s.port == 8000
    assert s.webhook_max_bytes > 3 * 1024 * 1024


def test_secrets_are_not_in_repr():
    s = Settings.from_env({**WEB_ENV, "WHATSAPP_ACCESS_TOKEN": "EAAG-secret-token"})
    text = repr(s)
    assert "EAAG-secret-token" not in text and "a" * 16 not in text  # tokens not shown
    assert "database_url='postgresql://u:***@db.example:5432/app'" in text  # the URL shown, its password not


@pytest.mark.parametrize("name, value, fragment", [
    ("DATABASE_URL", "mysql://x", "DATABASE_URL='mysql://x' is not valid"),
    ("WA_OUTBOX_RATE_LIMIT_MPS", "-1", "WA_OUTBOX_RATE_LIMIT_MPS"),
    ("WA_OUTBOX_RATE_LIMIT_MPS", "nan", "WA_OUTBOX_RATE_LIMIT_MPS"),
    ("PORT", "70000", "PORT"),
    ("LOG_LEVEL", "LOUD", "LOG_LEVEL"),
    ("WHATSAPP_API_BASE_URL", "graph.facebook.com", "WHATSAPP_API_BASE_URL"),
    ("WHATSAPP_PHONE_NUMBER_ID", "+1 555", "WHATSAPP_PHONE_NUMBER_ID"),
    ("WA_OUTBOX_API_TOKENS", "short", "at least 16 characters"),
    ("WA_OUTBOX_WEBHOOK_MAX_BYTES", "0", "WA_OUTBOX_WEBHOOK_MAX_BYTES"),
    ("WA_OUTBOX_WORKER_NICE", "20", "a niceness from 0 to 19"),
    ("WA_OUTBOX_WORKER_NICE", "-5", "a niceness from 0 to 19"),
])
def test_malformed_values_name_the_variable(name, value, fragment):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({**WEB_ENV, name: value})
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("missing", ["WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN", "WA_OUTBOX_API_TOKENS",
                                     "DATABASE_URL"])
def test_web_role_requires_its_variables(missing):
    env = {k: v for k, v in WEB_ENV.items() if k != missing}
    with pytest.raises(ConfigError, match=f"^{missing} is not set"):
        Settings.from_env(env).require_web()


def test_worker_role_requires_token_and_sender():
    with pytest.raises(ConfigError, match="^WHATSAPP_ACCESS_TOKEN is not set"):
        Settings.from_env(WEB_ENV).require_worker()
    Settings.from_env({**WEB_ENV, "WHATSAPP_ACCESS_TOKEN": "t", "WHATSAPP_PHONE_NUMBER_ID": "123"}).require_worker()


SECRETS = {"WHATSAPP_ACCESS_TOKEN": "EAAG-access-secret-1", "WHATSAPP_APP_SECRET": "app-secret-value-2",
           "WHATSAPP_VERIFY_TOKEN": "verify-secret-value-3", "WA_OUTBOX_API_TOKENS": "api-token-secret-4-0123456789"}


@pytest.mark.parametrize("name, value, secret", [
    ("WA_OUTBOX_API_TOKENS", "goodtoken0123456789,shortSECRET", "goodtoken0123456789"),
    ("WA_OUTBOX_API_TOKENS", "goodtoken0123456789,shortSECRET", "shortSECRET"),
    ("WA_OUTBOX_API_TOKENS", " , ", None),
    ("DATABASE_URL", "mysql://app:hunter2secret@db.example/app", "hunter2secret"),
    ("DATABASE_URL", "postgres//app:hunter2secret@db.example/app", "hunter2secret"),
    ("DATABASE_URL", "postgres://app:hunter2%zzsecret@db.example/app", "hunter2%zzsecret"),  # libpq quotes it
    ("DATABASE_URL", "postgres://app@db.example/app?password=hunter2secret&bogus=1", "hunter2secret"),
    ("DATABASE_URL", "postgres://app:hunter2secret@db.example:port/app", "hunter2secret"),
    ("WHATSAPP_API_BASE_URL", "ftp://app:hunter2secret@graph.example/v23.0", "hunter2secret"),
])
def test_configuration_errors_name_the_variable_never_a_secret(name, value, secret):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({**WEB_ENV, **SECRETS, name: value}).require_web()
    message = str(info.value)
    assert message.startswith(name) and "\n" not in message and "not valid" in message
    for hidden in [secret, *SECRETS.values()]:
        assert hidden is None or hidden not in message, message
    if name != "WA_OUTBOX_API_TOKENS" and "://" in value:
        assert "***" in message  # a URL is shown with its password masked


@pytest.mark.parametrize("name, value", [
    ("DATABASE_URL", "mysql://x"), ("WA_OUTBOX_RATE_LIMIT_MPS", "-1"), ("PORT", "x"), ("LOG_LEVEL", "LOUD"),
    ("WHATSAPP_API_BASE_URL", "graph"), ("WHATSAPP_PHONE_NUMBER_ID", "+1"), ("WA_OUTBOX_LEASE_SECONDS", "1"),
    ("WA_OUTBOX_INBOUND_HANDLERS", "not a path"), ("WA_OUTBOX_UNKNOWN_POLICY", "maybe"),
])
def test_no_configuration_error_quotes_a_secret_variable(name, value):
    """Every error the configuration can raise, with every secret-bearing variable set: none of them leaks."""
    env = {**WEB_ENV, **SECRETS, "DATABASE_URL": "postgres://app:hunter2secret@db.example/app",
           "WHATSAPP_PHONE_NUMBER_ID": "123", name: value}
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env).require_worker()
    assert str(info.value).startswith(name)
    for hidden in [*SECRETS.values(), "hunter2secret"]:
        assert hidden not in str(info.value)


def test_redact_url_and_scrub():
    assert redact_url("postgresql://u:pw@h:5432/db?sslmode=require&password=x") == \
        "postgresql://u:***@h:5432/db?sslmode=require&password=***"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert redact_url("not a url u:pw@h") == "***"
    assert scrub('bad token: "p%41ss" in postgresql://u:p%41ss@h/db', "postgresql://u:p%41ss@h/db") == \
        'bad token: "***" in postgresql://u:***@h/db'


def test_a_percent_encoded_sequence_that_is_no_utf8_is_one_line_naming_the_variable():
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"DATABASE_URL": "postgresql://app:se%A0cret@db.example/app"})
    message = str(info.value)
    assert message.startswith("DATABASE_URL=") and "not UTF-8" in message and "se%A0cret" not in message


def test_the_media_store_and_its_size_cap():
    from wa_outbox import media_store
    default = media_store.from_settings(Settings.from_env(WEB_ENV))
    assert (default.name, default.max_bytes) == ("postgres", 16 * 1024 * 1024)
    capped = media_store.from_settings(Settings.from_env({**WEB_ENV, "WA_OUTBOX_MEDIA_MAX_BYTES": "1000"}))
    assert (capped.name, capped.max_bytes) == ("postgres", 1000)
    pytest.importorskip("boto3")
    bucket = media_store.from_settings(Settings.from_env({**WEB_ENV,
                                                          "WA_OUTBOX_MEDIA_STORE": "s3://wa-media/inbound/x"}))
    assert (bucket.name, bucket.bucket, bucket.key_of(7)) == ("s3", "wa-media", "inbound/x/7")
    assert bucket.max_bytes == 100 * 1024 * 1024  # Meta's largest document
    for wrong in ("s3://", "s3://Bad_Bucket/p", "file:///tmp", "mysql"):
        with pytest.raises(ConfigError) as info:
            Settings.from_env({**WEB_ENV, "WA_OUTBOX_MEDIA_STORE": wrong})
        assert "WA_OUTBOX_MEDIA_STORE" in str(info.value)
    with pytest.raises(ConfigError, match="WA_OUTBOX_MEDIA_MAX_BYTES"):
        Settings.from_env({**WEB_ENV, "WA_OUTBOX_MEDIA_MAX_BYTES": "0"})
