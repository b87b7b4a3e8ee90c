"""/ops sessions kept in Postgres (logout and token removal end them at once), and version 1's per-row
max_attempts = 10 handed back to WA_OUTBOX_MAX_ATTEMPTS.

Revision ID: 0006_ops_sessions_max_attempts
Revises: 0005_speed
"""
from wa_outbox.migrate import run_sql_file

revision = "0006_ops_sessions_max_attempts"
down_revision = "0005_speed"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0006_ops_sessions_max_attempts.up.sql")


def downgrade() -> None:
    run_sql_file("0006_ops_sessions_max_attempts.down.sql")
