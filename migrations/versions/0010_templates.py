"""The template lifecycle: templates, their status, and messages held by it.

Revision ID: 0010_templates
Revises: 0009_portfolio_limits
"""
from wa_outbox.migrate import run_sql_file

revision = "0010_templates"
down_revision = "0009_portfolio_limits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0010_templates.up.sql")


def downgrade() -> None:
    run_sql_file("0010_templates.down.sql")
