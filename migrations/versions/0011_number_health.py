"""Phone number quality and throughput as Meta reports them.

Revision ID: 0011_number_health
Revises: 0010_templates
"""
from wa_outbox.migrate import run_sql_file

revision = "0011_number_health"
down_revision = "0010_templates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0011_number_health.up.sql")


def downgrade() -> None:
    run_sql_file("0011_number_health.down.sql")
