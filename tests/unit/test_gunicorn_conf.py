"""wa_outbox/gunicorn_conf.py as gunicorn reads it."""

from __future__ import annotations

import importlib
import sys

from gunicorn.config import Config


def test_no_access_line_is_built_unless_an_access_log_is_asked_for(monkeypatch):
    monkeypatch.setenv("WHATSAPP_APP_SECRET", "s")
    monkeypatch.setenv("WHATSAPP_VERIFY_TOKEN", "v")
    monkeypatch.setenv("WA_OUTBOX_API_TOKENS", "test-api-token-0123456789")
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/tmp")
    sys.modules.pop("wa_outbox.gunicorn_conf", None)
    conf = importlib.import_module("wa_outbox.gunicorn_conf")
    built = []

    def config(**settings) -> Config:
        cfg = Config()
        for name in ("logger_class", "logconfig_dict", "accesslog"):
            cfg.set(name, getattr(conf, name))
        for name, value in settings.items():
            cfg.set(name, value)
        return cfg

    for cfg, expected in ((config(), []), (config(accesslog="-"), ["built"])):
        logger = cfg.logger_class(cfg)
        monkeypatch.setattr(logger, "atoms", lambda *args: built.append("built") or {})
        logger.access(None, None, {}, None)
        assert built == expected
        built.clear()
    assert config().logger_class is conf.AccessLogOnlyWhenAsked
