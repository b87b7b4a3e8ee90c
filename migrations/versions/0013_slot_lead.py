"""Send slots reserved ahead of a claim start after the claim, not one slot interval from now.

Revision ID: 0013_slot_lead
Revises: 0012_media
"""
from wa_outbox.migrate import run_sql_file

revision = "0013_slot_lead"
down_revision = "0012_media"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0013_slot_lead.up.sql")


def downgrade() -> None:
    run_sql_file("0013_slot_lead.down.sql")
