"""Events for apps: the events feed, endpoints, their deliveries and delivery attempts.

Revision ID: 0007_events
Revises: 0006_ops_sessions_max_attempts
"""
from wa_outbox.migrate import run_sql_file

revision = "0007_events"
down_revision = "0006_ops_sessions_max_attempts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0007_events.up.sql")


def downgrade() -> None:
    run_sql_file("0007_events.down.sql")
