"""default_sender() and sender_choice() in PL/pgSQL: their plans kept for the session, not made again on every call.

Revision ID: 0018_sender_choice_plpgsql
Revises: 0017_slot_margin
"""
from wa_outbox.migrate import run_sql_file

revision = "0018_sender_choice_plpgsql"
down_revision = "0017_slot_margin"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0018_sender_choice_plpgsql.up.sql")


def downgrade() -> None:
    run_sql_file("0018_sender_choice_plpgsql.down.sql")
