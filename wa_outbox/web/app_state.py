"""What create_app keeps on the Flask app for its views: the settings and the engine (app.extensions).

A module of its own so that the view modules import it at the top: the package's __init__ imports them."""

from __future__ import annotations

import sqlalchemy as sa
from flask import Flask

from ..config import Settings


def settings_of(app: Flask) -> Settings:
    return app.extensions["wa_outbox.settings"]


def engine_of(app: Flask) -> sa.Engine:
    return app.extensions["wa_outbox.engine"]
