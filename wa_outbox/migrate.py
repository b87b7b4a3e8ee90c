"""Run the alembic migrations programmatically (`wa-outbox db upgrade|downgrade|current`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("prepend_sys_path", str(MIGRATIONS_DIR.parent))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["database_url"] = database_url
    return cfg


def revisions() -> list[str]:
    """Every revision, oldest first."""
    from alembic.script import ScriptDirectory
    script = ScriptDirectory.from_config(alembic_config(""))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def head() -> str:
    return revisions()[-1]


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def current(database_url: str) -> None:
    command.current(alembic_config(database_url), verbose=False)
