"""Media both ways: inbound media fetched and kept, outbound files sent from bytes.

Revision ID: 0012_media
Revises: 0011_number_health
"""
from wa_outbox.migrate import run_sql_file

revision = "0012_media"
down_revision = "0011_number_health"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0012_media.up.sql")


def downgrade() -> None:
    run_sql_file("0012_media.down.sql")
