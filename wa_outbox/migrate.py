"""Run the alembic migrations programmatically (`wa-outbox db upgrade|downgrade|current`).

The migrations live in the repository's top-level `migrations/` directory and ship inside the package as
`wa_outbox._migrations` (setup.py maps one onto the other), so an installed wheel migrates without a checkout.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from alembic import command, context, op
from alembic.config import Config
from alembic.script import ScriptDirectory

from . import db


def _migrations_dir() -> Path:
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "setup.py").is_file() and (checkout / "migrations" / "env.py").is_file():
        # the package imported from a checkout: that checkout's migrations/, even where the virtualenv's editable
        # install maps wa_outbox._migrations to another one's (a second worktree using the first one's .venv)
        return checkout / "migrations"
    try:  # installed (wheel or editable): migrations/ as the subpackage setup.py maps it to
        where = importlib.import_module(f"{__package__}._migrations").__file__
    except ImportError:  # a checkout used without installing it (PYTHONPATH=.)
        where = None
    if where is None:
        return Path(__file__).resolve().parent.parent / "migrations"
    return Path(where).resolve().parent


MIGRATIONS_DIR = _migrations_dir()


def alembic_config(database_url: str, prepared_statements: bool = True) -> Config:
    """`prepared_statements`: the settings' `db_prepared_statements` (migrations/env.py, db.connect_options)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["database_url"] = database_url
    cfg.attributes["prepared_statements"] = prepared_statements
    return cfg


def run_sql_file(name: str) -> None:
    """Run `<migrations>/sql/<name>` inside the running migration's transaction (every revision's upgrade and
    downgrade is one SQL file). The directory is the one alembic is running from — the package's or, with the
    checkout's alembic.ini, the repository's — so a revision script imports this the same way everywhere."""
    sql = (Path(context.script.dir) / "sql" / name).read_text()
    # Straight to psycopg, without parameters: it sends the file as one batch (many statements, `%` left alone).
    db.psycopg_connection(op.get_bind()).execute(sql)


def revisions() -> list[str]:
    """Every revision, oldest first."""
    script = ScriptDirectory.from_config(alembic_config(""))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def head() -> str:
    return revisions()[-1]


def upgrade(database_url: str, revision: str = "head", *, prepared_statements: bool = True) -> None:
    command.upgrade(alembic_config(database_url, prepared_statements), revision)


def downgrade(database_url: str, revision: str, *, prepared_statements: bool = True) -> None:
    command.downgrade(alembic_config(database_url, prepared_statements), revision)


def current(database_url: str, *, prepared_statements: bool = True) -> None:
    command.current(alembic_config(database_url, prepared_statements), verbose=False)
