"""Build the app from the environment, for gunicorn."""

import sys

from flask import Flask

from .. import logs
from ..config import ConfigError, Settings


def build_app() -> Flask:
    from . import create_app
    try:
        settings = Settings.from_env().require_web()
    except ConfigError as exc:
        sys.stderr.write(f"wa-outbox: configuration error: {exc}\n")
        raise SystemExit(2) from None
    logs.configure(settings.log_level, settings.log_format)
    return create_app(settings)
