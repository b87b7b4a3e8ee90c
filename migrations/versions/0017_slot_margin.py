"""slot_margin(): the pacing schedule's margin, growing with the rate above Meta's highest throughput (1,000 mps).

Revision ID: 0017_slot_margin
Revises: 0016_deliveries_due_order
"""
from wa_outbox.migrate import run_sql_file

revision = "0017_slot_margin"
down_revision = "0016_deliveries_due_order"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0017_slot_margin.up.sql")


def downgrade() -> None:
    run_sql_file("0017_slot_margin.down.sql")
