"""Initial schema: outbox, timeline, webhook events, contacts, rate limits, workers, enqueue(), support views.

Revision ID: 0001_initial_schema
Revises:
"""
from wa_outbox.migrate import run_sql_file

revision = "0001_initial_schema"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0001_initial_schema.up.sql")


def downgrade() -> None:
    run_sql_file("0001_initial_schema.down.sql")
