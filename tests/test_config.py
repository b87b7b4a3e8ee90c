"""Configuration parsing and validation. No database."""

from __future__ import annotations

import pytest

from wa_outbox.config import DEFAULT_GRAPH_API_BASE_URL, ConfigError, Settings

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
    assert "EAAG-secret-token" not in text and "a" * 16 not in text and "p@db" in text  # URL shown, tokens not


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
