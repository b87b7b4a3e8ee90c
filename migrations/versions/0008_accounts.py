"""Accounts: Meta apps and their secrets, business accounts, sender numbers and their tokens.

Revision ID: 0008_accounts
Revises: 0007_events
"""
from wa_outbox.migrate import run_sql_file

revision = "0008_accounts"
down_revision = "0007_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0008_accounts.up.sql")


def downgrade() -> None:
    run_sql_file("0008_accounts.down.sql")
