"""The WSGI app for gunicorn: `gunicorn --config python:wa_outbox.gunicorn_conf wa_outbox.web.wsgi:app`.

`app` is built from the environment on first access, not on import, so importing this module (or `build_app`)
reads no configuration and opens no pool.
"""

from __future__ import annotations

import sys
from typing import Any

from flask import Flask

from .. import logs
from ..config import ConfigError, Settings
from . import create_app


def build_app() -> Flask:
    try:
        settings = Settings.from_env().require_web(apps_registered=True)
        logs.configure(settings.log_level, settings.log_format)
        return create_app(settings)  # checks, with its engine, that some secret verifies webhooks
    except ConfigError as exc:
        sys.stderr.write(f"wa-outbox: configuration error: {exc}\n")
        raise SystemExit(2) from None


def __getattr__(name: str) -> Any:
    # PEP 562: `wa_outbox.web.wsgi:app` builds the app once, when gunicorn looks it up.
    if name == "app":
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
