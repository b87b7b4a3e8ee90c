"""Meta's messaging limit per business portfolio: the budget the claim spends.

Revision ID: 0009_portfolio_limits
Revises: 0008_accounts
"""
from wa_outbox.migrate import run_sql_file

revision = "0009_portfolio_limits"
down_revision = "0008_accounts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0009_portfolio_limits.up.sql")


def downgrade() -> None:
    run_sql_file("0009_portfolio_limits.down.sql")
