"""Inbound media count their corrupt downloads (bytes not the ones Meta declared) apart from their attempts.

Revision ID: 0015_media_corrupt_fetches
Revises: 0014_prune_uploads
"""
from wa_outbox.migrate import run_sql_file

revision = "0015_media_corrupt_fetches"
down_revision = "0014_prune_uploads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0015_media_corrupt_fetches.up.sql")


def downgrade() -> None:
    run_sql_file("0015_media_corrupt_fetches.down.sql")
