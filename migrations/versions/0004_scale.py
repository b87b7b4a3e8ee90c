"""Scale: pacing by reserved send slots, faster bulk writes, a claim that stays flat as history grows, retention.

Revision ID: 0004_scale
Revises: 0003_operations
"""
from wa_outbox.migrate import run_sql_file

revision = "0004_scale"
down_revision = "0003_operations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0004_scale.up.sql")


def downgrade() -> None:
    run_sql_file("0004_scale.down.sql")
