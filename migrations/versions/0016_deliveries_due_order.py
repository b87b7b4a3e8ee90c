"""deliveries_due in the deliveries claim's order (endpoint_id, next_attempt_at, id): a claim reads what it takes.

Revision ID: 0016_deliveries_due_order
Revises: 0015_media_corrupt_fetches
"""
from wa_outbox.migrate import run_sql_file

revision = "0016_deliveries_due_order"
down_revision = "0015_media_corrupt_fetches"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0016_deliveries_due_order.up.sql")


def downgrade() -> None:
    run_sql_file("0016_deliveries_due_order.down.sql")
