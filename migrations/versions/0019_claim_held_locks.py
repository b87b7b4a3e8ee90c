"""The claim takes no lock twice: reserve_slots_set(held), and the bucket's shape as inlinable expressions.

Revision ID: 0019_claim_held_locks
Revises: 0018_sender_choice_plpgsql
"""
from wa_outbox.migrate import run_sql_file

revision = "0019_claim_held_locks"
down_revision = "0018_sender_choice_plpgsql"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0019_claim_held_locks.up.sql")


def downgrade() -> None:
    run_sql_file("0019_claim_held_locks.down.sql")
