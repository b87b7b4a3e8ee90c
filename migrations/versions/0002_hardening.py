"""Hardening: the retry policy owns max_attempts, the timeline's words checked, poison-proof inbound events, webhook
bodies Postgres cannot hold as jsonb, one message validation for every entry point, dead schema removed.

Revision ID: 0002_hardening
Revises: 0001_initial_schema
"""
from wa_outbox.migrate import run_sql_file

revision = "0002_hardening"
down_revision = "0001_initial_schema"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0002_hardening.up.sql")


def downgrade() -> None:
    run_sql_file("0002_hardening.down.sql")
