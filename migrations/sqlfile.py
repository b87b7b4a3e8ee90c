"""Migrations are plain SQL files in migrations/sql/, one pair (up, down) per revision: the schema is read as SQL."""

from pathlib import Path

from alembic import op

SQL_DIR = Path(__file__).parent / "sql"


def run_sql_file(name: str) -> None:
    # Straight to psycopg, without parameters: it sends the file as one batch (many statements, `%` left alone),
    # inside the migration's transaction.
    op.get_bind().connection.driver_connection.execute((SQL_DIR / name).read_text())
