"""Operations: pacing per sender and per recipient, recipient order, campaigns, metrics from the workers, the ops
page.

Revision ID: 0003_operations
Revises: 0002_hardening
"""
from wa_outbox.migrate import run_sql_file

revision = "0003_operations"
down_revision = "0002_hardening"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0003_operations.up.sql")


def downgrade() -> None:
    run_sql_file("0003_operations.down.sql")
