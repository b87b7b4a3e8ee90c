"""`prune` removes outbound files once no message names them: an index of the messages naming each upload, and the
enqueue trigger's lock on the file it checks.

Revision ID: 0014_prune_uploads
Revises: 0013_slot_lead
"""
from wa_outbox.migrate import run_sql_file

revision = "0014_prune_uploads"
down_revision = "0013_slot_lead"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0014_prune_uploads.up.sql")


def downgrade() -> None:
    run_sql_file("0014_prune_uploads.down.sql")
